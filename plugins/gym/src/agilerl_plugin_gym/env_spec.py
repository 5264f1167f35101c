"""``GymEnvSpec``: the manifest's ``environment`` section for gymnasium (and PettingZoo) envs.

Pydantic only — cheap to import, so registration and ``agilerl validate`` never import gymnasium
or torch. Construction lives in :mod:`agilerl_plugin_gym.envs`.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, Field, field_validator

from agilerl.models.base import EnvSpec, Spec


def cpu_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


WrapperEntry = str | tuple[str, dict[str, Any]]


class NormalizeSpec(Spec):
    """``environment.normalize``: running-statistics normalisation saved with the agent, as
    Stable-Baselines3's ``VecNormalize`` (:mod:`agilerl_plugin_gym.normalization`).

    ``normalize: true`` is ``{obs: true}``. Statistics update during training only; evaluation,
    ``predict``, ``agilerl eval`` and the exported policy apply them frozen to raw observations.
    """

    field_synonyms: ClassVar[dict[str, str]] = {"norm_obs": "obs", "norm_reward": "reward"}

    obs: bool = Field(default=True, description="Normalise observations by their running mean and variance.")
    reward: bool = Field(
        default=False, description="Scale rewards by the running standard deviation of the discounted return."
    )
    clip_obs: Annotated[
        float, Field(gt=0, description="Normalised observations are clipped to [-clip_obs, clip_obs].")
    ] = 10.0
    clip_reward: Annotated[
        float, Field(gt=0, description="Scaled rewards are clipped to [-clip_reward, clip_reward].")
    ] = 10.0
    epsilon: Annotated[float, Field(gt=0, description="Added to the variance before the square root.")] = 1e-8
    gamma: Annotated[
        float | None,
        Field(gt=0, le=1, description="Discount of the return whose spread scales rewards (default: algorithm.gamma)."),
    ] = None


class GymEnvSpec(EnvSpec):
    """A gymnasium / PettingZoo environment, or a custom one from an entrypoint.

    Exactly one way of making the env is used, in this order: ``factory`` (a ``module:function``
    called with ``entrypoint`` (if given) and ``env_config``), ``entrypoint`` (a registered id or a
    ``module:Class`` called with ``env_config``), else ``name`` as a registered gymnasium id
    (``version`` is appended as ``-v<version>`` when ``name`` has none).
    """

    env_type: Literal["gym"] = "gym"
    name: Annotated[str, Field(min_length=1, description="Registered id (CartPole-v1) or a label for custom envs.")]
    num_envs: Annotated[int, Field(ge=1, description="Parallel envs in the vector env.")] = 32
    version: str | int | None = Field(default=None, description="Appended to name as -v<version> when name has none.")
    custom: bool = Field(default=False, description="A custom env (made from entrypoint/factory, not gym's registry).")
    default_type: str = Field(default="float32", description="dtype float observations are cast to.")
    entrypoint: str | None = Field(default=None, description="Registered id, or module:Class of a gymnasium.Env.")
    factory: str | None = Field(default=None, description="module:function returning an env (e.g. gymnasium:make).")
    path: str | None = Field(default=None, description="Directory added to sys.path before importing entrypoint.")
    env_config: dict[str, Any] | str | None = Field(
        default=None,
        validation_alias=AliasChoices("env_config", "config"),
        description="Keyword arguments for the env constructor, or a path to a YAML/JSON file of them.",
    )
    env_wrappers: list[WrapperEntry] | None = Field(
        default=None,
        validation_alias=AliasChoices("env_wrappers", "wrappers"),
        description="Wrappers applied to each env: 'module.Class' or ['module.Class', {kwargs}].",
    )
    normalize: NormalizeSpec | None = Field(
        default=None,
        description="Running mean/variance normalisation of observations (and rewards), saved with the agent "
        "(SB3's VecNormalize): true, or {obs, reward, clip_obs, clip_reward, epsilon, gamma}.",
    )
    sync: bool | None = Field(
        default=None,
        description="SyncVectorEnv (one process) if true, AsyncVectorEnv (a process per env) if false; "
        "unset: a process per env only while num_envs fits the machine's CPU cores, else one process.",
    )

    @field_validator("env_wrappers", mode="before")
    @classmethod
    def _wrapper_entries(cls, value: Any) -> Any:
        # YAML has no tuples: accept [path, kwargs] and {path: kwargs} as well.
        if not isinstance(value, list):
            return value
        out: list[Any] = []
        for item in value:
            if isinstance(item, dict) and len(item) == 1:
                (path, kwargs), *_ = item.items()
                out.append((path, dict(kwargs or {})))
            elif isinstance(item, list) and len(item) == 2:
                out.append((item[0], dict(item[1] or {})))
            else:
                out.append(item)
        return out

    @field_validator("normalize", mode="before")
    @classmethod
    def _normalize_flag(cls, value: Any) -> Any:
        # `normalize: true` turns on observation normalisation with SB3's defaults; false is off.
        if value is True:
            return {}
        if value is False:
            return None
        return value

    @field_validator("entrypoint", "factory")
    @classmethod
    def _import_path(cls, value: str | None) -> str | None:
        if value is not None and value.count(":") > 1:
            raise ValueError(f"{value!r} is not 'module:attribute' (or a registered gym id)")
        return value

    @property
    def use_sync(self) -> bool:
        """Whether the envs step in this process: ``sync``, or when unset, more envs than CPU cores."""
        if self.sync is not None:
            return self.sync
        return self.num_envs == 1 or self.num_envs > cpu_cores()

    @property
    def env_id(self) -> str:
        """The gymnasium id this spec names (``name`` plus ``-v<version>`` when given)."""
        name = self.name
        if self.version is None or re.search(r"-v\d+$", name):
            return name
        # `version: v1` and `version: 1` both mean "-v1" (highway-env's "merge-v0" style names)
        version = str(self.version)
        return f"{name}-v{version[1:] if version[:1] in 'vV' else version}"

    @property
    def label(self) -> str:
        return self.env_id
