"""An env whose episodes never end (no termination, no step limit): evaluation must still stop."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class NeverEndingEnv(gym.Env[np.ndarray, int]):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), float(action), False, False, {}
