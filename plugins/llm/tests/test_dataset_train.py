"""SFT and DPO trained end to end from YAML manifests through ``agilerl train`` (in-process CLI)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

DATA = Path(__file__).resolve().parents[3] / "examples" / "data" / "llm"


def _manifest(model_dir: Path, run_dir: Path, algorithm: dict[str, Any], environment: dict[str, Any],
              training: dict[str, Any], *, lora: bool = True, **extra: Any) -> dict[str, Any]:  # fmt: skip
    network: dict[str, Any] = {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128}
    if lora:
        network["lora_config"] = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0}
    return {
        "apiVersion": "agilerl.com/v1",
        "algorithm": {"batch_size": 8, "max_grad_norm": 1.0, "gradient_checkpointing": False, **algorithm},
        "network": network,
        "environment": {"env_type": "dataset", **environment},
        "training": {"seed": 0, "run_dir": str(run_dir), "progress": False, **training},
        **extra,
    }


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _eval(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in rows if key in r]


@pytest.mark.slow
def test_sft_lora_heldout_loss_falls(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    run_dir = tmp_path / "run"
    manifest = _manifest(
        tiny_model_dir, run_dir, {"name": "SFT", "lr": 3e-3},
        {"dataset_path": str(DATA / "sft_tiny.jsonl"), "train_test_split": 0.9},
        {"max_steps": 60, "evo_steps": 20},
    )  # fmt: skip
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    losses = _eval(_rows(run_dir), "eval/loss")
    before, after = losses[0], losses[-1]
    assert len(losses) == 4  # the baseline + one per generation
    assert after < 0.5 * before, losses
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    # The elite checkpoint holds only the LoRA adapter and optimizer state, and loads weights-only.
    state = torch.load(run_dir / "elite.pt", weights_only=True)["agents"][0]
    assert state["weights"] and all("lora_" in k for k in state["weights"])
    assert state["optimizer"]["state"]


@pytest.mark.slow
def test_dpo_heldout_preference_accuracy_rises(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    run_dir = tmp_path / "run"
    manifest = _manifest(
        tiny_model_dir, run_dir,
        {"name": "DPO", "lr": 3e-3, "beta": 0.1, "nll_alpha": 0.2, "use_separate_reference_adapter": True},
        {"dataset_path": str(DATA / "dpo_tiny.jsonl"), "train_test_split": 0.8},
        {"max_steps": 20, "evo_steps": 10},
    )  # fmt: skip
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    rows = _rows(run_dir)
    accuracy, loss = _eval(rows, "eval/accuracy"), _eval(rows, "eval/loss")
    assert accuracy[0] == pytest.approx(0.5)  # untrained policy == reference: every pair is a tie
    assert accuracy[-1] >= 0.9, accuracy
    assert loss[-1] < loss[0], loss
    state = torch.load(run_dir / "elite.pt", weights_only=True)["agents"][0]
    assert state["reference_weights"] and all(".reference." in k for k in state["reference_weights"])


@pytest.mark.slow
def test_sft_full_finetune_chat_rows_population_and_resume(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    """No LoRA, chat ``messages`` rows, two agents with lr mutation; then resume from the checkpoint."""
    run_dir = tmp_path / "run"
    manifest = _manifest(
        tiny_model_dir, run_dir, {"name": "SFT", "lr": 1e-3, "micro_batch_size_per_gpu": 4},
        {"dataset_path": str(DATA / "sft_chat_tiny.jsonl")},
        {"max_steps": 20, "evo_steps": 10, "pop_size": 2, "checkpoint_steps": 10,
         "checkpoint_path": str(tmp_path / "ckpt" / "sft")},
        lora=False,
        mutation={"probabilities": {"no_mut": 0.5, "arch_mut": 0, "new_layer": 0, "params_mut": 0, "rl_hp_mut": 0.5},
                  "rl_hp_selection": {"lr": {"min": 1e-4, "max": 1e-2}}},
        tournament_selection={"tournament_size": 2, "elitism": True},
    )  # fmt: skip
    path = write_manifest(manifest)
    code, out, err = run_cli("train", path)
    assert code == 0, out + err
    losses = _eval(_rows(run_dir), "eval/loss")
    assert min(losses[-2:]) < 0.6 * max(losses[:2]), losses
    checkpoints = sorted((tmp_path / "ckpt").glob("sft_*.pt"))
    assert checkpoints
    ckpt = torch.load(checkpoints[-1], weights_only=True)
    weights = ckpt["agents"][0]["weights"]
    assert not any("lora_" in k for k in weights) and any("embed_tokens" in k for k in weights)
    # Resume: rebuilt from the manifest, weights and optimizer restored, training continues.
    code, out, err = run_cli("train", path, "--resume", str(checkpoints[-1]), "--set", "training.max_steps=30",
                             "--run-dir", str(tmp_path / "resumed"))  # fmt: skip
    assert code == 0, out + err
    resumed = _eval(_rows(tmp_path / "resumed"), "eval/loss")
    assert resumed and resumed[-1] < max(losses[:2])
