"""Hook implementations of agilerl-plugin-llm.

Split by part: ``agilerl_plugin_llm.dataset.registration`` (SFT, DPO, dataset envs, the shared
builder) and ``agilerl_plugin_llm.rollout.registration`` (GRPO, LLMREINFORCE, rollout envs and the
rollout-source hook). Keep imports here cheap: no torch or transformers at registration.
"""

from __future__ import annotations

from typing import Any

import pluggy

from agilerl.hookspecs import hookimpl
from agilerl_plugin_llm import hookspecs
from agilerl_plugin_llm.dataset import registration as dataset
from agilerl_plugin_llm.export import register_commands
from agilerl_plugin_llm.rollout import completions_log
from agilerl_plugin_llm.rollout import registration as rollout


@hookimpl
def agilerl_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    plugin_manager.add_hookspecs(hookspecs)


@hookimpl
def agilerl_register_algorithms(register: Any) -> None:
    dataset.register_algorithms(register)
    rollout.register_algorithms(register)


@hookimpl
def agilerl_register_env_types(register: Any) -> None:
    dataset.register_env_types(register)
    rollout.register_env_types(register)


@hookimpl
def agilerl_register_builders(register: Any) -> None:
    dataset.register_builders(register)


@hookimpl
def agilerl_register_strategies(register: Any) -> None:
    dataset.register_strategies(register)
    rollout.register_strategies(register)


@hookimpl
def agilerl_llm_register_rollout_sources(register: Any) -> None:
    rollout.register_rollout_sources(register)


@hookimpl
def agilerl_register_commands(subparsers: Any) -> None:
    register_commands(subparsers)
    completions_log.register_commands(subparsers)  # agilerl completions RUN_DIR


@hookimpl
def agilerl_register_sections(register: Any) -> None:
    # The training fields only LLM algorithms read (AgileRL's epochs, rollout and distributed settings).
    register("training", "agilerl_plugin_llm.training_fields:LLMTrainingFields")
