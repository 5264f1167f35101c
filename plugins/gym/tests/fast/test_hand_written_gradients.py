"""The fast room's hand-written backward passes (``agilerl_plugin_gym.fast.fused.MLPChain`` and the
closed-form loss gradients of PPO, DQN and RainbowDQN) give the very bits autograd gives: each test
trains two copies of one agent on the same data, one through the fast path the engine selects and
one through the algorithm's own ``learn`` (``loss.backward()``), and compares every parameter and
optimizer moment exactly. And the engines select the fast paths for the plain-MLP networks they
always served."""

from __future__ import annotations

import contextlib
import copy
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
from agilerl_plugin_gym.fast.fused import MLPChain, mlp_chain
from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder


def _agent(algo: str, env: Any, network: dict[str, Any] | None = None, **fields: Any) -> Any:
    manifest = load_manifest({
        "algorithm": {"name": algo, **({"share_encoders": False} if algo == "PPO" else {}), **fields},
        "environment": {"name": "CartPole-v1"},
        "network": network or {"latent_dim": 32, "encoder_config": {"arch": "mlp", "hidden_size": [32], "layer_norm": False},
                               "head_config": {"hidden_size": [16], "layer_norm": False}},
    })  # fmt: skip
    torch.manual_seed(0)
    return SingleAgentBuilder.build(
        manifest.algorithm,
        env.single_observation_space,
        env.single_action_space,
        runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest),
    )


def _same_state(a: Any, b: Any) -> None:
    a.flat.ensure()
    b.flat.ensure()
    assert torch.equal(a.flat.data, b.flat.data), f"{int((a.flat.data != b.flat.data).sum())} parameters differ"
    oa, ob = a.optimizers["optimizer"], b.optimizers["optimizer"]
    assert torch.equal(oa.exp_avg, ob.exp_avg) and torch.equal(oa.exp_avg_sq, ob.exp_avg_sq)


@pytest.mark.parametrize(
    "fields",
    [
        {"ent_coef": 0.0},  # the benchmark's setting
        {"ent_coef": 0.01},  # the default: the entropy's gradient joins the log-softmax's
        {"clip_vloss": True, "batch_size": 48, "normalize_advantages": False},  # a remainder batch size too
    ],
)
@pytest.mark.parametrize("activation", ["ReLU", "Tanh"])
def test_ppo_hand_written_update_is_autograds_bit_for_bit(fields: dict[str, Any], activation: str) -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    network = {"latent_dim": 32, "encoder_config": {"arch": "mlp", "hidden_size": [32], "activation": activation,
                                                  "layer_norm": False},
               "head_config": {"hidden_size": [16], "layer_norm": False}}  # fmt: skip
    agent = _agent("PPO", env, network, **{"learn_step": 256, "batch_size": 64, "update_epochs": 2, **fields})
    twin = copy.deepcopy(agent)
    assert fast.select(agent, "learn") is not None
    stats = []
    for a, off in ((agent, ()), (twin, ("learn",))):  # the same rollouts, as long as the updates agree (three)
        torch.manual_seed(1)
        with (
            fast.off(*off) if off else contextlib.nullcontext()
        ):  # the twin: PPO.learn's autograd path (both act through the fused heads)
            stats.append(OnPolicyEngine().learn(a, env, 768, seed=3))
    _same_state(agent, twin)
    assert stats[0] == stats[1]


def test_ppo_falls_back_to_autograd_where_the_gradient_is_not_written_out() -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    assert fast.select(_agent("PPO", env, share_encoders=True), "learn") is None
    assert fast.select(_agent("PPO", env, network={"latent_dim": 32, "encoder_config": {"arch": "mlp", "hidden_size": [32],
                                       "layer_norm": True}}), "learn") is None  # fmt: skip
    gelu = _agent("PPO", env, network={"latent_dim": 32, "encoder_config": {"arch": "mlp", "hidden_size": [32],
                                       "activation": "GELU", "layer_norm": False}})  # fmt: skip
    assert not MLPChain.supports(gelu.nets["actor"]) and fast_ppo.manual_step(gelu) is None
    assert fast.select(gelu, "learn") is None
    box = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1") for _ in range(2)])
    assert fast.select(_agent("PPO", box), "learn") is None  # a Gaussian policy: autograd


