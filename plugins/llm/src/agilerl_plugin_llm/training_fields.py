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

__all__ = ["LLMTrainingFields", "evaluation_interval_problems", "llm_training"]


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


def evaluation_interval_problems(manifest: Any) -> list[Problem]:
    """``training.evaluation_interval`` at or past ``training.max_steps``: the held-out evaluation
    runs at a multiple of it before the run's last step (the last is the generation's own evaluation),
    so no such evaluation would ever run and the field would do nothing."""
    interval, max_steps = llm_training(manifest).evaluation_interval, manifest.training.max_steps
    if interval is None or interval < max_steps:
        return []
    return [Problem("training.evaluation_interval", (
        f"{interval} is not below training.max_steps ({max_steps}): a held-out evaluation runs every "
        "evaluation_interval steps before the last, so none would ever run (each generation's end is evaluated "
        "anyway); lower it or remove the field"))]  # fmt: skip
