"""Every gym algorithm implements the declared strategy <-> algorithm protocol of its regime.

The strategies touch algorithms only through ``agilerl_plugin_gym.protocols`` (and core's
``agilerl.protocols.EvolvableAlgorithm``); this checks each built algorithm against the protocol
of its ``(paradigm, regime)``, including ``test(..., seed=)``.
"""

from __future__ import annotations

import inspect

import gymnasium as gym
import pytest

from agilerl.builders import AlgorithmBuildRuntime
from agilerl.models import load_manifest
from agilerl.protocols import EvolvableAlgorithm
from agilerl_plugin_gym import protocols
from agilerl_plugin_gym.multi_agent.builder import MultiAgentBuilder
from agilerl_plugin_gym.multi_agent.vec_env import make_pz_env
from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder

SINGLE = {"PPO": ("CartPole-v1", protocols.OnPolicyAlgorithm), "A2C": ("CartPole-v1", protocols.OnPolicyAlgorithm), "DQN": ("CartPole-v1", protocols.OffPolicyAlgorithm),
          "DDPG": ("Pendulum-v1", protocols.OffPolicyAlgorithm), "TD3": ("Pendulum-v1", protocols.OffPolicyAlgorithm),
          "SAC": ("Pendulum-v1", protocols.OffPolicyAlgorithm),
          "TQC": ("Pendulum-v1", protocols.OffPolicyAlgorithm)}  # fmt: skip
MULTI = {"IPPO": protocols.MultiAgentOnPolicyAlgorithm, "MADDPG": protocols.MultiAgentOffPolicyAlgorithm,
         "MATD3": protocols.MultiAgentOffPolicyAlgorithm}  # fmt: skip


def _check(agent: object, protocol: type) -> None:
    assert isinstance(agent, EvolvableAlgorithm)
    assert isinstance(agent, protocols.GymAlgorithmProtocol)
    assert isinstance(agent, protocol), protocol.__name__
    assert "seed" in inspect.signature(agent.test).parameters  # type: ignore[attr-defined]


@pytest.mark.parametrize("algo", list(SINGLE))
def test_single_agent_algorithms_implement_their_protocol(algo: str) -> None:
    env_id, protocol = SINGLE[algo]
    manifest = load_manifest({"algorithm": {"name": algo}, "environment": {"name": env_id}})
    env = gym.make(env_id)
    agent = SingleAgentBuilder.build(manifest.algorithm, env.observation_space, env.action_space)
    _check(agent, protocol)


@pytest.mark.parametrize("algo", list(MULTI))
def test_multi_agent_algorithms_implement_their_protocol(algo: str) -> None:
    env_spec = {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 2, "sync": True}
    manifest = load_manifest({"algorithm": {"name": algo}, "environment": env_spec})
    with make_pz_env(manifest.environment, sync=True) as env:
        agent = MultiAgentBuilder.build_for_run(
            manifest.algorithm, env=env, manifest=manifest, runtime=AlgorithmBuildRuntime(seed=0)
        )
    _check(agent, MULTI[algo])


@pytest.mark.parametrize(
    "name", ["PPO", "A2C", "DQN", "RainbowDQN", "DDPG", "TD3", "SAC", "TQC", "IPPO", "MADDPG", "MATD3"]
)
def test_every_builtin_algorithm_implements_its_strategys_protocol(name: str) -> None:
    """What `agilerl train` checks for every algorithm (and `agilerl validate` for a third party's)."""
    from agilerl.registry import MANIFEST_REGISTRY
    from agilerl.strategies import check_algorithm, joins_another_plugin, select_strategy

    spec = MANIFEST_REGISTRY.create(name)
    assert type(select_strategy(spec)).algorithm_protocol is not None
    assert not joins_another_plugin(spec)
    check_algorithm(spec)
