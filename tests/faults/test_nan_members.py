"""NaN members on a real DQN population: a checkpoint whose agent weights are NaN (as after a
diverged update) resumes; the NaN agent's loss is NaN, so it is marked unfit, logged and replaced
by the next tournament while the run goes on; with every agent NaN the run stops with a clear
error naming the last good checkpoint, which resumes."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl import LocalTrainer, checkpoint
from agilerl.training.loop import NonFiniteTrainingError


def _manifest(run_dir: Path, max_steps: int) -> dict[str, Any]:
    return {
        "algorithm": {"name": "DQN", "batch_size": 16, "learn_step": 2},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
        "network": {"encoder_config": {"arch": "mlp", "hidden_size": [16]}, "head_config": {"hidden_size": []}},
        "replay_buffer": {"max_size": 2000},
        "training": {"max_steps": max_steps, "evo_steps": 128, "checkpoint_steps": 128, "pop_size": 2, "seed": 0,
                     "progress": False, "learning_delay": 32, "run_dir": str(run_dir)},
        "tournament_selection": {"tournament_size": 2},
        "mutation": {"probabilities": {"no_mut": 1.0, "rl_hp_mut": 0.0}},
    }  # fmt: skip


def _nan(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return torch.full_like(x, float("nan"))
    if isinstance(x, dict):
        return {k: _nan(v) for k, v in x.items()}
    return x


@pytest.fixture(scope="module")
def first_generation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("nan") / "run"
    LocalTrainer.from_manifest(_manifest(run_dir, 128)).train()
    return run_dir / "checkpoint_128.pt"


def _crafted(source: Path, target: Path, agents: list[int]) -> Path:
    payload = checkpoint.load(source)
    for i in agents:
        payload["agents"][i]["nets"] = _nan(payload["agents"][i]["nets"])
    payload["phase"], payload["generation"] = "trained", 1  # re-enter training with these weights
    checkpoint.save(target, payload)
    return target


def test_one_nan_member_is_unfit_and_replaced(
    first_generation: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agilerl")
    crafted = _crafted(first_generation, tmp_path / "crafted.pt", [1])
    run_dir = tmp_path / "resumed"
    result = LocalTrainer.from_manifest(_manifest(run_dir, 512), resume_from=crafted).train()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    gen1 = {r["agent"]: r for r in rows if r["generation"] == 1}
    assert gen1[1]["unfit"] == "non-finite loss: loss=nan" and gen1[1]["fitness"] is None
    assert "unfit" not in gen1[0]
    assert "generation 1: agent 1 is unfit" in caplog.text
    assert {r["parent"] for r in rows if r["generation"] == 2} == {0}  # replaced by the healthy agent
    assert all("unfit" not in r for r in rows if r["generation"] >= 2)
    assert all(a.steps == 512 for a in result.population)


def test_every_member_nan_stops_and_names_a_checkpoint_that_resumes(first_generation: Path, tmp_path: Path) -> None:
    run_dir = first_generation.parent
    crafted = _crafted(first_generation, run_dir / "crafted_all_nan.pt", [0, 1])
    with pytest.raises(NonFiniteTrainingError, match="every member of the population \\(2\\)") as info:
        LocalTrainer.from_manifest(_manifest(run_dir, 512), resume_from=crafted).train()
    assert info.value.last_good == first_generation and str(first_generation) in str(info.value)
    result = LocalTrainer.from_manifest(_manifest(tmp_path / "again", 384), resume_from=first_generation).train()
    assert all(a.steps == 384 for a in result.population)
