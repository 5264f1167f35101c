"""Manifest specs of the rollout algorithms: GRPO and LLMREINFORCE.

Pure pydantic: importing this module imports neither torch nor transformers, so ``agilerl validate``
stays fast. Every field here is honoured by the algorithm; fields AgileRL has that we do not
implement are rejected by ``extra="forbid"`` (an "unknown field" error naming the closest valid one)
or, for inherited ones, by :meth:`RolloutLLMSpec._unsupported` with a "not supported" message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from agilerl.errors import Problem
from agilerl_plugin_llm.spec_base import LLMAlgorithmSpec

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest

#: Default mutation ranges shared by the rollout family (AgileRL's LLM ranges).
ROLLOUT_HPO_RANGES: dict[str, tuple[float, float]] = {
    "batch_size": (1, 32),
    "lr": (1e-7, 1e-5),
    "clip_coef": (0.05, 0.35),
    "max_grad_norm": (0.01, 10.0),
    "beta": (1e-4, 1e-2),
    "update_epochs": (1, 10),
    "temperature": (0.1, 1.0),
    "group_size": (4, 16),
}

# Inherited LLMAlgorithmSpec fields that change generation and that no backend here implements.
_UNSUPPORTED_GENERATION_FIELDS = {
    "constrain_answer_pattern": "structured (regex-constrained) decoding is not supported yet",
    "thinking_token_budget": "thinking budgets are not supported yet",
    "answer_continuation": "answer continuation is not supported yet",
}


class RolloutLLMSpec(LLMAlgorithmSpec):
    """Fields every rollout (generate-then-learn) LLM algorithm shares.

    ``batch_size`` is the number of prompts (episodes, or GRPO groups) per optimizer iteration;
    ``training.max_steps``/``evo_steps`` count those iterations.
    """

    regime: ClassVar[str] = "rollout"
    default_env_type: ClassVar[str] = "rollout"
    hpo_ranges: ClassVar[dict[str, tuple[float, float]]] = ROLLOUT_HPO_RANGES

    temperature: Annotated[
        float, Field(ge=0.0, description="Sampling temperature while collecting rollouts (0: greedy).")
    ] = 0.9
    top_p: Annotated[float, Field(gt=0.0, le=1.0, description="Nucleus sampling mass (1: off).")] = 1.0
    top_k: Annotated[int, Field(ge=0, description="Sample among the k most likely tokens (0: off).")] = 50
    min_p: Annotated[
        float, Field(ge=0.0, le=1.0, description="Drop tokens below min_p x the top probability (0: off).")
    ] = 0.0
    repetition_penalty: Annotated[
        float, Field(gt=0.0, description="CTRL-style penalty on tokens already in the context (1: off).")
    ] = 1.0
    max_output_tokens: Annotated[
        int | None, Field(ge=1, description="New tokens per turn (None: 64, capped by the context).")
    ] = None
    min_output_tokens: Annotated[
        int | None, Field(ge=0, description="Suppress end-of-sequence before this many new tokens.")
    ] = None
    generation_backend: Annotated[
        Literal["auto", "hf", "vllm"],
        Field(description="auto: vLLM (colocated) when it imports and CUDA is present, else HF generate."),
    ] = "auto"
    vllm_sleep_mode: Annotated[
        bool, Field(description="Put the colocated vLLM engine to sleep while training (frees GPU memory).")
    ] = True
    vllm_gpu_memory_utilization: Annotated[
        float, Field(gt=0.0, le=1.0, description="Fraction of GPU memory the colocated vLLM engine may take.")
    ] = 0.3

    @model_validator(mode="after")
    def _unsupported(self) -> RolloutLLMSpec:
        for name, why in _UNSUPPORTED_GENERATION_FIELDS.items():
            value = getattr(self, name, None)
            if value not in (None, False):
                raise ValueError(f"{name}: {why}; remove it from the algorithm section")
        if self.min_output_tokens is not None and self.max_output_tokens is not None:
            if self.min_output_tokens > self.max_output_tokens:
                raise ValueError(
                    f"min_output_tokens ({self.min_output_tokens}) is greater than "
                    f"max_output_tokens ({self.max_output_tokens})"
                )
        return self

    @property
    def new_tokens(self) -> int:
        """New tokens per turn, with the default applied."""
        return self.max_output_tokens if self.max_output_tokens is not None else 64

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        problems: list[Problem] = []
        env_type = getattr(manifest.environment, "env_type", None)
        if env_type != "rollout":
            problems.append(Problem(
                "environment.env_type",
                f"{self.name} trains on generated rollouts: use env_type: rollout (got {env_type!r})",
            ))  # fmt: skip
        if env_type == "rollout":
            # Exactly one rollout source (sources are registered by name: nothing heavy imports).
            from agilerl_plugin_llm.rollout.sources import RolloutSourceError, select_source, unsupported_fields

            try:
                source = select_source(manifest.environment)
            except RolloutSourceError as exc:
                field, _, message = str(exc).partition(": ")
                problems.append(Problem(field, message or str(exc)))
            else:
                for name, why in unsupported_fields(manifest.environment, source.field):
                    problems.append(Problem(f"environment.{name}", f"{why}; remove it"))
                for name, why in source.problems(manifest.environment):
                    problems.append(Problem(f"environment.{name}", why))
        if self.new_tokens >= self.max_model_len:
            problems.append(Problem(
                "algorithm.max_output_tokens",
                f"{self.new_tokens} new tokens leave no room for a prompt in max_model_len={self.max_model_len}; "
                "lower max_output_tokens or raise network.max_context_length",
            ))  # fmt: skip
        return problems


class GRPOSpec(RolloutLLMSpec):
    """Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath).

    Each prompt is answered ``group_size`` times; a completion's advantage is its reward relative to
    its group's; the policy follows a clipped importance-ratio objective with a KL penalty (``beta``,
    the k3 estimator) towards the reference policy.
    """

    group_size: Annotated[int, Field(ge=2, description="Completions sampled per prompt (the group).")] = 8
    lr: Annotated[float, Field(gt=0.0, description="AdamW learning rate.")] = 5e-7
    clip_coef: Annotated[float, Field(ge=0.0, description="PPO-style clip range of the importance ratio.")] = 0.2
    adv_norm: Annotated[
        Literal["mean_only", "mean_std"],
        Field(description="Group advantage: reward - group mean (mean_only), divided by the group std (mean_std)."),
    ] = "mean_std"
    loss_type: Annotated[
        Literal["grpo", "gspo", "cispo"],
        Field(
            description="grpo: token-level clipped ratio; gspo: sequence-level ratio (geometric mean); "
            "cispo: clipped, detached ratio weighting the log-probability."
        ),
    ] = "grpo"
    kl_clamp: Annotated[
        float | None, Field(gt=0.0, description="Clamp the per-token k3 KL estimate to [0, kl_clamp].")
    ] = 10.0
    filter_zero_adv: Annotated[
        bool, Field(description="Skip groups whose rewards are all equal (their advantage is zero).")
    ] = False


class LLMREINFORCESpec(RolloutLLMSpec):
    """REINFORCE for LLMs: one sampled episode per prompt, return minus a batch-mean baseline.

    Multi-turn episodes credit each turn with its discounted return-to-go (``gamma``); with
    ``update_epochs > 1`` the ratio to the sampling policy is clipped like PPO (``clip_coef``).
    """

    temperature: Annotated[float, Field(ge=0.0)] = 1.0
    max_grad_norm: Annotated[float, Field(ge=0.0)] = 1.0
    lr: Annotated[float, Field(gt=0.0, description="AdamW learning rate.")] = 5e-7
    clip_coef: Annotated[float, Field(ge=0.0, description="Clip range of the importance ratio.")] = 0.2
    gamma: Annotated[float, Field(ge=0.0, le=1.0, description="Discount across turns.")] = 1.0
    baseline: Annotated[
        Literal["batch_mean", "none"], Field(description="Subtract the batch's mean return (lower variance).")
    ] = "batch_mean"
    whiten_advantages: Annotated[bool, Field(description="Divide advantages by their batch std.")] = False


__all__ = ["ROLLOUT_HPO_RANGES", "GRPOSpec", "LLMREINFORCESpec", "RolloutLLMSpec"]
