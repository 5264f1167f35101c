"""Bad input to SFT/DPO runs: a clear error (exit 1, the field and the fix, no traceback) before any training."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agilerl_plugin_llm.testing import build_tiny_model

DATA = Path(__file__).resolve().parents[3] / "examples" / "data" / "llm"


def _manifest(model: str | Path, run_dir: Path, **env: Any) -> dict[str, Any]:
    algorithm = env.pop("algorithm", {"name": "SFT"})
    max_len = env.pop("max_context_length", 128)
    return {
        "algorithm": {"gradient_checkpointing": False, "batch_size": 4, **algorithm},
        "network": {"pretrained_model_name_or_path": str(model), "max_context_length": max_len,
                    "lora_config": {"lora_r": 4}},
        "environment": {"env_type": "dataset", "dataset_path": str(DATA / "sft_tiny.jsonl"), **env},
        "training": {"max_steps": 2, "evo_steps": 1, "seed": 0, "run_dir": str(run_dir), "progress": False},
    }  # fmt: skip


def _fails(run_cli: Callable[..., Any], path: Path, *needles: str, command: str = "train") -> str:
    code, out, err = run_cli(command, path)
    text = out + err
    assert code == 1, text
    assert "Traceback" not in text, text
    for needle in needles:
        assert needle in text, text
    return text


def _not_trained(run_dir: Path) -> None:
    metrics = run_dir / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text().strip()


def test_model_path_missing(tmp_path: Path, write_manifest: Any, run_cli: Any) -> None:
    path = write_manifest(_manifest(tmp_path / "no-such-model", tmp_path / "run"))
    _fails(run_cli, path, "pretrained_model_name_or_path", "no such directory", "build-tiny-model", command="validate")
    _not_trained(tmp_path / "run")


def test_model_path_required(tmp_path: Path, write_manifest: Any, run_cli: Any) -> None:
    manifest = _manifest("x", tmp_path / "run")
    del manifest["network"]["pretrained_model_name_or_path"]
    _fails(run_cli, write_manifest(manifest), "network.pretrained_model_name_or_path", "required", command="validate")


def test_model_id_not_in_local_cache(tmp_path: Path, write_manifest: Any, run_cli: Any) -> None:
    path = write_manifest(_manifest("agilerl-tests/no-such-model", tmp_path / "run"))
    _fails(run_cli, path, "not in the local Hugging Face cache", "never downloads")
    _not_trained(tmp_path / "run")


def test_dataset_missing_required_column(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Any, run_cli: Any
) -> None:
    rows = tmp_path / "pairs.jsonl"
    rows.write_text("\n".join(json.dumps({"prompt": f"q{i}", "chosen": "yes"}) for i in range(5)))
    path = write_manifest(
        _manifest(tiny_model_dir, tmp_path / "run", algorithm={"name": "DPO"}, dataset_path=str(rows))
    )
    _fails(run_cli, path, "'rejected'", "environment.columns")
    _not_trained(tmp_path / "run")


def test_columns_remap_names_bad_mapping(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Any, run_cli: Any
) -> None:
    path = write_manifest(_manifest(tiny_model_dir, tmp_path / "run", columns={"prompt": "question"}))
    _fails(run_cli, path, "environment.columns", "'question'")


def test_chat_template_missing(tmp_path: Path, write_manifest: Any, run_cli: Any) -> None:
    model = build_tiny_model(tmp_path / "plain-model", chat_template=None)
    path = write_manifest(_manifest(model, tmp_path / "run"))
    _fails(run_cli, path, "no chat template", "chat_template_path", "apply_chat_template: false")
    _not_trained(tmp_path / "run")


def test_rows_all_longer_than_context(tiny_model_dir: Path, tmp_path: Path, write_manifest: Any, run_cli: Any) -> None:
    path = write_manifest(_manifest(tiny_model_dir, tmp_path / "run", max_context_length=6))
    _fails(run_cli, path, "longer than max_context_length=6", "network.max_context_length")
    _not_trained(tmp_path / "run")


def test_dataset_file_missing(tiny_model_dir: Path, tmp_path: Path, write_manifest: Any, run_cli: Any) -> None:
    path = write_manifest(_manifest(tiny_model_dir, tmp_path / "run", dataset_path=str(tmp_path / "nope.jsonl")))
    _fails(run_cli, path, "environment.dataset_path", "no such file", command="validate")


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"env_hosts": 2}, ("not supported", "env_hosts")),
        ({"env_image": "img:1"}, ("not supported", "env_image")),
        ({"segment_prompt_tokens": 64}, ("not supported", "segment_prompt_tokens")),
        ({"restart_keep_turns": 2}, ("not supported", "restart_keep_turns")),
        ({"rubric_file_path": "r.py"}, ("only apply to env_type: rollout",)),
        ({"objective": "preference"}, ("environment.objective", "sft")),
    ],
)
def test_manifest_validation_errors(
    tiny_model_dir: Path,
    tmp_path: Path,
    write_manifest: Any,
    run_cli: Any,
    env: dict[str, Any],
    needles: tuple[str, ...],
) -> None:
    path = write_manifest(_manifest(tiny_model_dir, tmp_path / "run", **env))
    _fails(run_cli, path, *needles, command="validate")


def test_algorithm_unsupported_and_batching_fields(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Any, run_cli: Any
) -> None:
    bad = {"name": "SFT", "quantization": "4bit", "micro_batch_size_per_gpu": 3, "mini_batch_size": 4}
    path = write_manifest(_manifest(tiny_model_dir, tmp_path / "run", algorithm=bad))
    _fails(run_cli, path, "quantization", "not a preset", "multiple of micro_batch_size_per_gpu", command="validate")
