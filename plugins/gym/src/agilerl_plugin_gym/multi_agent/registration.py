"""What this part registers with agilerl (called from agilerl_plugin_gym.hooks).

Specs are imported (pydantic only); algorithms, the builder and the strategies are given as
``"module:attr"`` strings so registration and ``agilerl validate`` never import torch.
"""

from __future__ import annotations

from typing import Any

from agilerl_plugin_gym.multi_agent.specs import IPPOSpec, MADDPGSpec, MATD3Spec

_PKG = "agilerl_plugin_gym.multi_agent"


def register_algorithms(register: Any) -> None:
    register(IPPOSpec, "IPPO", algorithm=f"{_PKG}.ippo:IPPO")
    register(MADDPGSpec, "MADDPG", algorithm=f"{_PKG}.maddpg:MADDPG")
    register(MATD3Spec, "MATD3", algorithm=f"{_PKG}.maddpg:MATD3")


def register_env_types(register: Any) -> None:
    # PettingZoo envs use the `gym` env type (GymEnvSpec) registered by the single-agent part; its
    # factory routes multi-agent runs to agilerl_plugin_gym.multi_agent.vec_env:make_pz_env.
    pass


def register_builders(register: Any) -> None:
    register("multi_agent", f"{_PKG}.builder:MultiAgentBuilder")


def register_strategies(register: Any) -> None:
    register("multi_agent", "on_policy", f"{_PKG}.strategies:MultiAgentOnPolicyStrategy")
    register("multi_agent", "off_policy", f"{_PKG}.strategies:MultiAgentOffPolicyStrategy")
