"""``agilerl export-policy``: a trained agent's policy as a standalone ONNX or TorchScript file.

The file holds the policy network alone, with its observation preprocessing (one-hot encoding,
image scaling), mapping a batch of raw observations (input ``observation``, shape ``(N, *obs)``)
to a batch of env actions (output ``action``): deployable with onnxruntime, or with
``torch.jit.load``, and none of agilerl. The agent's plugin provides the module
(:class:`agilerl.inference.PolicyExporter`); ONNX export needs ``pip install 'agilerl-core[export]'``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError
from agilerl.inference import PolicyExporter, algorithm_and_plugin, load

FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}


def default_output(source: str | os.PathLike[str], fmt: str) -> Path:
    """``RUN/policy.onnx`` for a run directory, ``<ckpt>.policy.onnx`` beside a checkpoint file."""
    p = Path(source)
    suffix = FORMATS[fmt]
    if p.is_dir():
        return p / f"policy{suffix}"
    return p.with_name(f"{p.stem}.policy{suffix}")


def export_policy(
    source: str | os.PathLike[str] | Any,
    *,
    format: str = "onnx",
    output: str | os.PathLike[str] | None = None,
    member: int | None = None,
    which: str = "best",
    trust: bool = False,
    manifest: Any = None,
) -> Path:
    """Write the greedy policy of ``source`` (checkpoint, run directory or loaded agent) to a file.

    Beside it, ``<output>.json`` records the input and output names, the observation shape and
    dtype, and the checkpoint it came from. An agent with ``example_extra_inputs()`` (a mapping of
    name to a batch-of-one example) exports a module taking those inputs after the observation, in
    that order (a masked policy's ``action_mask``). ``trust`` and ``manifest`` are :func:`agilerl.load`'s.
    """
    fmt = format.lower()
    if fmt not in FORMATS:
        raise AgileRLError(f"--format must be one of {', '.join(FORMATS)}; got {format!r}")
    if isinstance(source, (str, os.PathLike)):
        agent = load(source, device="cpu", member=member, which=which, trust=trust, manifest=manifest)
        out = Path(output) if output else default_output(source, fmt)
    else:
        agent = source
        if output is None:
            raise AgileRLError("export_policy(agent) needs output=")
        out = Path(output)
    if not isinstance(agent, PolicyExporter):
        ckpt = getattr(agent, "checkpoint_path", None) or "CHECKPOINT"
        raise AgileRLError(
            f"agilerl export-policy cannot write a TorchScript or ONNX file for {algorithm_and_plugin(agent)}. "
            f"Instead: use the checkpoint itself from Python (agent = agilerl.load('{ckpt}'); "
            "agent.test(env) plays it); or ask the plugin's author to support export-policy."
        )
    import numpy as np
    import torch

    module = agent.policy_module()
    example = torch.as_tensor(np.asarray(agent.example_observation()))
    # Inputs after the observation that the policy module takes (e.g. {"action_mask": ...}), by name.
    extra_fn = getattr(agent, "example_extra_inputs", None)
    extra = {k: torch.as_tensor(np.asarray(v)) for k, v in (extra_fn() if callable(extra_fn) else {}).items()}
    inputs = (example, *extra.values())
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        if fmt == "torchscript":
            # torch 2.13 marks TorchScript deprecated; the file still loads with torch.jit.load.
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.trace(module, inputs).save(str(out))  # type: ignore[no-untyped-call]
        else:
            _onnx(module, inputs, ["observation", *extra], out)
    meta = {
        "format": fmt,
        "input": "observation",
        **({"extra_inputs": {k: list(v.shape[1:]) for k, v in extra.items()}} if extra else {}),
        "output": "action",
        "observation_shape": list(example.shape[1:]),
        "observation_dtype": str(example.dtype).replace("torch.", ""),
        "algorithm": getattr(getattr(agent, "spec", None), "name", type(agent).__name__),
        "checkpoint": str(getattr(agent, "checkpoint_path", "")),
    }
    out.with_name(out.name + ".json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out


def _onnx(module: Any, inputs: tuple[Any, ...], names: list[str], out: Path) -> None:
    import importlib.util

    import torch

    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise AgileRLError(f"ONNX export needs {', '.join(missing)}: pip install 'agilerl-core[export]'")
    batch = torch.export.Dim("batch")
    # The exporter prints its progress, logs and warns about things that do not concern a policy
    # network (torchvision ops, its own deprecations): keep our output to our own lines.
    onnx_log = logging.getLogger("torch.onnx")
    old_level = onnx_log.level
    onnx_log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                module,
                inputs,
                input_names=names,
                output_names=["action"],
                dynamic_shapes=tuple({0: batch} for _ in inputs),
                dynamo=True,
                verbose=False,
            )
    finally:
        onnx_log.setLevel(old_level)
    if program is None:  # pragma: no cover - the dynamo exporter always returns a program
        raise AgileRLError("torch.onnx.export returned no program")
    program.save(str(out))


__all__ = ["FORMATS", "default_output", "export_policy"]
