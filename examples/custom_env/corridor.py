"""A tiny custom gymnasium env, trained from a manifest with ``entrypoint: corridor:Corridor``.

The agent starts in the middle of a corridor of ``length`` cells and must walk to the right end.
Each step costs 0.01; reaching the end pays 1. The left end is a wall. Observations are the
position scaled to [0, 1] plus a one-hot of the cell, so a small MLP learns it in seconds.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class Corridor(gym.Env[np.ndarray, int]):
    metadata = {"render_modes": []}

    def __init__(self, length: int = 8, max_steps: int = 40) -> None:
        self.length = int(length)
        self.max_steps = int(max_steps)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.length + 1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)  # 0: left, 1: right
        self.pos = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length + 1, dtype=np.float32)
        obs[0] = self.pos / (self.length - 1)
        obs[1 + self.pos] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos = int(self.np_random.integers(0, self.length // 2))
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.pos = max(0, self.pos + (1 if int(action) == 1 else -1))
        self.t += 1
        terminated = self.pos >= self.length - 1
        reward = 1.0 if terminated else -0.01
        truncated = not terminated and self.t >= self.max_steps
        return self._obs(), reward, terminated, truncated, {}
