"""The masked env of ``bench_learning.py``'s masked-PPO cell: legal actions change every step and
the best legal action follows a rule the policy has to learn.

Each step 2-5 of 8 actions are legal (the observation is the mask, as floats); the env reports the
mask through an ``action_masks()`` method, which both our PPO (``action_masking: true``) and
sb3-contrib's ``MaskablePPO`` read. Reward: +1 for the lowest-numbered legal action, +0.1 for
another legal one, -1 for an illegal one (a masked agent never takes one); 50 steps an episode.
A masked uniform policy scores about 19; the rule scores 50.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

N_ACTIONS = 8
EPISODE = 50


class MaskedPickEnv(gym.Env[np.ndarray, np.int64]):
    """Pick the lowest-numbered legal action; the legal set is redrawn every step."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (N_ACTIONS,), np.float32)
        self.action_space = gym.spaces.Discrete(N_ACTIONS)
        self.mask = np.ones(N_ACTIONS, dtype=bool)
        self.t = 0

    def _draw(self) -> np.ndarray:
        self.mask = np.zeros(N_ACTIONS, dtype=bool)
        k = int(self.np_random.integers(2, 6))
        self.mask[self.np_random.choice(N_ACTIONS, size=k, replace=False)] = True
        return self.mask.astype(np.float32)

    def action_masks(self) -> np.ndarray:
        return self.mask.copy()

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = int(action)
        reward = (1.0 if a == int(np.flatnonzero(self.mask)[0]) else 0.1) if self.mask[a] else -1.0
        self.t += 1
        return self._draw(), reward, False, self.t >= EPISODE, {}
