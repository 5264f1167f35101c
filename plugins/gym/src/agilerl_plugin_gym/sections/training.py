"""The ``training`` fields only this plugin's algorithms read (pydantic only).

Registered with core through ``agilerl_register_sections`` as an extension of core's ``training``
section: the YAML layout is AgileRL's (one ``training`` mapping), the schema of these fields is
ours. Like every plugin-registered training field, each is refused by name for an algorithm whose
spec does not list it in ``training_fields``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from agilerl.models.base import Spec
from agilerl.models.composition import training_as

__all__ = ["RLTrainingFields", "rl_training"]


class RLTrainingFields(Spec):
    """Exploration, learning delay, multi-agent scoring (DQN, DDPG, TD3, MADDPG, ...) and bandit episodes."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "learning_delay": "Refused for algorithms that do not read it (each algorithm lists what it reads).",
        "eps_start": "Refused for algorithms that do not read it.", "eps_end": "As eps_start.",
        "eps_decay": "As eps_start.",
        "eps_linear_steps": "Ours (SB3's exploration_fraction x total_timesteps): a linear epsilon schedule instead of "
        "AgileRL's multiplicative eps_decay. Refused for algorithms that do not read it.",
        "episode_steps": "Bandits (NeuralUCB, NeuralTS): steps per training episode, the env reset at each start and "
        "each episode's total reward a training score (train_return). Refused for algorithms that do not read it.",
        "sum_scores": "Refused for algorithms that do not read it.",
        "experience_sharing": "Refused for algorithms that do not read it.",
    }  # fmt: skip
    field_synonyms: ClassVar[dict[str, str]] = {
        "learning_starts": "learning_delay", "exploration_initial_eps": "eps_start", "exploration_final_eps": "eps_end",
    }  # fmt: skip

    learning_delay: Annotated[int | None, Field(ge=0)] = None
    eps_start: Annotated[float | None, Field(ge=0, le=1)] = None
    eps_end: Annotated[float | None, Field(ge=0, le=1)] = None
    eps_decay: Annotated[float | None, Field(gt=0, le=1)] = None
    eps_linear_steps: Annotated[int | None, Field(ge=1)] = None
    episode_steps: Annotated[int | None, Field(ge=1)] = None
    sum_scores: bool | None = None
    experience_sharing: bool | None = None

    @model_validator(mode="after")
    def _one_eps_schedule(self) -> RLTrainingFields:
        if self.eps_decay is not None and self.eps_linear_steps is not None:
            raise ValueError(
                "eps_decay (multiplicative) and eps_linear_steps (linear) are two epsilon schedules; set only one"
            )
        return self


def rl_training(manifest: Any) -> RLTrainingFields:
    """``manifest.training`` as the fields this plugin adds to it (core composes the section from
    every plugin's fields, so a validated manifest's ``training`` is one of these)."""
    return training_as(manifest, RLTrainingFields)
