"""``agilerl export``: a trained policy loads with plain transformers / peft and generates exactly what
the trained policy generates; paths in a checkpoint are absolute, so it resumes from another directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"


def train_tiny(model_dir: Path, run_dir: Path, run_cli: Callable[..., Any], write_manifest: Callable[..., Path],
               *, lora: bool) -> Path:  # fmt: skip
    manifest: dict[str, Any] = {
        "algorithm": {"name": "SFT", "batch_size": 4, "lr": 0.05, "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
        "environment": {"env_type": "sft", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "columns": {"prompt": "question"}, "response_column": "answer"},
        "training": {"max_steps": 3, "evo_steps": 3, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }  # fmt: skip
    if lora:
        manifest["network"]["lora_config"] = {"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0}
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    return run_dir


def greedy(model: Any, tokenizer: Any, prompt: str) -> list[int]:
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return [int(t) for t in out[0, ids.shape[1] :]]


PROMPTS = ["Say the magic number.", "What is the magic number? Ask the sun."]


def logits(model: Any, tokenizer: Any) -> torch.Tensor:
    ids = tokenizer(PROMPTS[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_export_loads_with_plain_transformers_and_generates_like_the_policy(
    lora: bool, tiny_model_dir: Path, tmp_path: Path, run_cli: Callable[..., Any],
    write_manifest: Callable[..., Path],
) -> None:  # fmt: skip
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agilerl_plugin_llm.export import load_policy

    run = train_tiny(tiny_model_dir, tmp_path / "run", run_cli, write_manifest, lora=lora)
    agent, _, _ = load_policy(run)
    agent.model.eval()
    policy = [greedy(agent.model, agent.tokenizer, p) for p in PROMPTS]
    policy_logits = logits(agent.model, agent.tokenizer)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert not torch.allclose(logits(base, agent.tokenizer), policy_logits, atol=1e-4)  # training moved it

    formats = ["adapter", "merged"] if lora else ["merged"]
    for fmt in formats:
        out = tmp_path / f"export-{fmt}"
        code, text, err = run_cli("export", str(run), str(out), "--format", fmt)
        assert code == 0, text + err
        tokenizer = AutoTokenizer.from_pretrained(out)
        if fmt == "adapter":
            config = json.loads((out / "adapter_config.json").read_text())
            assert config["base_model_name_or_path"] == str(tiny_model_dir.resolve())
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), out)
        else:
            assert (out / "model.safetensors").is_file()
            model = AutoModelForCausalLM.from_pretrained(out)
        model.eval()
        assert [greedy(model, tokenizer, p) for p in PROMPTS] == policy, fmt
        # Float32 rounding only: merging B @ A into W moves logits of size ~6 by ~1e-5 (2e-6 relative).
        assert torch.allclose(logits(model, tokenizer), policy_logits, atol=5e-5), fmt
        card = (out / "README.md").read_text()
        assert "## Training manifest" in card and "name: SFT" in card and str(EXAMPLES / "say_eight.jsonl") in card
    code, _, err = run_cli("export", str(run), str(tmp_path / "export-merged" if lora else out))
    assert code != 0 and "not empty" in err


def test_export_refuses_an_adapter_of_a_full_fine_tune(
    tiny_model_dir: Path, tmp_path: Path, run_cli: Callable[..., Any], write_manifest: Callable[..., Path]
) -> None:
    run = train_tiny(tiny_model_dir, tmp_path / "run", run_cli, write_manifest, lora=False)
    code, _, err = run_cli("export", str(run), str(tmp_path / "out"), "--format", "adapter")
    assert code != 0 and "needs a LoRA run" in err


def test_a_checkpoint_resumes_from_another_working_directory(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., Any],
    write_manifest: Callable[..., Path],
) -> None:  # fmt: skip
    import shutil

    import yaml

    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    shutil.copytree(tiny_model_dir, work / "model")
    for name in ("say_eight.jsonl", "say_word_rubric.py"):
        shutil.copy(EXAMPLES / name, work / "data" / name)
    manifest = {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "max_output_tokens": 4,
                      "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": "model", "max_context_length": 128},
        "environment": {"env_type": "reasoning", "dataset_path": "data/say_eight.jsonl",
                        "rubric_file_path": "./data/say_word_rubric.py"},
        "training": {"max_steps": 2, "evo_steps": 1, "seed": 0, "progress": False, "run_dir": "run",
                     "checkpoint_steps": 1},
    }  # fmt: skip
    (work / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    monkeypatch.chdir(work)
    code, out, err = run_cli("train", "manifest.yaml")
    assert code == 0, out + err
    first = sorted((work / "run").glob("checkpoint_*.pt"))[0]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = run_cli(
        "train", "--resume", str(first), "--run-dir", str(elsewhere / "resumed"), "--trust-checkpoint"
    )
    assert code == 0, out + err
    stored = torch.load(elsewhere / "resumed" / "elite.pt", weights_only=True)["manifest"]
    assert stored["algorithm"]["pretrained_model_name_or_path"] == str((work / "model").resolve())
    assert stored["environment"]["dataset_path"] == str((work / "data" / "say_eight.jsonl").resolve())
    assert stored["environment"]["rubric_file_path"] == str((work / "data" / "say_word_rubric.py").resolve())


def test_export_applies_the_trust_rule_and_the_one_no_checkpoint_message(
    tiny_model_dir: Path, tmp_path: Path, run_cli: Callable[..., Any], write_manifest: Callable[..., Path]
) -> None:
    import sys

    from agilerl import checkpoint
    from agilerl_plugin_llm.export import find_checkpoint

    run = train_tiny(tiny_model_dir, tmp_path / "run", run_cli, write_manifest, lora=True)
    payload = checkpoint.load(find_checkpoint(run))
    flag = tmp_path / "imported"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "llm_trust_marker.py").write_text(f"open({str(flag)!r}, 'w').write('x')\n")
    sys.path.insert(0, str(tmp_path / "mods"))
    try:
        payload["manifest"]["environment"]["observation_processor"] = "llm_trust_marker:process"
        crafted = tmp_path / "crafted.pt"
        checkpoint.save(crafted, payload)
        code, _, err = run_cli("export", str(crafted), str(tmp_path / "out"))
        assert code == 1 and "names code that exporting would import" in err and "observation_processor" in err
        assert "--trust-checkpoint" in err and not flag.exists() and "llm_trust_marker" not in sys.modules
    finally:
        sys.path.remove(str(tmp_path / "mods"))
    code, _, err = run_cli("export", str(tmp_path / "missing"), str(tmp_path / "out2"))
    assert code == 2 and "no checkpoint at" in err
