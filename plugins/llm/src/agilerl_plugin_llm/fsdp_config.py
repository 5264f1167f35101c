"""The ``fsdp`` field and ``accelerate launch --use_fsdp`` flags, read without torch: what validation
checks (:func:`check_field`, :func:`env_problems`) and which sharding a run applies
(:func:`settings`). The sharding itself is :mod:`agilerl_plugin_llm.fsdp`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from agilerl.errors import closest

#: AgileRL's ``FSDPConfig`` fields and defaults (``agilerl.arena.models.fsdp``).
UPSTREAM_DEFAULTS: dict[str, Any] = {
    "reshard_after_forward": True,
    "cpu_offload": False,
    "optim_cpu_offload": True,
    "defer_grad_sync": True,
    "param_dtype": "bfloat16",
    "reduce_dtype": "float32",
    "prefetch_units": 1,
    "backward_prefetch_units": 1,
    "checkpoint_skip_layer_types": [],
    "checkpoint_every_n_blocks": 1,
    "wrap_every_n_blocks": 1,
    "param_persistence_threshold": 100000,
    "ep": 1,
    "ep_token_blocks": 1,
    "tp": 1,
    "shard_group_size": None,
    "compile_blocks": False,
    "compile_backend": "inductor",
}

#: Fields whose only value here is the one shown (with why).
_ONLY: dict[str, tuple[Any, str]] = {
    "cpu_offload": (False, "CPU offload of sharded parameters is not implemented"),
    "prefetch_units": (1, "FSDP2's own prefetch (one unit ahead) is the only one here"),
    "backward_prefetch_units": (1, "FSDP2's own prefetch (one unit ahead) is the only one here"),
    "checkpoint_skip_layer_types": (
        [],
        "per-block activation checkpointing choices are not implemented "
        "(gradient_checkpointing checkpoints every block)",
    ),
    "checkpoint_every_n_blocks": (1, "per-block activation checkpointing choices are not implemented"),
    "wrap_every_n_blocks": (1, "one FSDP unit per transformer block is the only wrapping here"),
    "ep": (1, "expert parallelism is not implemented"),
    "ep_token_blocks": (1, "expert parallelism is not implemented"),
    "tp": (1, "tensor parallelism is not implemented"),
    "compile_blocks": (False, "torch.compile of the blocks is not implemented"),
    "param_dtype": ("float32", "mixed-precision FSDP is not implemented (weights train in float32 here)"),
    "reduce_dtype": ("float32", "mixed-precision FSDP is not implemented (gradients reduce in float32 here)"),
}


def field_problems(value: Any) -> list[tuple[str, str, Any]]:
    """Why the manifest's ``fsdp`` value cannot run here, as ``(key, why, value)`` per ``fsdp.<key>``
    (key ``""``: the field itself); empty when it can, or when it is off."""
    if value in (None, False):
        return []
    if value is True:
        value = {}
    if not isinstance(value, Mapping):
        return [("", "expected true, false or a mapping of FSDPConfig fields", value)]
    problems: list[tuple[str, str, Any]] = []
    settings = {**UPSTREAM_DEFAULTS, **dict(value)}
    for key in value:
        if key not in UPSTREAM_DEFAULTS:
            hint = closest(str(key), list(UPSTREAM_DEFAULTS))
            fix = f"; did you mean {hint!r}?" if hint else f" (known: {', '.join(sorted(UPSTREAM_DEFAULTS))})"
            problems.append((str(key), f"not an FSDPConfig field{fix}", value[key]))
    for key, (only, why) in _ONLY.items():
        if settings[key] != only:
            if key in value:
                problems.append((key, f"cannot run here: {why}; use {only!r}", settings[key]))
            else:
                problems.append((key, f"AgileRL's default cannot run here: {why}; set it explicitly to {only!r}",
                                 settings[key]))  # fmt: skip
    threshold = settings["param_persistence_threshold"]
    if not isinstance(threshold, int) or threshold < 0:
        problems.append(("param_persistence_threshold", "expected an integer >= 0", threshold))
    group = settings["shard_group_size"]
    if group is not None and (not isinstance(group, int) or group < 1):
        problems.append(("shard_group_size", "expected null or an integer >= 1", group))
    return problems


def check_field(value: Any) -> Any:
    """``value`` when :func:`field_problems` finds nothing; else a pydantic ``ValidationError`` with one
    error per ``fsdp.<key>`` (a field validator raising it reports ``algorithm.fsdp.<key>``)."""
    problems = field_problems(value)
    if not problems:
        return value
    from pydantic import ValidationError
    from pydantic_core import InitErrorDetails, PydanticCustomError

    errors = [
        InitErrorDetails(type=PydanticCustomError("fsdp", why), loc=(key,) if key else (), input=given)
        for key, why, given in problems
    ]
    raise ValidationError.from_exception_data("fsdp", errors)


def _flag(env: Mapping[str, str], key: str, default: str = "false") -> bool:
    return env.get(key, default).strip().lower() in ("true", "1", "yes")


def env_problems(env: Mapping[str, str]) -> list[str]:
    """What an ``accelerate launch --use_fsdp`` asked for that this sharding does not do."""
    if not _flag(env, "ACCELERATE_USE_FSDP"):
        return []
    out = []
    version = env.get("FSDP_VERSION", "1").strip()
    if version != "2":
        out.append(f"accelerate launch --use_fsdp with fsdp_version {version}: FSDP1 (FullyShardedDataParallel) "
                   "is not implemented; pass --fsdp_version 2 (FSDP2, fully_shard)")  # fmt: skip
    reshard = env.get("FSDP_RESHARD_AFTER_FORWARD", "true").strip()
    if reshard.upper() not in ("TRUE", "FALSE", "FULL_SHARD", "SHARD_GRAD_OP", "1", "0"):
        out.append(f"--fsdp_reshard_after_forward {reshard}: only true/false (FULL_SHARD/SHARD_GRAD_OP) run here")
    policy = env.get("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP").strip().upper()
    if policy not in ("TRANSFORMER_BASED_WRAP", "NO_WRAP"):
        out.append(f"--fsdp_auto_wrap_policy {policy}: only TRANSFORMER_BASED_WRAP (one unit per transformer "
                   "block) and NO_WRAP (the root alone) are implemented")  # fmt: skip
    for key, flag, why in (
        ("FSDP_OFFLOAD_PARAMS", "--fsdp_offload_params", "CPU offload of sharded parameters is not implemented"),
        ("FSDP_ACTIVATION_CHECKPOINTING", "--fsdp_activation_checkpointing",
         "use algorithm.gradient_checkpointing: true instead"),
        ("FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD", "--fsdp_activation_checkpointing_offload",
         "activation offloading is not implemented"),
    ):  # fmt: skip
        if _flag(env, key):
            out.append(f"{flag} true: {why}")
    state = env.get("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT").strip().upper()
    if state != "FULL_STATE_DICT":
        out.append(f"--fsdp_state_dict_type {state}: checkpoints here always hold full tensors (FULL_STATE_DICT)")
    if env.get("FSDP_IGNORED_MODULES"):
        out.append("--fsdp_ignored_modules: not implemented (every module is sharded)")
    return out


def settings(spec_value: Any, env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The sharding to apply (None: none). The manifest's ``fsdp`` field wins over accelerate's flags."""
    env = dict(os.environ) if env is None else env
    launched = _flag(env, "ACCELERATE_USE_FSDP")
    if spec_value in (None, False) and not launched:
        return None
    out: dict[str, Any] = {"reshard_after_forward": True, "defer_grad_sync": True, "param_persistence_threshold": 0,
                           "shard_group_size": None, "optim_cpu_offload": False, "wrap": None,
                           "auto_wrap": True}  # fmt: skip
    if launched:
        reshard = env.get("FSDP_RESHARD_AFTER_FORWARD", "true").strip().upper()
        out["reshard_after_forward"] = reshard in ("TRUE", "FULL_SHARD", "1")
        classes = env.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "").strip()
        out["wrap"] = [c.strip() for c in classes.split(",") if c.strip()] or None
        out["auto_wrap"] = env.get("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP").strip().upper() != "NO_WRAP"
    if spec_value not in (None, False):
        given = {} if spec_value is True else dict(spec_value)
        full = {**UPSTREAM_DEFAULTS, **given}
        for key in (
            "reshard_after_forward",
            "defer_grad_sync",
            "param_persistence_threshold",
            "shard_group_size",
            "optim_cpu_offload",
        ):
            out[key] = full[key]
    return out


__all__ = ["UPSTREAM_DEFAULTS", "check_field", "env_problems", "field_problems", "settings"]
