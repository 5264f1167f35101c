"""The ``training`` fields only LLM algorithms read (pydantic only), among them AgileRL's
distributed-training settings.

Registered with core through ``agilerl_register_sections`` as an extension of core's ``training``
section. Like every plugin-registered training field, each is refused by name for an algorithm
whose spec does not list it in ``training_fields``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from agilerl.errors import Problem
from agilerl.models.base import Spec
from agilerl.models.composition import training_as

__all__ = [
    "DEFAULT_EVAL_PROMPTS",
    "LLMTrainingFields",
    "eval_prompt_count",
    "eval_prompts_problems",
    "llm_training",
]

#: The held-out evaluation's default size cap: at an exact-match rate near 0.6, 128 prompts give a
#: standard error of 0.043, so a gain of about 0.1 shows at two standard errors (docs/llm.md).
DEFAULT_EVAL_PROMPTS = 128


class LLMTrainingFields(Spec):
    """Epochs, held-out evaluation, rollout mode and AgileRL's distributed-training settings."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "evaluation_interval": "Refused unless the algorithm declares it in training_fields (a plugin's algorithm "
        "that does runs a held-out evaluation every that many iterations, besides each generation's).",
        "num_epochs": "Refused unless the algorithm declares it in training_fields (where it does, the run "
        "stops after that many passes over the training rows, or at max_steps if sooner).",
        "evo_epochs": "Refused unless the algorithm reads it (none does yet).",
        "rollout_mode": "Refused for algorithms that do not read it.",
        "eval_samples_per_task": "Rollout algorithms: k sampled completions per held-out prompt besides the greedy "
        "pass, logged as eval/eval_sampled_* with standard errors; refused for SFT/DPO.",
        "eval_greedy": "Rollout algorithms: false drops the greedy held-out pass and makes the sampled one the "
        "fitness; refused for SFT/DPO.",
        "eval_prompts": "Ours (AgileRL sizes it as eval_loop x batch_size). Rollout algorithms only; refused for "
        "SFT/DPO.",
    }
    field_synonyms: ClassVar[dict[str, str]] = {"num_train_epochs": "num_epochs"}

    evaluation_interval: Annotated[int | None, Field(ge=1)] = None
    num_epochs: Annotated[int | None, Field(ge=1)] = None
    evo_epochs: Annotated[int | None, Field(ge=1)] = None
    rollout_mode: Literal["colocated", "async"] = "colocated"
    # The held-out decoding (rollout algorithms read eval_samples_per_task and eval_greedy: agent.test);
    # AgileRL's other evaluation and distributed-training settings (no algorithm here reads them yet)
    eval_samples_per_task: Annotated[int, Field(ge=0)] = 0
    eval_greedy: bool = True
    eval_prompts: Annotated[
        int | None,
        Field(ge=1, description=(
            "Held-out prompts per evaluation of a rollout algorithm. Unset: every held-out row of a dataset up to "
            f"{DEFAULT_EVAL_PROMPTS} (other sources: eval_loop x batch_size); with eval_loop given, eval_loop x "
            "batch_size as in AgileRL (set one of the two).")),
    ] = None  # fmt: skip
    eval_max_concurrent_episodes: Annotated[int | None, Field(ge=1)] = None
    env_resource_ratio: Annotated[float | None, Field(gt=0)] = None
    rollout_batch_size: Annotated[int | None, Field(ge=1)] = None
    rollout_engines_per_agent: int | Literal["auto"] = 0
    training_gpus_per_agent: Annotated[int, Field(ge=1)] = 1
    weight_sync_backend: Literal["filesystem", "nccl"] | None = None
    reuse_prefix_cache_across_syncs: bool = False
    weight_sync_interval: Annotated[int | None, Field(ge=1)] = None
    rollout_version_stamp: Literal["publish", "oldest_turn"] | None = None
    checkpoint_export: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "async_rollout" in data:
            raise ValueError("async_rollout was retired by AgileRL; write rollout_mode: async")
        return data

    @model_validator(mode="after")
    def _epochs(self) -> LLMTrainingFields:
        if self.evo_epochs is not None and self.num_epochs is None:
            raise ValueError("evo_epochs needs num_epochs")
        return self


def llm_training(manifest: Any) -> LLMTrainingFields:
    """``manifest.training`` as the fields this plugin adds to it (core composes the section from
    every plugin's fields, so a validated manifest's ``training`` is one of these)."""
    return training_as(manifest, LLMTrainingFields)


def eval_prompt_count(manifest: Any, heldout_rows: int | None) -> int:
    """The held-out prompts a rollout run scores per evaluation: ``training.eval_prompts``; else, where the
    manifest gives ``eval_loop``, AgileRL's ``eval_loop x batch_size``; else every held-out row up to
    :data:`DEFAULT_EVAL_PROMPTS` (``heldout_rows``: the held-out split's size, None for a source without
    rows, an env drawing its own episodes, which then gets ``eval_loop x batch_size``)."""
    t = manifest.training
    given = llm_training(manifest).eval_prompts
    if given is not None:
        return int(given)
    loop_size = int(t.eval_loop) * int(manifest.algorithm.batch_size)
    if "eval_loop" in t.model_fields_set or heldout_rows is None:
        return loop_size
    return max(1, min(int(heldout_rows), DEFAULT_EVAL_PROMPTS))


def eval_prompts_problems(manifest: Any) -> list[Problem]:
    """``training.eval_prompts`` and ``training.eval_loop`` both given: two sizes for one evaluation."""
    t = manifest.training
    if llm_training(manifest).eval_prompts is None or "eval_loop" not in t.model_fields_set:
        return []
    return [Problem("training.eval_prompts", (
        f"and training.eval_loop ({t.eval_loop}) both set the held-out evaluation's size; keep one: eval_prompts "
        "counts prompts, eval_loop counts batches of batch_size prompts (AgileRL's reading)"))]  # fmt: skip
