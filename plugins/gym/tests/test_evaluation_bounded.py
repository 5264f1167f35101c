"""Evaluation always ends and says how far it is (issue 30): with ``training.eval_steps`` unset,
an env that never ends an episode is stopped at a default cap that the log names, and a long
evaluation prints progress lines."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.engine import evaluation
from agilerl_plugin_gym.engine.evaluation import DEFAULT_EVAL_CAP, env_step_limit

HERE = Path(__file__).resolve().parent


def _manifest(eval_steps: int | None) -> dict[str, Any]:
    return {
        "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32},
        "environment": {"name": "never-ends", "custom": True, "path": str(HERE),
                        "entrypoint": "never_ending_env:NeverEndingEnv", "num_envs": 1},
        "training": {"max_steps": 64, "evo_steps": 64, "eval_steps": eval_steps, "seed": 0, "save_elite": False},
    }  # fmt: skip


def test_the_env_limit_is_read_from_the_eval_env() -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    assert env_step_limit(env) == 500
    env.close()


def test_an_episode_that_never_ends_stops_at_the_default_cap_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    monkeypatch.setattr(evaluation, "PROGRESS_INTERVAL_S", 0.0)  # a progress line per step, not per 10 s
    with caplog.at_level(logging.INFO, logger="agilerl"):
        result = LocalTrainer.from_manifest(_manifest(None), run_dir=tmp_path / "run").train()
    assert result.population[0].steps == 64
    said = [r.getMessage() for r in caplog.records if r.name == "agilerl.gym.eval"]
    assert any(
        "never-ends declares no episode step limit and training.eval_steps is unset: evaluation episodes stop "
        f"after {DEFAULT_EVAL_CAP} steps" in m
        for m in said
    ), said
    progress = [m for m in said if m.startswith("evaluating member 0:")]
    assert progress and progress[-1] == f"evaluating member 0: {DEFAULT_EVAL_CAP} steps, 0/1 episodes finished"
    # the policy scores 1 per step it picks action 1: the return is bounded by the cap
    assert 0 <= result.fitnesses[0] <= DEFAULT_EVAL_CAP


def test_eval_steps_given_is_the_cap_and_nothing_is_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch.set_num_threads(1)
    with caplog.at_level(logging.INFO, logger="agilerl"):
        result = LocalTrainer.from_manifest(_manifest(50), run_dir=tmp_path / "run", progress=False).train()
    assert 0 <= result.fitnesses[0] <= 50
    assert not [r for r in caplog.records if r.name == "agilerl.gym.eval"]
