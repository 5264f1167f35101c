"""Denormal floats are flushed to zero while a gym agent learns, and only then
(agilerl_plugin_gym.denormals; the speed it buys: benchmarks/gym/bench_denormals.py)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch

import agilerl_plugin_gym.single_agent.strategies as single_agent_strategies
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.denormals import flush_denormals, flushing

#: float32's smallest normal number; anything nonzero below it is a denormal.
TINY = torch.finfo(torch.float32).tiny


def _denormals(t: torch.Tensor) -> int:
    x = t.abs()
    return int(((x > 0) & (x < TINY)).sum())


def test_the_block_flushes_and_the_previous_mode_comes_back() -> None:
    assert not flushing()  # torch's default
    with flush_denormals():
        assert flushing()
        assert float(torch.tensor(TINY) * 0.5) == 0.0  # would be a denormal
    assert not flushing()
    assert float(torch.tensor(TINY) * 0.5) > 0.0


def test_a_process_that_already_flushes_keeps_flushing() -> None:
    torch.set_flush_denormal(True)
    try:
        with flush_denormals():
            assert flushing()
        assert flushing()
    finally:
        torch.set_flush_denormal(False)


def _dqn_adam_first_moment(tmp_path: Any) -> torch.Tensor:
    # A high learning rate kills ReLU units fast: their weights' Adam moments decay into the
    # denormal range within the run (where, unflushed, round-to-nearest keeps them for good).
    manifest = {
        "algorithm": {"name": "DQN", "batch_size": 64, "learn_step": 1, "lr": 1e-2, "double": False},
        "environment": {"name": "CartPole-v1"},
        "network": {"latent_dim": 32, "encoder_config": {"arch": "mlp", "hidden_size": [32]}},
        "training": {"max_steps": 2000, "evo_steps": 2000, "seed": 0, "progress": False, "save_elite": False,
                     "learning_delay": 100},
    }  # fmt: skip
    result = LocalTrainer.from_manifest(manifest, run_dir=str(tmp_path)).train()
    assert not flushing()  # restored after training
    return result.population[0].optimizers["optimizer"].exp_avg


def test_training_leaves_no_denormal_adam_moments(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _denormals(_dqn_adam_first_moment(tmp_path / "flushed")) == 0
    # The same run without the mode: the moments stuck in the denormal range that slowed the update.
    monkeypatch.setattr(single_agent_strategies, "flush_denormals", contextlib.nullcontext)
    assert _denormals(_dqn_adam_first_moment(tmp_path / "unflushed")) > 100


class _RecordingEngine:
    """Stands in for an engine: records whether its learn ran with denormals flushed."""

    def __init__(self) -> None:
        self.flushed: list[bool] = []

    def learn(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        self.flushed.append(flushing())
        return {}


@pytest.mark.parametrize(
    "strategy_path",
    [
        "agilerl_plugin_gym.single_agent.strategies:OnPolicyStrategy",
        "agilerl_plugin_gym.single_agent.strategies:OffPolicyStrategy",
        "agilerl_plugin_gym.multi_agent.strategies:MultiAgentOnPolicyStrategy",
        "agilerl_plugin_gym.multi_agent.strategies:MultiAgentOffPolicyStrategy",
    ],
)
def test_every_gym_strategy_learns_flushed(strategy_path: str) -> None:
    import importlib
    from types import SimpleNamespace

    module, _, name = strategy_path.partition(":")
    strategy = object.__new__(getattr(importlib.import_module(module), name))
    engine = _RecordingEngine()
    strategy.engine = engine
    strategy.memory, strategy.rng = None, None
    strategy.learn(SimpleNamespace(index=0, steps=0), SimpleNamespace(env=None, seed=0), 8)
    assert engine.flushed == [True]
    assert not flushing()
