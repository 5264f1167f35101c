"""A small text game for training against OpenEnv: say the target word.

Each turn the env asks for a word. A reply scores half for how much of it is made of the target's
letters and half for how much of it is covered by whole copies of the target: for ``yes``,
``"yes yes"`` scores 0.5·6/7 + 0.5·6/7 ≈ 0.86, ``"yesyes"`` 1.0, ``"sees"`` 0.5, ``"no"`` 0. The letter
half gives a tiny random model (whose tokenizer may split ``yes`` into ``y`` + ``es``) a gradient
to follow long before it says the whole word by chance. An episode is ``turns`` turns long; its
return is the sum of the turn scores.

Serve it as an OpenEnv server and train against it::

    agilerl serve-env examples/openenv/word_game.py:SayWordGame --port 8000
    agilerl train examples/openenv/grpo_word_game.yaml
"""

from __future__ import annotations

import random
from typing import Any


class SayWordGame:
    """Text env (``reset``/``step``): the policy must answer with the target word.

    :param targets: words to ask for; ``reset(seed)`` picks one (seeded), so episodes vary.
    :param turns: turns per episode (>= 1).
    """

    system_prompt = "Answer with the word you are asked for."

    def __init__(self, targets: list[str] | tuple[str, ...] = ("one",), turns: int = 1) -> None:
        if not targets or turns < 1:
            raise ValueError("SayWordGame needs at least one target and turns >= 1")
        self.targets = [str(t) for t in targets]
        self.max_turns = int(turns)
        self._rng = random.Random(0)
        self.target = self.targets[0]
        self.turn = 0

    def _ask(self) -> str:
        return f"Say {self.target}." if self.turn == 0 else f"Again: say {self.target}."

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if seed is not None:
            self._rng = random.Random(seed)
        self.target = self._rng.choice(self.targets)
        self.turn = 0
        return self._ask(), {"target": self.target}

    def score(self, reply: str) -> float:
        text = reply.strip()
        if not text:
            return 0.0
        letters = set(self.target)
        in_letters = sum(ch in letters for ch in text) / len(text)
        coverage = min(1.0, text.count(self.target) * len(self.target) / len(text))
        return 0.5 * in_letters + 0.5 * coverage

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        reward = self.score(action)
        self.turn += 1
        done = self.turn >= self.max_turns
        return ("" if done else self._ask()), reward, done, False, {"target": self.target}
