"""What the rollout part registers with agilerl (called from agilerl_plugin_llm.hooks).

Everything is named as ``"module:attr"`` strings (or pure-pydantic classes), so registering and
``agilerl validate`` never import torch or transformers.
"""

from __future__ import annotations

from typing import Any

from agilerl_plugin_llm.rollout.specs import CISPOSpec, GRPOSpec, GSPOSpec, LLMPPOSpec, LLMREINFORCESpec, RLOOSpec
from agilerl_plugin_llm.specs import LLMEnvSpec


def register_algorithms(register: Any) -> None:
    register(GRPOSpec, algorithm="agilerl_plugin_llm.rollout.grpo:GRPO")
    # AgileRL's names for GRPO with the gspo / cispo loss: the same algorithm, the loss pinned by the spec.
    register(GSPOSpec, algorithm="agilerl_plugin_llm.rollout.grpo:GRPO")
    register(CISPOSpec, algorithm="agilerl_plugin_llm.rollout.grpo:GRPO")
    register(RLOOSpec, algorithm="agilerl_plugin_llm.rollout.rloo:RLOO")
    register(LLMREINFORCESpec, algorithm="agilerl_plugin_llm.rollout.reinforce:LLMREINFORCE")
    register(LLMPPOSpec, algorithm="agilerl_plugin_llm.rollout.ppo:LLMPPO")


def register_env_types(register: Any) -> None:
    register(
        "rollout",
        LLMEnvSpec,
        "agilerl_plugin_llm.rollout.env:make_rollout_env",
        functions={"make_rollout_env_factory": "agilerl_plugin_llm.rollout.env:make_rollout_env_factory"},
    )
    # AgileRL's names for rollout envs: the spec turns them into env_type: rollout at validation.
    for legacy in ("reasoning", "multiturn"):
        register(legacy, LLMEnvSpec, "agilerl_plugin_llm.rollout.env:make_rollout_env")


def register_builders(register: Any) -> None:
    pass  # the paradigm's builder (LLMBuilder) is registered by the dataset part


def register_strategies(register: Any) -> None:
    register("llm", "rollout", "agilerl_plugin_llm.rollout.strategy:LLMRolloutStrategy")


def register_rollout_sources(register: Any) -> None:
    """The built-in rollout sources, through this plugin's own hook (as any other plugin would)."""
    rows = "agilerl_plugin_llm.rollout.sources:build_dataset_source"
    # Rows and rubric, read without running them; for a catalog name (environment.name: gsm8k) first
    # whether its dataset is on this machine.
    check = "agilerl_plugin_llm.check_data:dataset_source_problems"
    for field in ("dataset", "dataset_path", "hf_dataset_id"):
        register(field, rows, check=check)
    # A GEM game's options, checked against the game's own arguments (GEM drops unknown ones).
    register("entrypoint", "agilerl_plugin_llm.rollout.sources:build_entrypoint_source",
             check="agilerl_plugin_llm.rollout.gem_envs:entrypoint_problems")  # fmt: skip
