"""DQN's options for Stable-Baselines3's semantics (issue 35's ablation, benchmarks/gym/ablate_learning.py):
the hard target copy every ``target_update_interval`` gradient steps, the linear epsilon schedule
``training.eps_linear_steps``, and ``max_grad_norm``; ``update_burst``'s schedule is in test_engine.py,
the fast path's agreement with autograd under all of them in fast/test_hand_written_gradients.py."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from agilerl.builders import AlgorithmBuildRuntime
from agilerl.models import load_manifest
from agilerl_plugin_gym.engine.off_policy import OffPolicyEngine
from agilerl_plugin_gym.engine.replay_per import ReplaySettings
from agilerl_plugin_gym.sections.training import rl_training
from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder


def _manifest(algorithm: dict[str, Any], training: dict[str, Any] | None = None) -> Any:
    return load_manifest({
        "algorithm": {"name": "DQN", "batch_size": 16, "learn_step": 1, **algorithm},
        "environment": {"name": "CartPole-v1"},
        "network": {"latent_dim": 16, "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False}},
        "training": {"max_steps": 1000, **(training or {})},
    })  # fmt: skip


def _agent(manifest: Any, env: Any) -> Any:
    torch.manual_seed(0)
    agent = SingleAgentBuilder.build(
        manifest.algorithm, env.single_observation_space, env.single_action_space,
        runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest),
    )  # fmt: skip
    agent.init_exploration(rl_training(manifest))
    return agent


def _target(agent: Any) -> torch.Tensor:
    agent.flat_target.ensure()
    return agent.flat_target.data.clone()


def _online(agent: Any) -> torch.Tensor:
    agent.flat.ensure()
    return agent.flat.data.clone()


def test_hard_target_is_the_online_network_every_interval_and_frozen_in_between() -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    agent = _agent(_manifest({"target_update_interval": 5}), env)
    buf = ReplaySettings().make_buffer(1000, seed=0, dtypes={"reward": np.float32, "done": np.float32})
    engine = OffPolicyEngine(ReplaySettings(), learning_delay=16, max_steps=1000)
    start = _target(agent)
    engine.learn(agent, env, buf, np.random.default_rng(0), 18, seed=0)  # 3 gradient steps (from step 16)
    assert agent.gradient_steps == 3
    assert torch.equal(_target(agent), start)  # frozen: no Polyak drift between copies
    assert not torch.equal(_online(agent), start)
    engine.learn(agent, env, buf, np.random.default_rng(1), 2, seed=1)  # the 5th gradient step: a copy
    assert agent.gradient_steps == 5
    assert torch.equal(_target(agent), _online(agent))
    assert agent.extra_state()["gradient_steps"] == 5  # checkpointed: a resumed run copies on the same steps


def test_soft_target_moves_every_gradient_step_by_default() -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    agent = _agent(_manifest({}), env)
    buf = ReplaySettings().make_buffer(1000, seed=0, dtypes={"reward": np.float32, "done": np.float32})
    start = _target(agent)
    OffPolicyEngine(ReplaySettings(), learning_delay=16, max_steps=1000).learn(
        agent, env, buf, np.random.default_rng(0), 18, seed=0
    )
    moved = _target(agent)
    assert not torch.equal(moved, start) and not torch.equal(moved, _online(agent))


def test_linear_epsilon_reaches_eps_end_at_eps_linear_steps_as_sb3() -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    agent = _agent(_manifest({}, {"eps_start": 1.0, "eps_end": 0.04, "eps_linear_steps": 100}), env)
    seen = []
    for _ in range(60):  # 120 env steps: SB3's 1 + (0.04 - 1) * min(1, steps / 100)
        agent.end_step(np.zeros(2, dtype=bool))
        agent.steps += 2
        seen.append(agent.epsilon)
    assert seen[0] == pytest.approx(1 - 0.96 * 2 / 100)
    assert seen[24] == pytest.approx(1 - 0.96 * 50 / 100)  # halfway: linear, not multiplicative
    assert seen[49:] == pytest.approx([0.04] * 11)


def test_one_epsilon_schedule_at_a_time() -> None:
    with pytest.raises(Exception, match="set only one"):
        _manifest({}, {"eps_decay": 0.99, "eps_linear_steps": 100})


@pytest.mark.parametrize(
    ("head", "gain"), [({}, 1.0), ({"output_vanish": True}, 0.01), ({"output_vanish": False}, 1.0)]
)
def test_q_head_starts_as_a_value_head_unless_the_manifest_says_otherwise(head: dict[str, Any], gain: float) -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    manifest = load_manifest({
        "algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"},
        "network": {"latent_dim": 16, "encoder_config": {"arch": "mlp", "hidden_size": [16]},
                    "head_config": {"hidden_size": [], "init_layers": True, **head}},
    })  # fmt: skip
    weight = _agent(manifest, env).nets["actor"].head.output.weight  # orthogonal rows: norm = the gain
    assert torch.linalg.norm(weight, dim=1).detach() == pytest.approx([gain] * weight.shape[0], rel=1e-4)


def _dqn_net(network: dict[str, Any]) -> Any:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    manifest = load_manifest({"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"},
                              "network": {"latent_dim": 32, **network}})  # fmt: skip
    return _agent(manifest, env).nets["actor"]


def _torch_default(layer: torch.nn.Linear) -> bool:
    """nn.Linear's own init: weights and biases uniform in +-1/sqrt(fan_in), biases not all zero."""
    bound = 1 / layer.in_features**0.5
    w, b = layer.weight.detach(), layer.bias.detach()
    return bool(w.abs().max() <= bound and b.abs().max() <= bound and b.abs().max() > 0)


def test_q_network_starts_at_torchs_default_init_as_sb3s_unless_the_manifest_sets_init_layers() -> None:
    """SB3's QNetwork init (the DQN CartPole ablation, benchmarks/README.md): torch's default on the
    MLP encoder and head (``init_layers`` off on both, so a rebuild starts there too); ``init_layers:
    true`` on a part keeps the orthogonal init there (zero biases), the other part still at torch's."""
    net = _dqn_net({"encoder_config": {"arch": "mlp", "hidden_size": [64]}})
    layers = [*net.encoder.linears, net.encoder.output, net.head.output]
    assert all(_torch_default(lin) for lin in layers)
    assert not net.encoder.init_layers and not net.head.init_layers

    net = _dqn_net({"encoder_config": {"arch": "mlp", "hidden_size": [64], "init_layers": True}})
    assert net.encoder.init_layers and not net.head.init_layers
    assert all(float(lin.bias.detach().abs().max()) == 0.0 for lin in [*net.encoder.linears, net.encoder.output])
    assert _torch_default(net.head.output)

    # output_vanish without init_layers: torch's default x0.1 on the Q head's output layer
    vanish = _dqn_net({"encoder_config": {"arch": "mlp", "hidden_size": [64]}, "head_config": {"output_vanish": True}})
    assert float(vanish.head.output.weight.detach().abs().max()) <= 0.1 / 32**0.5
