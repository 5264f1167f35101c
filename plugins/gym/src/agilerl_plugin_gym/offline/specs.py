"""Manifest sections of offline RL: ``OfflineEnvSpec`` (``env_type: offline``) and ``CQNSpec``.

Pydantic only (cheap to import: registration and ``agilerl validate`` import no torch). The dataset
itself is checked at validation by :func:`agilerl_plugin_gym.offline.datasets.dataset_problems`
(keys, shapes against the env's spaces, values), before anything trains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from agilerl.errors import Problem
from agilerl.models.base import Mutable
from agilerl_plugin_gym.env_spec import GymEnvSpec
from agilerl_plugin_gym.single_agent.specs import QLearningSpec

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest

__all__ = ["CQNSpec", "OfflineEnvSpec"]


class OfflineEnvSpec(GymEnvSpec):
    """A gym environment whose training transitions come from a fixed dataset (AgileRL's name).

    Training never steps the env: it samples the dataset. The env (every ``GymEnvSpec`` field:
    ``name``, ``entrypoint``, wrappers, ...) is made for evaluation and to check the dataset's
    shapes against its spaces. Exactly one dataset source: ``dataset_path`` (an HDF5 file in
    AgileRL's offline format) or ``minari_dataset_id`` (a Minari dataset already on this machine).
    """

    upstream_notes: ClassVar[dict[str, str]] = {
        "remote": "Only false: nothing is downloaded at run time (run `minari download <id>` beforehand).",
        "dataset_path": "Also reads next_observations and timeouts when the file has them.",
        "num_envs": "Evaluation envs only (training never steps the env); at most 10 are made.",
    }

    env_type: Literal["offline"] = "offline"  # type: ignore[assignment]
    num_envs: Annotated[int, Field(ge=1, description="Evaluation envs (min(num_envs, 10) are made).")] = 32
    sync: bool = Field(
        default=False, description="SyncVectorEnv (one process) instead of AsyncVectorEnv, for evaluation."
    )
    minari_dataset_id: str | None = Field(
        default=None,
        description="A Minari dataset id, read from the local Minari directory (MINARI_DATASETS_PATH, "
        "default ~/.minari/datasets); never downloaded.",
    )
    dataset_path: str | None = Field(
        default=None,
        description="An HDF5 file in AgileRL's offline format: observations, actions, rewards, terminals "
        "(optional next_observations, timeouts).",
    )
    remote: bool = Field(default=False, description="Download the Minari dataset: false only (nothing is downloaded).")

    @field_validator("remote")
    @classmethod
    def _no_download(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "downloading Minari datasets is not supported (nothing is downloaded at run time); "
                "download it beforehand with `minari download <dataset id>` and set remote: false"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> OfflineEnvSpec:
        if self.minari_dataset_id and self.dataset_path:
            raise ValueError(
                "give either dataset_path (an HDF5 file) or minari_dataset_id (a local Minari dataset), not both"
            )
        if not (self.minari_dataset_id or self.dataset_path):
            raise ValueError(
                "an offline env needs a dataset: set dataset_path (an HDF5 file in AgileRL's offline format) "
                "or minari_dataset_id (a Minari dataset in the local Minari directory)"
            )
        return self

    @property
    def dataset_label(self) -> str:
        """``minari:<id>`` or the HDF5 path, for logs and errors."""
        return f"minari:{self.minari_dataset_id}" if self.minari_dataset_id else str(self.dataset_path)


class CQNSpec(QLearningSpec):
    """Conservative Q-Network: CQL applied to DQN, trained offline from a dataset, discrete actions."""

    regime: ClassVar[str] = "offline"
    default_env_type: ClassVar[str] = "offline"
    default_evo_steps: ClassVar[int] = 5_000
    training_fields: ClassVar[frozenset[str]] = frozenset({"learning_delay"})
    upstream_notes: ClassVar[dict[str, str]] = {
        "learn_step": "Steps per gradient step (AgileRL's offline loop ignores it: one gradient step per step).",
    }

    learn_step: Annotated[
        int,
        Field(ge=1, description="Steps per gradient step: a generation of evo_steps takes evo_steps // learn_step."),
        Mutable(1, 10),
    ] = 5
    double: bool = Field(default=False, description="Double Q-learning: the online net picks the next action.")

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        problems = super().manifest_problems(manifest)
        env = manifest.environment
        if problems or not isinstance(env, OfflineEnvSpec):
            return problems
        from agilerl_plugin_gym.offline.datasets import (
            dataset_problems,  # deferred: gymnasium, loaded only when validation builds an env
        )

        return dataset_problems(env, self.batch_size)
