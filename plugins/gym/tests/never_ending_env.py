"""An env whose episodes never end (no termination, no step limit): evaluation must still stop."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv


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


class NeverEndingParallelEnv(ParallelEnv):  # type: ignore[misc]
    """The same for PettingZoo: two agents that never terminate, no ``max_cycles``."""

    metadata = {"name": "never_ending_parallel_v0"}
    possible_agents = ["agent_0", "agent_1"]

    def __init__(self) -> None:
        self.agents: list[str] = []
        self.rng = np.random.default_rng(0)

    def observation_space(self, agent: str) -> gym.spaces.Box:
        return gym.spaces.Box(-1.0, 1.0, (3,), np.float32)

    def action_space(self, agent: str) -> gym.spaces.Discrete:
        return gym.spaces.Discrete(2)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        return {a: np.zeros(3, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        obs = {a: self.rng.uniform(-1, 1, 3).astype(np.float32) for a in self.agents}
        rewards = {a: float(actions[a]) for a in self.agents}
        never = dict.fromkeys(self.agents, False)
        return obs, rewards, never, dict(never), {a: {} for a in self.agents}

    def close(self) -> None:
        pass
