"""``agilerl export RUN_OR_CHECKPOINT OUT_DIR``: a trained LLM policy as a plain Hugging Face directory.

* ``--format merged``: the actor adapter merged into the base (or the fully fine-tuned weights),
  written with ``save_pretrained`` (safetensors); loads with ``AutoModelForCausalLM.from_pretrained``.
* ``--format adapter`` (LoRA runs): the actor adapter alone, loadable with
  ``peft.PeftModel.from_pretrained(base, OUT_DIR)``; its config names the base model's resolved path.
* ``auto`` (default): adapter for LoRA runs, merged otherwise.

Both get the tokenizer and a model card (``README.md``) listing the manifest the policy was trained
with. ``--push-to-hub REPO`` uploads the directory afterwards (the only network use, and only then).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError

FORMATS = ("auto", "merged", "adapter")


class ExportError(AgileRLError):
    """The run or checkpoint cannot be exported."""


def find_checkpoint(source: str | Path) -> Path:
    """``source`` itself if it is a file; in a run directory, ``elite.pt`` else its newest checkpoint."""
    from agilerl.checkpoint import no_checkpoint

    path = Path(source).expanduser()
    if path.is_file():
        return path
    if not path.is_dir():
        raise no_checkpoint(path)
    elite = path / "elite.pt"
    if elite.is_file():
        return elite
    found = sorted(path.glob("*.pt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise no_checkpoint(path, "elite.pt and *.pt")
    return found[-1]


def load_policy(source: str | Path, *, agent_index: int = 0, trust: bool = False) -> tuple[Any, Any, Path]:
    """``(agent, manifest, checkpoint_path)``: population member ``agent_index`` rebuilt from a checkpoint.

    Code the stored manifest names (a rubric or reward file, an env entrypoint) is imported only if
    a plugin registers it, or with ``trust`` (``--trust-checkpoint``): core's trust rule.
    """
    import agilerl.checkpoint as checkpoint
    from agilerl.models.manifest import load_manifest
    from agilerl.trust import require_trust
    from agilerl_plugin_llm.builder import LLMBuilder  # deferred: torch, kept out of registration and validation
    from agilerl_plugin_llm.model import load_tokenizer  # deferred: torch, kept out of registration and validation

    path = find_checkpoint(source)
    payload = checkpoint.load(path)
    require_trust(str(path), payload.get("manifest") or {}, trusted=trust, doing="exporting",
                  remedy="Pass --trust-checkpoint (trust=True in Python) if you wrote this checkpoint yourself.")  # fmt: skip
    manifest = load_manifest(payload["manifest"])
    spec: Any = manifest.algorithm
    if getattr(spec, "paradigm", None) != "llm":
        raise ExportError(f"{path} holds a {spec.name} run; agilerl export writes LLM policies only")
    agents = payload.get("agents") or []
    if not 0 <= agent_index < len(agents):
        raise ExportError(f"{path} holds {len(agents)} agent(s); --agent {agent_index} is out of range")
    tokenizer = load_tokenizer(
        spec.pretrained_model_name_or_path, chat_template_path=getattr(manifest.environment, "chat_template_path", None)
    )
    agent = LLMBuilder.build(spec, tokenizer=tokenizer)
    agent.load_state_dict(agents[agent_index])
    return agent, manifest, path


def model_card(manifest: Any, agent: Any, checkpoint_path: Path, fmt: str) -> str:
    import yaml

    spec = manifest.algorithm
    base = spec.pretrained_model_name_or_path
    auto = getattr(agent, "auto_class", "AutoModelForCausalLM")
    usage = (
        "from peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f"base = AutoModelForCausalLM.from_pretrained({base!r})\nmodel = PeftModel.from_pretrained(base, 'OUT_DIR')\n"
        "tokenizer = AutoTokenizer.from_pretrained('OUT_DIR')\n"
        if fmt == "adapter"
        else f"from transformers import {auto}, AutoTokenizer\n\n"
        f"model = {auto}.from_pretrained('OUT_DIR')\ntokenizer = AutoTokenizer.from_pretrained('OUT_DIR')\n"
    )
    fitness = f"{agent.fitness[-1]:.6g}" if getattr(agent, "fitness", None) else "not evaluated"
    return (
        f"---\nlibrary_name: {'peft' if fmt == 'adapter' else 'transformers'}\nbase_model: {base}\n"
        f"tags: [agilerl, {spec.name}]\n---\n\n"
        f"# {spec.name} fine-tune of `{base}`\n\n"
        f"Trained with agilerl ({spec.name}, {agent.steps} steps; last fitness {fitness}) and exported from "
        f"`{checkpoint_path.name}` as {'a LoRA adapter' if fmt == 'adapter' else 'a merged model'}.\n\n"
        f"## Use\n\n```python\n{usage}```\n\n"
        f"## Training manifest\n\n```yaml\n{yaml.safe_dump(manifest.to_dict(), sort_keys=False)}```\n"
    )


def export(
    source: str | Path,
    out_dir: str | Path,
    *,
    fmt: str = "auto",
    agent_index: int = 0,
    push_to_hub: str | None = None,
    trust: bool = False,
) -> Path:
    """Write population member ``agent_index`` of ``source`` (a run directory or checkpoint) to ``out_dir``."""
    from agilerl_plugin_llm import model as llm_model  # deferred: torch, kept out of registration and validation

    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    agent, manifest, path = load_policy(source, agent_index=agent_index, trust=trust)
    lora = llm_model.is_peft(agent.model)
    if fmt == "auto":  # a reward model exports merged: the directory GRPO's environment.reward_model loads
        fmt = getattr(agent, "export_format", None) or ("adapter" if lora else "merged")
    if fmt == "adapter" and not lora:
        raise ExportError("--format adapter needs a LoRA run (network.lora_config); this run trained every weight")
    if fmt == "merged" and getattr(agent.spec, "quantization", None) not in (None, "none", "None", False, {}):
        raise ExportError(
            "--format merged would merge the adapter into a quantized (QLoRA) base; export --format adapter "
            "and apply it to the full-precision base (peft.PeftModel.from_pretrained)"
        )
    out = Path(out_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{str(out)!r} is not empty; export into a new or empty directory")
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "merged":
        llm_model.export_merged(agent.model, agent.tokenizer, out)
    else:
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            # peft writes a non-default adapter into a sub-directory named after it: lift it to OUT_DIR.
            with warnings.catch_warnings():  # peft probes a deprecated transformers attribute: noise
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
                agent.model.save_pretrained(tmp, selected_adapters=[llm_model.ACTOR])
            adapter_dir = Path(tmp) / llm_model.ACTOR
            for item in adapter_dir.iterdir():
                shutil.move(str(item), out / item.name)
        agent.tokenizer.save_pretrained(out)
    (out / "README.md").write_text(model_card(manifest, agent, path, fmt), encoding="utf-8")
    if push_to_hub:
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(push_to_hub, exist_ok=True)
        api.upload_folder(repo_id=push_to_hub, folder_path=str(out))
    return out


def cmd_export(args: argparse.Namespace) -> int:
    out = export(
        args.source, args.out_dir, fmt=args.format, agent_index=args.agent, push_to_hub=args.push_to_hub,
        trust=args.trust_checkpoint,
    )  # fmt: skip
    print(f"exported to {out}")
    if args.push_to_hub:
        print(f"pushed to https://huggingface.co/{args.push_to_hub}")
    return 0


def register_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export", help="write a trained LLM policy as a Hugging Face model or LoRA adapter directory"
    )
    p.add_argument("source", metavar="RUN_OR_CHECKPOINT", help="a run directory (its elite.pt) or a checkpoint file")
    p.add_argument("out_dir", metavar="OUT_DIR", help="a new or empty directory")
    p.add_argument("--format", choices=FORMATS, default="auto", help="auto: adapter for LoRA runs, else merged")
    p.add_argument("--agent", type=int, default=0, help="population member to export (default 0: the best)")
    p.add_argument("--push-to-hub", metavar="REPO", help="upload the export to this Hugging Face Hub repo")
    p.add_argument(
        "--trust-checkpoint", action="store_true",
        help="import the code the checkpoint's stored manifest names (rubric files, env entrypoints) even if no "
        "plugin registers it",
    )  # fmt: skip
    p.set_defaults(handler=cmd_export)


__all__ = ["ExportError", "export", "find_checkpoint", "load_policy", "model_card", "register_commands"]
