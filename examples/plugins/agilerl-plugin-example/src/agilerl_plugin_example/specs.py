"""Manifest sections this plugin adds: pydantic only, cheap to import."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from agilerl.models import AlgorithmSpec, EnvSpec, Mutable


class KArmedBanditSpec(EnvSpec):
    """A k-armed Bernoulli bandit: arm ``i`` pays 1 with probability ``probs[i]``."""

    env_type: Literal["karmed"] = "karmed"
    probs: list[Annotated[float, Field(ge=0, le=1)]] = Field(min_length=2)
    seed: int | None = None


class UCB1Spec(AlgorithmSpec):
    """UCB1: pull the arm with the highest mean + ``c * sqrt(ln t / n)``."""

    paradigm: ClassVar[str] = "multi_armed_bandit"
    regime: ClassVar[str] = "online"
    default_env_type: ClassVar[str] = "karmed"
    default_evo_steps: ClassVar[int] = 200
    default_mutable: ClassVar[tuple[str, ...]] = ("c",)
    supported_mutations: ClassVar[frozenset[str]] = frozenset({"no_mut", "rl_hp_mut"})

    c: Annotated[float, Field(ge=0, description="Exploration strength."), Mutable(0.05, 4.0)] = 1.4
