"""TQC (issue 34): SAC with truncated quantile critics. It learns Pendulum from a manifest, its
quantile Huber loss is sb3-contrib's, the target drops the top quantiles of the pooled critics,
and it has as many critics (and target copies) as ``n_critics`` says.

Exact resume (SIGINT included) is in test_exact_resume.py; predict/export are SAC's (test_sac.py,
test_inference.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_sac import PENDULUM

from agilerl.builders import AlgorithmBuildRuntime
from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.single_agent import tqc
from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder
from agilerl_plugin_gym.single_agent.tqc import TQC, quantile_huber_loss


def _agent(**fields: Any) -> TQC:
    manifest = load_manifest({"algorithm": {"name": "TQC", **fields}, "environment": {"name": "Pendulum-v1"}})
    env = gym.make("Pendulum-v1")
    agent = SingleAgentBuilder.build(
        manifest.algorithm, env.observation_space, env.action_space, runtime=AlgorithmBuildRuntime(seed=0)
    )
    assert isinstance(agent, TQC)
    return agent


def _batch(n: int = 32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "obs": torch.randn(n, 3, generator=g),
        "action": torch.rand(n, 1, generator=g) * 2 - 1,
        "reward": torch.randn(n, generator=g),
        "next_obs": torch.randn(n, 3, generator=g),
        "done": torch.zeros(n),
    }


@pytest.mark.slow  # about a minute on a quiet machine
def test_tqc_learns_pendulum(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    m = {**PENDULUM, "algorithm": {**PENDULUM["algorithm"], "name": "TQC"}}
    m["training"] = {**PENDULUM["training"], "max_steps": 10_000}
    result = LocalTrainer.from_manifest(m, run_dir=tmp_path / "run").train()
    fitness = [r["fitness"] for r in result.history]
    assert fitness[0] < -900 and max(fitness[-3:]) > -400, fitness


def test_quantile_huber_loss_is_sb3_contribs() -> None:
    """Against sb3-contrib's formula written out (``sum_over_quantiles=False``)."""
    torch.manual_seed(0)
    current = torch.randn(8, 3, 5, requires_grad=True) * 2
    target = torch.randn(8, 11) * 2
    cum_prob = ((torch.arange(5).float() + 0.5) / 5).view(1, 1, -1, 1)
    delta = target.unsqueeze(1).unsqueeze(-2) - current.unsqueeze(-1)
    huber = torch.where(delta.abs() > 1, delta.abs() - 0.5, delta**2 * 0.5)
    expected = (torch.abs(cum_prob - (delta.detach() < 0).float()) * huber).mean()
    got = quantile_huber_loss(current, target)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(torch.autograd.grad(got, current)[0], torch.autograd.grad(expected, current)[0])


def test_critics_targets_and_the_truncated_target(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = _agent(n_critics=3, n_quantiles=7, top_quantiles_to_drop_per_net=2, ent_coef=0.1, gamma=0.5)
    assert agent.critic_names == ("critic_1", "critic_2", "critic_3")
    assert set(agent.target_of) == {"critic_1_target", "critic_2_target", "critic_3_target"}
    obs, action = torch.randn(4, 3), torch.zeros(4, 1)
    assert agent.quantiles(agent.critic_names, obs, action).shape == (4, 3, 7)
    # The target the loss regresses on: the pooled 21 target quantiles, sorted, less the top 6.
    batch = _batch(4)
    seen: dict[str, torch.Tensor] = {}

    def spy(current: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        seen["target"] = target
        return quantile_huber_loss(current, target)

    monkeypatch.setattr(tqc, "quantile_huber_loss", spy)
    state = torch.get_rng_state()
    agent.critic_loss(batch["obs"], batch["action"], batch["reward"], batch["next_obs"], batch["done"],
                      torch.tensor(0.1))  # fmt: skip
    torch.set_rng_state(state)  # the same next actions again
    with torch.no_grad():
        next_action, next_log_prob = agent.sample(batch["next_obs"])
        pooled = agent.quantiles(tuple(agent.target_of), batch["next_obs"], next_action).flatten(1)
        kept = pooled.sort(dim=1).values[:, : 21 - 6]
        expected = batch["reward"][:, None] + 0.5 * (kept - 0.1 * next_log_prob[:, None])
    torch.testing.assert_close(seen["target"], expected)


def test_a_learning_step_moves_every_critic_and_the_actor() -> None:
    agent = _agent()
    before = {n: [p.clone() for p in agent.nets[n].parameters()] for n in agent.eval_names}
    stats = agent.learn(_batch())
    assert all(np.isfinite(float(v)) for v in stats.values())
    for name, params in before.items():
        assert any(not torch.equal(a, b) for a, b in zip(params, agent.nets[name].parameters(), strict=True)), name


def test_dropping_every_quantile_is_refused() -> None:
    with pytest.raises(ManifestError, match="top_quantiles_to_drop_per_net"):
        load_manifest({"algorithm": {"name": "TQC", "n_quantiles": 2, "top_quantiles_to_drop_per_net": 2},
                       "environment": {"name": "Pendulum-v1"}})  # fmt: skip
