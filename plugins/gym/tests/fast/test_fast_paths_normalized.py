"""The fast paths under ``environment.normalize``: the engines normalise before the networks, so
the fast room's acting and updates see the observations (and scaled rewards) the autograd path
sees, and a run with the fast paths ends bit-identical to the same run without them."""

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

NORMALIZE = {"obs": True, "reward": True}
#: PPO networks the fast update serves: separate 64-unit MLP encoders, linear heads.
PPO_NET = {"latent_dim": 64, "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False},
           "head_config": {"hidden_size": [], "layer_norm": False}}  # fmt: skip


def _env(n: int = 2) -> Any:
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])


def _agent(algo: str, env: Any, network: dict[str, Any] | None = None, **fields: Any) -> Any:
    raw = {"algorithm": {"name": algo, **fields}, "environment": {"name": "CartPole-v1", "normalize": NORMALIZE}}
    manifest = load_manifest({**raw, **({"network": network} if network else {})})
    torch.manual_seed(0)
    return SingleAgentBuilder.build(
        manifest.algorithm, env.single_observation_space, env.single_action_space,
        runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest),
    )  # fmt: skip


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _same_agent(a: Any, b: Any) -> None:
    assert a.nets.keys() == b.nets.keys()
    for key in a.nets:
        sa_net, sb_net = a.nets[key].state_dict(), b.nets[key].state_dict()
        assert sa_net.keys() == sb_net.keys()
        for name, t in sa_net.items():
            assert torch.equal(t, sb_net[name]), (key, name)
    sa, sb = a.normalizer.state_dict(), b.normalizer.state_dict()
    assert repr(sa) == repr(sb)


def test_ppos_fast_update_learns_from_the_normalised_rollout_bit_identically(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(use_fast: bool) -> Any:
        env = _env()
        agent = _agent("PPO", env, PPO_NET, share_encoders=False, learn_step=64, batch_size=32, update_epochs=2)
        assert agent.normalizer is not None
        torch.manual_seed(1)
        with fast.off("act") if use_fast else fast.off():  # the same (unfused) acting in both runs
            OnPolicyEngine().learn(agent, env, 256, seed=0)
        return agent

    learns = _counting(monkeypatch, fast_ppo, "learn")
    fast_agent = run(True)
    assert len(learns) == 4
    _same_agent(fast_agent, run(False))
    assert len(learns) == 4  # the second run: autograd only


@pytest.mark.parametrize(
    ("algo", "module", "replay"),
    [("DQN", fast_dqn, ReplaySettings()), ("RainbowDQN", fast_rainbow, ReplaySettings(per=True, alpha=0.6, n_step=3))],
)
def test_the_off_policy_fast_paths_learn_from_normalised_batches_bit_identically(
    monkeypatch: pytest.MonkeyPatch, algo: str, module: Any, replay: ReplaySettings
) -> None:
    def run(use_fast: bool) -> Any:
        env = _env()
        agent = _agent(algo, env, None, batch_size=16, learn_step=2)
        assert agent.normalizer is not None
        buf = replay.make_buffer(500, seed=0, dtypes={"reward": np.float32, "done": np.float32})
        torch.manual_seed(1)
        engine = OffPolicyEngine(replay, learning_delay=16, max_steps=200)
        if use_fast:
            engine.learn(agent, env, buf, np.random.default_rng(0), 120, seed=0)
        else:
            with fast.off():
                engine.learn(agent, env, buf, np.random.default_rng(0), 120, seed=0)
        return agent

    learns = _counting(monkeypatch, module, "learn")
    fast_agent = run(True)
    assert learns
    count = len(learns)
    _same_agent(fast_agent, run(False))
    assert len(learns) == count
