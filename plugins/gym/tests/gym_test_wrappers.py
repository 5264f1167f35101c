"""Wrappers the tests load by import path through ``environment.env_wrappers`` (real wrappers)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class InterruptAfter(gym.Wrapper):  # type: ignore[type-arg]
    """Raise KeyboardInterrupt (what Ctrl-C raises) after ``steps`` steps of this env."""

    def __init__(self, env: gym.Env[Any, Any], steps: int) -> None:
        super().__init__(env)
        self.left = int(steps)

    def step(self, action: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise KeyboardInterrupt
        return self.env.step(action)


class ScaleReward(gym.RewardWrapper):  # type: ignore[type-arg]
    """Multiply rewards by ``factor`` (to see wrapper kwargs arrive)."""

    def __init__(self, env: gym.Env[Any, Any], factor: float = 1.0) -> None:
        super().__init__(env)
        self.factor = factor

    def reward(self, reward: Any) -> Any:
        return reward * self.factor
