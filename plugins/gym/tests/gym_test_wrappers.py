"""Wrappers the tests load by import path through ``environment.env_wrappers`` (real wrappers)."""

from __future__ import annotations

import os
import signal
from typing import Any

import gymnasium as gym
import numpy as np


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


class SigintAfter(gym.Wrapper):  # type: ignore[type-arg]
    """Send this process a real SIGINT (what Ctrl-C sends) once, after ``steps`` steps of one env.

    The signal goes out once per process however many sub-envs carry the wrapper.
    """

    sent = False

    def __init__(self, env: gym.Env[Any, Any], steps: int) -> None:
        super().__init__(env)
        self.left = int(steps)

    def step(self, action: Any) -> Any:
        self.left = _sigint_when_spent(self.left)
        return self.env.step(action)


def _sigint_when_spent(left: int) -> int:
    """Count one step down; once past zero, SIGINT this process (once per process)."""
    if left - 1 < 0 and not SigintAfter.sent:
        SigintAfter.sent = True
        os.kill(os.getpid(), signal.SIGINT)
    return left - 1


class SigintAfterParallel:
    """:class:`SigintAfter` for a PettingZoo parallel env (delegates everything else to it)."""

    def __init__(self, env: Any, steps: int) -> None:
        self.env = env
        self.left = int(steps)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, actions: Any) -> Any:
        self.left = _sigint_when_spent(self.left)
        return self.env.step(actions)


class DiscretizeActions(gym.ActionWrapper):  # type: ignore[type-arg]
    """A 1-D Box action space as ``bins`` evenly spaced Discrete actions (DQN on Pendulum)."""

    def __init__(self, env: gym.Env[Any, Any], bins: int = 5) -> None:
        super().__init__(env)
        box = env.action_space
        assert isinstance(box, gym.spaces.Box)
        self.values = np.linspace(box.low, box.high, bins, dtype=np.float32)
        self.action_space = gym.spaces.Discrete(bins)

    def action(self, action: Any) -> Any:
        return self.values[int(action)]


class ScaleReward(gym.RewardWrapper):  # type: ignore[type-arg]
    """Multiply rewards by ``factor`` (to see wrapper kwargs arrive)."""

    def __init__(self, env: gym.Env[Any, Any], factor: float = 1.0) -> None:
        super().__init__(env)
        self.factor = factor

    def reward(self, reward: Any) -> Any:
        return reward * self.factor


class ReachTarget(gym.Env):  # type: ignore[type-arg]
    """One-step continuous control: observe a target in [-1, 1], act it; reward -(action - target)^2."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.target = np.zeros(1, np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.target = self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return self.target.copy(), {}

    def step(self, action: Any) -> Any:
        reward = -float((np.asarray(action, np.float32)[0] - self.target[0]) ** 2)
        return self.target.copy(), reward, True, False, {}


class PickPair(gym.Env):  # type: ignore[type-arg]
    """One-step MultiDiscrete control: observe two digits (one-hot), name both; 1 point each."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (6,), np.float32)
        self.action_space = gym.spaces.MultiDiscrete([3, 3])
        self.digits = np.zeros(2, np.int64)

    def _obs(self) -> Any:
        obs = np.zeros(6, np.float32)
        obs[self.digits[0]] = 1.0
        obs[3 + self.digits[1]] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.digits = self.np_random.integers(0, 3, 2)
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        reward = float((np.asarray(action) == self.digits).sum())
        return self._obs(), reward, True, False, {}
