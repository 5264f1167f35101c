"""What the single-agent part registers with agilerl (called from agilerl_plugin_gym.hooks).

Spec classes are pydantic only; algorithms, builders, strategies and env factories are given as
``"module:attr"`` strings so that registering (and ``agilerl validate``) imports no torch.
"""

from __future__ import annotations

from typing import Any

from agilerl_plugin_gym.env_spec import GymEnvSpec
from agilerl_plugin_gym.offline.specs import CQNSpec, OfflineEnvSpec
from agilerl_plugin_gym.single_agent.specs import (
    A2CSpec,
    DDPGSpec,
    DQNSpec,
    PPOSpec,
    RainbowDQNSpec,
    SACSpec,
    TD3Spec,
    TQCSpec,
)

_PKG = "agilerl_plugin_gym.single_agent"


def register_algorithms(register: Any) -> None:
    register(PPOSpec, algorithm=f"{_PKG}.ppo:PPO")
    register(DQNSpec, algorithm=f"{_PKG}.dqn:DQN")
    register(DDPGSpec, algorithm=f"{_PKG}.ddpg:DDPG")
    register(TD3Spec, algorithm=f"{_PKG}.td3:TD3")
    register(SACSpec, algorithm=f"{_PKG}.sac:SAC")
    register(A2CSpec, algorithm=f"{_PKG}.a2c:A2C")
    register(TQCSpec, algorithm=f"{_PKG}.tqc:TQC")
    register(CQNSpec, algorithm="agilerl_plugin_gym.offline.cqn:CQN")
    register(RainbowDQNSpec, algorithm=f"{_PKG}.rainbow:RainbowDQN")


def register_env_types(register: Any) -> None:
    register(
        "gym",
        GymEnvSpec,
        "agilerl_plugin_gym.envs:make_env",
        functions={
            "make_gym_env": "agilerl_plugin_gym.envs:make_gym_env",
            "make_single_env": "agilerl_plugin_gym.envs:make_single_env",
            "make_pz_env": "agilerl_plugin_gym.multi_agent.vec_env:make_pz_env",
        },
    )
    # Offline RL: the env is a gym env (made for evaluation); the training data is a dataset.
    register("offline", OfflineEnvSpec, "agilerl_plugin_gym.envs:make_env")


def register_builders(register: Any) -> None:
    register("single_agent", f"{_PKG}.builder:SingleAgentBuilder")


def register_strategies(register: Any) -> None:
    register("single_agent", "on_policy", f"{_PKG}.strategies:OnPolicyStrategy")
    register("single_agent", "off_policy", f"{_PKG}.strategies:OffPolicyStrategy")
    register("single_agent", "offline", "agilerl_plugin_gym.offline.strategy:OfflineStrategy")
