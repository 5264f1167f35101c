"""Hook implementations of agilerl-plugin-gym.

Registration is split by part so the single-agent and multi-agent halves can grow independently:
``agilerl_plugin_gym.single_agent.registration`` and ``agilerl_plugin_gym.multi_agent.registration``
each define ``register_algorithms``, ``register_env_types``, ``register_builders`` and
``register_strategies``. Keep imports here cheap (pydantic specs only; classes as strings).
"""

from __future__ import annotations

from typing import Any

from agilerl.hookspecs import hookimpl
from agilerl_plugin_gym.multi_agent import registration as multi
from agilerl_plugin_gym.single_agent import registration as single


@hookimpl
def agilerl_register_algorithms(register: Any) -> None:
    single.register_algorithms(register)
    multi.register_algorithms(register)


@hookimpl
def agilerl_register_env_types(register: Any) -> None:
    single.register_env_types(register)


@hookimpl
def agilerl_register_builders(register: Any) -> None:
    single.register_builders(register)
    multi.register_builders(register)


@hookimpl
def agilerl_register_strategies(register: Any) -> None:
    single.register_strategies(register)
    multi.register_strategies(register)


@hookimpl
def agilerl_register_sections(register: Any) -> None:
    # The sections this plugin reads: their schemas are ours (agilerl_plugin_gym.sections).
    register("network", "agilerl_plugin_gym.sections.network:NetworkSpec")
    register("replay_buffer", "agilerl_plugin_gym.sections.replay_buffer:ReplayBufferSpec")
    register("training", "agilerl_plugin_gym.sections.training:RLTrainingFields")
