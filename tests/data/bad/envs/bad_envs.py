"""Custom envs that break the gymnasium / PettingZoo API in one way each (for tests/data/bad)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class _Base(gym.Env[np.ndarray, int]):
    def __init__(self, **_: Any) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def _obs(self) -> Any:
        return np.zeros(3, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> Any:
        self.t += 1
        return self._obs(), 1.0, self.t >= 5, False, {}


class WrongShape(_Base):
    """Declares (3,), returns (4,)."""

    def _obs(self) -> Any:
        return np.zeros(4, dtype=np.float32)


class WrongDtype(_Base):
    def _obs(self) -> Any:
        return np.zeros(3, dtype=np.float64)


class OutOfBounds(_Base):
    def _obs(self) -> Any:
        return np.full(3, 5.0, dtype=np.float32)


class NaNObservation(_Base):
    def step(self, action: int) -> Any:
        return np.full(3, np.nan, dtype=np.float32), 0.0, False, False, {}


class ResetWithoutInfo(_Base):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self._obs()


class OldStepApi(_Base):
    def step(self, action: int) -> Any:
        return self._obs(), 1.0, False, {}


class RewardIsAString(_Base):
    def step(self, action: int) -> Any:
        return self._obs(), "1.0", False, False, {}


class RaisesOnStep(_Base):
    def step(self, action: int) -> Any:
        raise ValueError("step is broken")


class NoSpaces(gym.Env[Any, Any]):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return np.zeros(3, dtype=np.float32), {}


class MissingAgentObservation:
    """A PettingZoo-style parallel env whose reset leaves out one agent's observation."""

    metadata: dict[str, Any] = {"name": "missing_obs_v0"}
    possible_agents = ["a_0", "b_0"]

    def __init__(self, **_: Any) -> None:
        self.agents = list(self.possible_agents)
        self._obs = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self._act = spaces.Discrete(2)

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._obs

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self._act

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.agents = list(self.possible_agents)
        return {"a_0": np.zeros(2, dtype=np.float32)}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        obs = {a: np.zeros(2, dtype=np.float32) for a in self.agents}
        zero = {a: 0.0 for a in self.agents}
        false = {a: False for a in self.agents}
        return obs, zero, false, false, {a: {} for a in self.agents}

    def close(self) -> None:
        pass


def missing_agent_observation(**kwargs: Any) -> MissingAgentObservation:
    return MissingAgentObservation(**kwargs)
