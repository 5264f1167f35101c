"""``training.episode_steps`` for the bandits, with AgileRL's meaning: a generation's online steps
run as episodes of that many steps, the env reset at the start of each, and each episode's total
reward is a training score (``train_return`` is their mean)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl.training.trainer import LocalTrainer

HERE = Path(__file__).resolve().parent


class CountingBandit:
    """Two arms, arm 0 always pays 1; counts resets (class-wide, as the trainer builds its own)."""

    resets = 0
    arms = 2
    context_dim = 3

    def __init__(self, **_: Any) -> None:
        self.rng = np.random.default_rng(0)

    def reset(self) -> np.ndarray:
        type(self).resets += 1
        return self._context()

    def _context(self) -> np.ndarray:
        return self.rng.normal(size=(self.arms, self.context_dim)).astype(np.float32)

    def step(self, arm: int) -> tuple[np.ndarray, float]:
        return self._context(), 1.0 if int(arm) == 0 else 0.0


def _manifest(tmp_path: Path, training: dict[str, Any]) -> dict[str, Any]:
    return {
        "algorithm": {"name": "NeuralUCB", "batch_size": 16, "learn_step": 4},
        "environment": {"env_type": "bandit", "name": "counting", "entrypoint": "test_episodes:CountingBandit",
                        "path": str(HERE)},
        "training": {"max_steps": 200, "evo_steps": 100, "seed": 0, "run_dir": str(tmp_path / "run"),
                     "progress": False, **training},
    }  # fmt: skip


def _resets() -> int:
    # The trainer imports the entrypoint module by its own name (not this test module's importlib name).
    module = sys.modules.get("test_episodes")
    return int(module.CountingBandit.resets) if module is not None else 0


def _rows(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_episode_steps_resets_the_env_per_episode_and_scores_each(tmp_path: Path) -> None:
    before = _resets()
    LocalTrainer.from_manifest(_manifest(tmp_path, {"episode_steps": 25})).train()
    rows = _rows(tmp_path)
    assert len(rows) == 2
    # 2 generations x 4 episodes of 25 steps (evaluation, with no eval_steps, steps no env)
    assert _resets() - before == 8
    for row in rows:
        assert row["episodes"] == 4
        # Each episode's score is its total reward: the mean episode score is 25 x the mean reward.
        assert row["train_return"] == pytest.approx(25 * row["mean_reward"])


def test_without_episode_steps_one_stream_per_generation(tmp_path: Path) -> None:
    before = _resets()
    LocalTrainer.from_manifest(_manifest(tmp_path, {})).train()
    assert _resets() - before == 2
    assert all("train_return" not in row for row in _rows(tmp_path))


def test_episode_longer_than_a_generation_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifest(_manifest(tmp_path, {"episode_steps": 150}))
    (problem,) = [str(p) for p in info.value.problems]
    assert problem.startswith("training.episode_steps:") and "evo_steps 100" in problem
