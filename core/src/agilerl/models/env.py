"""Environment construction: :func:`make_env` dispatches on ``spec.env_type`` to the factory a plugin
registered. The seed API's named factories (``make_gym_env``, ``make_pz_env``, ...) stay importable
from here: they live in :mod:`agilerl.compat` and resolve through the registry; a missing plugin
gives an "install X" error."""

from __future__ import annotations

from typing import Any

from agilerl.compat import (
    make_bandit_env,
    make_gym_env,
    make_llm_env,
    make_pz_env,
    make_rollout_env_factory,
    make_single_env,
)
from agilerl.imports import accepted_kwargs
from agilerl.models.base import EnvSpec
from agilerl.registry import ENV_TYPES


def make_env(spec: EnvSpec, **kwargs: Any) -> Any:
    """Build the live environment described by ``spec``.

    Keyword arguments (``seed``, and whatever the plugin's factory documents) are passed to the
    factory when it accepts them; ``None`` values are dropped.
    """
    factory = ENV_TYPES.factory(spec.env_type)
    given = {k: v for k, v in kwargs.items() if v is not None}
    return factory(spec, **accepted_kwargs(factory, given))


__all__ = [
    "make_bandit_env",
    "make_env",
    "make_gym_env",
    "make_llm_env",
    "make_pz_env",
    "make_rollout_env_factory",
    "make_single_env",
]