def test_mlp_chain_backward_matches_autograd_for_any_upstream_gradient() -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    net = _agent("DQN", env).nets["actor"]
    obs = torch.randn(37, 4)
    upstream = torch.randn(37, 2)
    net.zero_grad(set_to_none=False)
    (net(obs) * upstream).sum().backward()
    expected = [p.grad.clone() for p in net.parameters()]
    chain = MLPChain(net)
    out, saved = chain.forward(obs)
    assert torch.equal(out, net(obs))
    for p in net.parameters():
        p.grad = torch.full_like(p, 7.0)  # overwritten, not accumulated
    chain.backward(saved, upstream)
    for p, e in zip(net.parameters(), expected, strict=True):
        assert torch.equal(p.grad, e)


@pytest.mark.parametrize(
    ("fields", "replay"),
    [
        ({"double": False}, ReplaySettings()),  # the benchmark's vanilla DQN
        ({}, ReplaySettings()),  # double DQN (the default)
        ({}, ReplaySettings(per=True, alpha=0.6, n_step=3)),  # importance weights and n-step discounts
        # SB3's semantics (issue 35's ablation): bursts, a hard target copy, the gradient-norm clip
        ({"double": False, "update_burst": 8, "target_update_interval": 8, "max_grad_norm": 0.5}, ReplaySettings()),
    ],
)
def test_dqn_hand_written_update_is_autograds_bit_for_bit(fields: dict[str, Any], replay: ReplaySettings) -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    agent = _agent("DQN", env, batch_size=32, learn_step=2, **fields)
    twin = copy.deepcopy(agent)
    assert fast.select(agent, "learn") is not None
    stats = []
    for a, off in ((agent, ()), (twin, ("learn",))):  # the same transitions, as long as the updates agree (~100)
        a.epsilon = 0.5
        engine = OffPolicyEngine(replay, learning_delay=64, max_steps=1000)
        buf = replay.make_buffer(1000, seed=0, dtypes={"reward": np.float32, "done": np.float32})  # as the strategy's
        with fast.off(*off) if off else contextlib.nullcontext():  # the twin: DQN.learn's autograd path
            stats.append(engine.learn(a, env, buf, np.random.default_rng(0), 480, seed=3))
    _same_state(agent, twin)
    agent.flat_target.ensure()
    twin.flat_target.ensure()
    assert torch.equal(agent.flat_target.data, twin.flat_target.data)
    assert stats[0] == stats[1]


def test_rainbows_noisy_dueling_network_never_runs_as_a_plain_chain() -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    agent = _agent("RainbowDQN", env)
    assert mlp_chain(agent.nets["actor"]) is None and not MLPChain.supports(agent.nets["actor"])
    assert fast_dqn._chain(agent) is None


@pytest.mark.parametrize("activation", ["ReLU", "Tanh"])
def test_rainbow_hand_written_update_is_autograds_bit_for_bit(activation: str) -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    network = {"latent_dim": 32, "encoder_config": {"arch": "mlp", "hidden_size": [32], "activation": activation,
                                                  "layer_norm": False},
               "head_config": {"hidden_size": [16], "layer_norm": False, "activation": activation}}  # fmt: skip
    agent = _agent("RainbowDQN", env, network, batch_size=32, learn_step=2, num_atoms=11, v_min=0.0, v_max=50.0)
    twin = copy.deepcopy(agent)
    assert fast.select(agent, "learn") is not None
    replay = ReplaySettings(per=True, alpha=0.6, n_step=3)  # Rainbow's: importance weights, n-step discounts
    stats = []
    for a, off in ((agent, ()), (twin, ("learn",))):  # the same transitions and noise draws, while updates agree
        torch.manual_seed(2)
        buf = replay.make_buffer(1000, seed=0, dtypes={"reward": np.float32, "done": np.float32})
        with fast.off(*off) if off else contextlib.nullcontext():  # the twin: RainbowDQN.learn's autograd path
            stats.append(OffPolicyEngine(replay, 64, 1000).learn(a, env, buf, np.random.default_rng(0), 480, seed=3))
    _same_state(agent, twin)
    for a in (agent, twin):
        a.flat_target.ensure()
    assert torch.equal(agent.flat_target.data, twin.flat_target.data)
    assert stats[0] == stats[1]


def test_rainbow_falls_back_to_autograd_for_a_second_loss_term() -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    assert fast.select(_agent("RainbowDQN", env, combined_reward=True), "learn") is None
    layer_norm = {"latent_dim": 32, "encoder_config": {"arch": "mlp", "hidden_size": [32], "layer_norm": True}}
    assert fast_rainbow.by_hand(_agent("RainbowDQN", env, layer_norm)) is None
