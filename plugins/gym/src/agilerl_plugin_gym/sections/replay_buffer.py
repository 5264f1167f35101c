"""The ``replay_buffer`` section (pydantic only): experience replay for off-policy algorithms.

Registered with core through ``agilerl_register_sections``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, Field, field_validator

from agilerl.models.base import Spec

__all__ = ["HerArgs", "NStepArgs", "PerArgs", "ReplayBufferSpec"]


class NStepArgs(Spec):
    n_step: Annotated[int, Field(ge=1)] = 3


class PerArgs(Spec):
    alpha: Annotated[float, Field(ge=0, le=1)] = 0.5


class HerArgs(Spec):
    """Hindsight experience replay's arguments (SB3's ``replay_buffer_kwargs`` of ``HerReplayBuffer``)."""

    n_sampled_goal: Annotated[
        int, Field(ge=1, description="Relabelled goals per real one: 1 - 1/(n+1) of each batch is relabelled.")
    ] = 4
    goal_selection_strategy: Literal["future", "final", "episode"] = Field(
        default="future",
        description="Where a relabelled goal comes from: a later step of the episode (future), its last step "
        "(final) or any step (episode).",
    )


class ReplayBufferSpec(Spec):
    """Experience replay for off-policy algorithms."""

    field_synonyms: ClassVar[dict[str, str]] = {
        "buffer_size": "max_size", "capacity": "max_size", "replay_buffer_class": "her",
        "replay_buffer_kwargs": "her_args", "n_sampled_goal": "her_args", "goal_selection_strategy": "her_args",
    }  # fmt: skip
    upstream_notes: ClassVar[dict[str, str]] = {
        "standard_buffer": "Only true.",
        "kind": "Only classic (AgileRL's other buffer kind is not supported yet).",
        "n_step_buffer": "Honoured by the algorithms whose plugin implements n-step returns (see the "
        "plugin's docs); every other algorithm refuses it by name.",
        "per_buffer": "Honoured by the algorithms whose plugin implements prioritised replay (see the "
        "plugin's docs); every other algorithm refuses it by name.",
    }

    kind: str = Field(default="classic", description="Only classic (experience replay) is supported.")
    name: str | None = None
    max_size: Annotated[int, Field(ge=1, validation_alias=AliasChoices("max_size", "memory_size"))] = 100_000
    standard_buffer: bool = True
    n_step_buffer: bool = False
    n_step_buffer_args: NStepArgs = Field(default_factory=NStepArgs)
    per_buffer: bool = False
    per_buffer_args: PerArgs = Field(default_factory=PerArgs)
    her: bool = Field(
        default=False,
        description="Hindsight experience replay (SB3's HerReplayBuffer) for goal-conditioned Dict envs "
        "(observation, achieved_goal, desired_goal, compute_reward); single-agent off-policy algorithms.",
    )
    her_args: HerArgs = Field(default_factory=HerArgs)
    # AgileRL's group-replay buffer (its other kind): accepted at their defaults only.
    max_rollout_version_lag: Annotated[int | None, Field(ge=0)] = None
    drop_uninformative_groups: bool = False
    group_replay_max_age: Annotated[int, Field(ge=0)] = 0

    @field_validator("kind")
    @classmethod
    def _classic(cls, value: str) -> str:
        if value != "classic":
            raise ValueError(f"replay buffer kind {value!r} is not supported yet; use kind: classic")
        return value

    @field_validator("max_rollout_version_lag", "drop_uninformative_groups", "group_replay_max_age")
    @classmethod
    def _group_buffer(cls, value: Any) -> Any:
        if value:
            raise ValueError("not supported yet (AgileRL's group-replay buffer); remove it")
        return value

    @field_validator("standard_buffer")
    @classmethod
    def _standard(cls, value: bool) -> bool:
        if not value:
            raise ValueError("false is not supported yet: every replay buffer here is a standard one")
        return value
