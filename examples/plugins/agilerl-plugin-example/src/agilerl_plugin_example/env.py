"""The k-armed bandit environment."""

from __future__ import annotations

import random

from agilerl_plugin_example.specs import KArmedBanditSpec


class KArmedBandit:
    def __init__(self, probs: list[float], seed: int | None = None) -> None:
        self.probs = list(probs)
        self.rng = random.Random(seed)

    @property
    def arms(self) -> int:
        return len(self.probs)

    def pull(self, arm: int) -> float:
        return 1.0 if self.rng.random() < self.probs[arm] else 0.0


def make_karmed_env(spec: KArmedBanditSpec, *, seed: int | None = None) -> KArmedBandit:
    return KArmedBandit(spec.probs, seed=spec.seed if spec.seed is not None else seed)
