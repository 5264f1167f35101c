"""A two-turn text env: the user asks for a number twice; each reply is scored.

Any class with ``reset(seed) -> (text, info)`` and ``step(text) -> (text, reward, terminated,
truncated, info)`` is a text env; point ``environment.entrypoint`` at it (``file.py:Class`` or
``module:Class``). ``env_config`` becomes keyword arguments.
"""

from __future__ import annotations

import random
from typing import Any


class TwoTurnEnv:
    """Turn 1: "Say the number." Turn 2: "Again, please." Reward per turn: fraction of words == target."""

    system_prompt = "You answer with one word."
    max_turns = 2

    def __init__(self, target: str = "eight", turns: int = 2) -> None:
        self.target = target
        self.turns = turns
        self.turn = 0
        self.rng = random.Random(0)

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if seed is not None:
            self.rng.seed(seed)
        self.turn = 0
        return self.rng.choice(["Say the number.", "What is the number?", "Tell me the number."]), {}

    def _score(self, reply: str) -> float:
        words = reply.replace(".", " ").split()
        return sum(w.lower() == self.target for w in words) / len(words) if words else 0.0

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        reward = self._score(action)
        done = self.turn >= self.turns
        return ("" if done else "Again, please."), reward, done, False, {"turn": self.turn}
