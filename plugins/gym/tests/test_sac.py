"""SAC (issue 34): it learns Pendulum from a manifest, its entropy coefficient is fixed or learned as
the manifest says, its deterministic action is the squashed, rescaled mean (``predict``, ``eval``
and the ONNX export agree), Box bounds of any kind are honoured, and a trained run loads back.

Exact resume (SIGINT included), populations with mutation and Dict observations are covered with
the other algorithms in test_exact_resume.py and test_single_agent_resume.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from gymnasium import spaces

from agilerl.builders import AlgorithmBuildRuntime
from agilerl.errors import ManifestError
from agilerl.inference import evaluate, load
from agilerl.models import load_manifest
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder
from agilerl_plugin_gym.single_agent.sac import SAC

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "sac_pendulum.yaml"

#: A small network and budget: SAC passes -200 on Pendulum-v1 by 5k steps with these on seeds 1-3
#: (final greedy returns -121 to -154; a random policy scores about -1200).
PENDULUM: dict[str, Any] = {
    "algorithm": {"name": "SAC", "batch_size": 128, "lr_actor": 1e-3, "lr_critic": 1e-3},
    "environment": {"name": "Pendulum-v1", "num_envs": 4, "sync": True},
    "network": {"latent_dim": 64, "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False},
                "head_config": {"hidden_size": [], "layer_norm": False}},
    "replay_buffer": {"max_size": 100_000},
    "training": {"max_steps": 6000, "evo_steps": 1000, "learning_delay": 500, "eval_loop": 1, "seed": 2,
                 "progress": False},
}  # fmt: skip


def _agent(observation_space: Any, action_space: Any, **fields: Any) -> SAC:
    manifest = load_manifest({"algorithm": {"name": "SAC", **fields}, "environment": {"name": "Pendulum-v1"}})
    agent = SingleAgentBuilder.build(
        manifest.algorithm, observation_space, action_space, runtime=AlgorithmBuildRuntime(seed=0)
    )
    assert isinstance(agent, SAC)
    return agent


def _batch(agent: SAC, n: int = 32) -> dict[str, torch.Tensor]:
    obs_dim = int(agent.observation_space.shape[0])  # type: ignore[index]
    g = torch.Generator().manual_seed(0)
    return {
        "obs": torch.randn(n, obs_dim, generator=g),
        "action": torch.rand(n, agent.act_dim, generator=g) * 2 - 1,
        "reward": torch.randn(n, generator=g),
        "next_obs": torch.randn(n, obs_dim, generator=g),
        "done": torch.zeros(n),
    }


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    torch.set_num_threads(1)
    run_dir = tmp_path_factory.mktemp("sac") / "run"
    result = LocalTrainer.from_manifest(PENDULUM, run_dir=run_dir).train()
    return run_dir, result


def test_sac_learns_pendulum(sac_run: tuple[Path, Any]) -> None:
    _, result = sac_run
    fitness = [r["fitness"] for r in result.history]
    assert fitness[0] < -900, fitness  # it starts where a random policy is
    assert fitness[-1] > -400, fitness


def test_a_trained_run_loads_predicts_and_evaluates(sac_run: tuple[Path, Any]) -> None:
    run_dir, _ = sac_run
    agent = load(run_dir)
    assert isinstance(agent, SAC)
    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    action, state = agent.predict(obs)
    assert action.shape == (1,) and state is None and env.action_space.contains(action.astype(np.float32))
    again, _ = agent.predict(obs)
    np.testing.assert_array_equal(action, again)  # deterministic: the mean
    result = evaluate(run_dir, episodes=2, seed=0)
    assert len(result.returns) == 2 and result.mean_return > -400


def test_deterministic_action_is_the_squashed_mean_rescaled_to_any_bounds() -> None:
    torch.manual_seed(0)
    box = spaces.Box(np.array([0.0, -5.0], np.float32), np.array([10.0, -1.0], np.float32))
    agent = _agent(spaces.Box(-1.0, 1.0, (3,), np.float32), box)
    obs = np.random.default_rng(0).standard_normal((64, 3)).astype(np.float32)
    with torch.no_grad():
        mean = agent.nets["actor"](torch.as_tensor(obs))[:, :2]
    expected = box.low + (torch.tanh(mean).numpy() + 1.0) * 0.5 * (box.high - box.low)
    got, _ = agent.predict(obs)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    sampled, _ = agent.predict(obs, deterministic=False)  # a squashed sample: inside the bounds, not the mean
    assert (sampled >= box.low).all() and (sampled <= box.high).all() and not np.allclose(sampled, got)
    stored, env_action = agent.explore(obs, np.random.default_rng(1))
    assert (np.abs(stored) <= 1).all() and np.allclose(env_action, box.low + (stored + 1) * 0.5 * (box.high - box.low))


def test_log_prob_is_the_squashed_gaussians() -> None:
    """``sample``'s log-probability against torch.distributions' TanhTransform of the same Gaussian."""
    from torch.distributions import Normal, TransformedDistribution
    from torch.distributions.transforms import TanhTransform

    torch.manual_seed(0)
    agent = _agent(spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-1.0, 1.0, (2,), np.float32))
    obs = torch.randn(16, 3)
    noise = torch.randn(16, 2) * 0.5
    with torch.no_grad():
        action, log_prob = agent.sample(obs, noise)
        mean, log_std = agent.mean_log_std(obs)
        dist = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform()])
        expected = dist.log_prob(action).sum(-1)
    torch.testing.assert_close(log_prob, expected, rtol=1e-3, atol=1e-3)


def test_entropy_coefficient_auto_learns_from_its_initial_value_and_a_float_stays_fixed() -> None:
    obs_space, act_space = spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-2.0, 2.0, (2,), np.float32)
    auto = _agent(obs_space, act_space)
    assert auto.entropy_target == -2.0  # -dim(A)
    assert math.isclose(auto.alpha().item(), 1.0)
    auto.learn(_batch(auto))
    assert auto.alpha().item() != 1.0  # one Adam step on log(alpha)
    assert math.isclose(_agent(obs_space, act_space, ent_coef="auto_0.1").alpha().item(), 0.1, rel_tol=1e-6)
    assert _agent(obs_space, act_space, target_entropy=-0.5).entropy_target == -0.5
    fixed = _agent(obs_space, act_space, ent_coef=0.05)
    assert "ent_coef" not in fixed.optimizers and not fixed.extra_params
    stats = fixed.learn(_batch(fixed))
    assert math.isclose(float(stats["ent_coef"]), 0.05, rel_tol=1e-6)
    fixed.set_hyperparameter("ent_coef", 0.2)  # a mutation of the fixed coefficient takes effect
    assert math.isclose(fixed.alpha().item(), 0.2, rel_tol=1e-6)


@pytest.mark.parametrize("bad", ["automatic", "auto_-1", "auto_x", 0.0, -0.1])
def test_a_bad_entropy_coefficient_is_refused_at_validation(bad: Any) -> None:
    with pytest.raises(ManifestError, match=r"algorithm\.ent_coef"):
        load_manifest({"algorithm": {"name": "SAC", "ent_coef": bad}, "environment": {"name": "Pendulum-v1"}})


def test_target_critics_move_by_polyak_averaging_every_target_update_interval() -> None:
    obs_space, act_space = spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-1.0, 1.0, (1,), np.float32)
    agent = _agent(obs_space, act_space, tau=0.5, target_update_interval=2)
    target = [p.clone() for p in agent.nets["critic_1_target"].parameters()]
    agent.learn(_batch(agent))
    assert all(torch.equal(a, b) for a, b in zip(target, agent.nets["critic_1_target"].parameters(), strict=True))
    agent.learn(_batch(agent))
    online = list(agent.nets["critic_1"].parameters())
    for old, new, o in zip(target, agent.nets["critic_1_target"].parameters(), online, strict=True):
        torch.testing.assert_close(new, 0.5 * old + 0.5 * o)
    assert "actor_target" not in agent.nets  # SAC's actor has no target


def test_the_example_manifest_validates_and_names_sac() -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    manifest = load_manifest(data)
    assert manifest.algorithm.name == "SAC" and manifest.environment.name == "Pendulum-v1"
