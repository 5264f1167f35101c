"""``training.num_epochs`` and ``training.evaluation_interval`` for the LLM algorithms, with AgileRL's
meaning: ``num_epochs`` passes over the training rows end a dataset run (or ``max_steps``, whichever
comes first); ``evaluation_interval`` runs the held-out evaluation every that many iterations."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.errors import ManifestError
from agilerl.models import load_manifest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"


def _sft_manifest(model_dir: Path, tmp_path: Path, **training: Any) -> dict[str, Any]:
    """SFT on 8 rows, half held out: 4 training rows, 2 per iteration (2 iterations per pass)."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"what is {i} + 1?", "response": f"{i} + 1 = {i + 1}."}) + "\n"
                            for i in range(8)))  # fmt: skip
    return {
        "algorithm": {"name": "SFT", "batch_size": 2, "lr": 1e-3, "gradient_checkpointing": False},
        "network": {
            "pretrained_model_name_or_path": str(model_dir),
            "max_context_length": 64,
            "lora_config": {"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0},
        },
        "environment": {"env_type": "sft", "dataset_path": str(rows), "train_test_split": 0.5},
        "training": {"seed": 0, "run_dir": str(tmp_path / "run"), "progress": False, **training},
    }


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _interval_rows(run_dir: Path, key: str) -> list[int]:
    """Steps of the rows that hold held-out metrics but no fitness, after the step-0 baseline."""
    return [r["steps"] for r in _rows(run_dir) if key in r and "fitness" not in r and r["generation"] >= 0]


def _train(run_cli: Callable[..., Any], write_manifest: Callable[..., Path], manifest: dict[str, Any]) -> str:
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    return str(out + err)


def test_sft_num_epochs_ends_the_run_after_that_many_passes(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    # max_steps alone would train 1000 iterations; two passes over 4 rows in batches of 2 are 4.
    manifest = _sft_manifest(tiny_model_dir, tmp_path, max_steps=1000, evo_steps=3, num_epochs=2)
    assert "stopped by step_limit" in _train(run_cli, write_manifest, manifest)
    last = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    agent = last["agents"][0]
    assert agent["steps"] == 4
    # One optimizer step per iteration (no mini_batch_size): AdamW took exactly 4 steps.
    assert {int(s["step"]) for s in agent["optimizer"]["state"].values()} == {4}
    # The env read every training row twice: it is at the end of its second epoch (epoch index 1).
    assert last["strategy"]["env"]["epoch"] == 1 and last["strategy"]["env"]["position"] == 4
    generations = [r for r in _rows(tmp_path / "run") if "fitness" in r]
    assert [r["steps"] for r in generations] == [3, 4]  # the last generation trains what is left


def test_num_epochs_is_bounded_by_max_steps(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    # 5 passes would be 10 iterations; max_steps stops the run first (AgileRL stops at whichever comes first).
    manifest = _sft_manifest(tiny_model_dir, tmp_path, max_steps=3, evo_steps=3, num_epochs=5)
    assert "stopped by max_steps" in _train(run_cli, write_manifest, manifest)
    assert torch.load(tmp_path / "run" / "last.pt", weights_only=True)["agents"][0]["steps"] == 3


def test_sft_evaluation_interval_logs_heldout_rows_every_n_iterations(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    manifest = _sft_manifest(tiny_model_dir, tmp_path, max_steps=6, evo_steps=3, evaluation_interval=2)
    _train(run_cli, write_manifest, manifest)
    # Multiples of 2: steps 2 and 4 get their own row; 6 ends a generation, whose row holds its evaluation.
    assert _interval_rows(tmp_path / "run", "eval/loss") == [2, 4]
    losses = {r["steps"]: r["eval/loss"] for r in _rows(tmp_path / "run") if "eval/loss" in r}
    assert sorted(losses) == [0, 2, 3, 4, 6]
    assert losses[2] < losses[0]  # a real held-out evaluation of the trained weights (lr 1e-3 on LoRA)


def test_an_interval_past_the_budget_is_agilerls_way_to_skip_mid_run_evaluation(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    # AgileRL's own cispo_gemma4_group5.yaml writes evaluation_interval: 999999 with max_steps 100000:
    # the manifest validates and trains, and only each generation's end is evaluated.
    manifest = _sft_manifest(tiny_model_dir, tmp_path, max_steps=6, evo_steps=3, evaluation_interval=999999)
    assert load_manifest(manifest).training.evaluation_interval == 999999
    _train(run_cli, write_manifest, manifest)
    assert _interval_rows(tmp_path / "run", "eval/loss") == []
    assert sorted(r["steps"] for r in _rows(tmp_path / "run") if "eval/loss" in r) == [0, 3, 6]


# --- validation ------------------------------------------------------------------------------------


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_manifest(data)
    return [str(p) for p in info.value.problems]


def test_num_epochs_is_read_by_the_dataset_algorithms_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    sft = load_manifest(_sft_manifest(tiny_model_dir, tmp_path, num_epochs=1, evaluation_interval=5))
    assert (sft.training.num_epochs, sft.training.evaluation_interval) == (1, 5)
    grpo = {
        "algorithm": {"name": "GRPO"},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir)},
        "environment": {
            "env_type": "rollout",
            "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
            "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"),
        },
        "training": {"num_epochs": 1, "evaluation_interval": 5},
    }
    assert _problems(grpo) == ["training.num_epochs: not used by GRPO (not supported yet); remove it"]


def test_num_epochs_refuses_batch_size_mutation(tiny_model_dir: Path, tmp_path: Path) -> None:
    manifest = _sft_manifest(tiny_model_dir, tmp_path, num_epochs=1)
    manifest["mutation"] = {"probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5, "arch_mut": 0, "new_layer": 0,
                                              "params_mut": 0},
                            "rl_hp_selection": {"batch_size": {"min": 1, "max": 4}}}  # fmt: skip
    manifest["tournament_selection"] = {"tournament_size": 2}
    manifest["training"]["pop_size"] = 2
    found = _problems(manifest)
    assert len(found) == 1 and found[0].startswith("training.num_epochs: counts passes"), found
    manifest["mutation"]["rl_hp_selection"] = {"lr": {"min": 1e-5, "max": 1e-2}}
    load_manifest(manifest)
