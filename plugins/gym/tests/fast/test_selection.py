"""The engines select the fast room's methods for the networks the fast paths have always served
(plain MLPs: PPO's and DQN's default networks, RainbowDQN's with an MLP encoder), and only where the
agent's class runs the method the fast one replaces; the fast acting computes the algorithm's own."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from agilerl.builders import AlgorithmBuildRuntime
from agilerl.models import load_manifest
from agilerl_plugin_gym import fast
from agilerl_plugin_gym.engine.off_policy import OffPolicyEngine
from agilerl_plugin_gym.engine.on_policy import OnPolicyEngine
from agilerl_plugin_gym.engine.replay_per import ReplaySettings
from agilerl_plugin_gym.fast import dqn as fast_dqn
from agilerl_plugin_gym.fast import ppo as fast_ppo
from agilerl_plugin_gym.fast import rainbow as fast_rainbow
from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder
from agilerl_plugin_gym.single_agent.dqn import DQN


def _env(n: int = 2) -> Any:
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])


def _agent(algo: str, env: Any, network: dict[str, Any] | None = None, **fields: Any) -> Any:
    """An agent as a manifest builds it (no network section: the default networks)."""
    raw = {"algorithm": {"name": algo, **fields}, "environment": {"name": "CartPole-v1"}}
    manifest = load_manifest({**raw, **({"network": network} if network else {})})
    torch.manual_seed(0)
    return SingleAgentBuilder.build(
        manifest.algorithm, env.single_observation_space, env.single_action_space,
        runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest),
    )  # fmt: skip


#: The PPO of benchmarks/gym/bench_cartpole.py: separate 64-unit MLP encoders, linear heads.
BENCH_PPO = {"share_encoders": False}
BENCH_PPO_NET = {"latent_dim": 64, "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False},
                 "head_config": {"hidden_size": [], "layer_norm": False}}  # fmt: skip


@pytest.mark.parametrize(
    ("algo", "network", "fields", "methods"),
    [
        ("PPO", BENCH_PPO_NET, BENCH_PPO, ("act", "learn")),
        ("PPO", None, {}, ("act",)),  # the default shared encoder: fused acting, autograd update (as ever)
        ("DQN", None, {}, ("explore", "learn")),
        ("RainbowDQN", None, {}, ("learn",)),
    ],
)
def test_plain_mlp_networks_get_the_fast_paths(
    algo: str, network: dict[str, Any] | None, fields: dict[str, Any], methods: tuple[str, ...]
) -> None:
    agent = _agent(algo, _env(), network, **fields)
    for method in methods:
        assert fast.select(agent, method) is not None, method
        with fast.off(method):
            assert fast.select(agent, method) is None
    with fast.off():
        assert all(fast.select(agent, m) is None for m in methods)
    if algo == "PPO" and "learn" not in methods:
        assert fast.select(agent, "learn") is None


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_the_on_policy_engine_runs_ppos_fast_act_and_learn(monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env()
    agent = _agent("PPO", env, BENCH_PPO_NET, learn_step=64, batch_size=32, update_epochs=1, **BENCH_PPO)
    acts, learns = _counting(monkeypatch, fast_ppo, "act"), _counting(monkeypatch, fast_ppo, "learn")
    OnPolicyEngine().learn(agent, env, 128, seed=0)
    assert len(acts) == 64 and len(learns) == 2


@pytest.mark.parametrize(("algo", "module"), [("DQN", fast_dqn), ("RainbowDQN", fast_rainbow)])
def test_the_off_policy_engine_runs_the_fast_learn(monkeypatch: pytest.MonkeyPatch, algo: str, module: Any) -> None:
    env = _env()
    agent = _agent(algo, env, None, batch_size=16, learn_step=2)
    learns = _counting(monkeypatch, module, "learn")
    replay = ReplaySettings()
    buf = replay.make_buffer(500, seed=0, dtypes={"reward": np.float32, "done": np.float32})
    OffPolicyEngine(replay, learning_delay=16, max_steps=200).learn(
        agent, env, buf, np.random.default_rng(0), 100, seed=0
    )
    assert learns


def test_a_subclass_that_overrides_a_method_runs_its_own() -> None:
    class MyDQN(DQN):
        def learn(self, batch: dict[str, torch.Tensor]) -> Any:
            return super().learn(batch)

        def td_target(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            return super().td_target(batch)

    env = _env()
    base = _agent("DQN", env)
    mine = MyDQN(base.spec, env.single_observation_space, env.single_action_space)
    assert fast.select(mine, "learn") is None and fast.select(mine, "explore") is not None
    MyDQN.learn = DQN.learn  # type: ignore[method-assign]  # DQN's learn, its own td_target: still its own
    assert fast.select(mine, "learn") is None


def test_dqns_fast_explore_draws_and_picks_what_dqn_explore_does() -> None:
    agent = _agent("DQN", _env())
    agent.epsilon = 0.3
    obs = np.random.default_rng(5).normal(size=(64, 4)).astype(np.float32)
    fast_explore = fast.select(agent, "explore")
    assert fast_explore is not None
    a1, r1 = fast_explore(obs, rng := np.random.default_rng(1)), rng.random()
    a2, r2 = agent.explore(obs, rng2 := np.random.default_rng(1)), rng2.random()
    np.testing.assert_array_equal(a1[0], a2[0])
    assert r1 == r2  # the same draws from the generator


def test_ppos_fused_acting_is_its_own_acting_up_to_rounding() -> None:
    agent = _agent("PPO", _env())
    obs = torch.randn(16, 4)
    fused = fast_ppo.fused_heads(agent)
    assert fused is not None
    out, value = fused(obs)
    with torch.no_grad():
        own_out, own_value = agent._heads(obs)
    torch.testing.assert_close(out, own_out)
    torch.testing.assert_close(value.squeeze(-1), own_value)
