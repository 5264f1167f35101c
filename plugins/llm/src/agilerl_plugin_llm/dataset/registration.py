"""What the dataset part registers with agilerl (called from agilerl_plugin_llm.hooks).

Also the ``llm`` builder, which both parts share (the ``rollout`` env type, with the same
:class:`~agilerl_plugin_llm.specs.LLMEnvSpec`, is registered by the rollout part). Everything heavy is named
as a ``"module:attr"`` string, so registration (and ``agilerl validate``) imports no torch.
"""

from __future__ import annotations

from typing import Any

from agilerl_plugin_llm.dataset.specs import DPOSpec, RewardModelSpec, SFTSpec
from agilerl_plugin_llm.specs import LLMEnvSpec

MAKE_LLM_ENV = "agilerl_plugin_llm.dataset.env:make_llm_env"
FUNCTIONS = {"make_llm_env": MAKE_LLM_ENV}


def register_algorithms(register: Any) -> None:
    register(SFTSpec, algorithm="agilerl_plugin_llm.dataset.sft:SFT")
    register(DPOSpec, algorithm="agilerl_plugin_llm.dataset.dpo:DPO")
    register(RewardModelSpec, algorithm="agilerl_plugin_llm.dataset.reward_model:RewardModel")


def register_env_types(register: Any) -> None:
    register("dataset", LLMEnvSpec, MAKE_LLM_ENV, functions=FUNCTIONS)
    # AgileRL's names for dataset envs (the objective is the name): env_type: dataset after validation.
    for legacy in ("preference", "sft"):
        register(legacy, LLMEnvSpec, MAKE_LLM_ENV)


def register_builders(register: Any) -> None:
    register("llm", "agilerl_plugin_llm.builder:LLMBuilder")


def register_strategies(register: Any) -> None:
    register("llm", "dataset", "agilerl_plugin_llm.dataset.strategy:LLMDatasetStrategy")
