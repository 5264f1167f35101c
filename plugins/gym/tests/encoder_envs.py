"""Small envs whose observations need the CNN and multi-input encoders (used by the encoder tests).

* :class:`PixelChase` — a 3 x 8 uint8 image: channel 0 lights the agent's column, channel 1 the
  target's (both random at reset). Actions: 0 left, 1 right. Reward -0.1 per step, +1 and the end
  of the episode on reaching the target; 12 steps at most. The agent must read both positions
  from the pixels: a policy that ignores them (always left, always right) averages about -0.3,
  uniform random about -0.7, the optimum about +0.75. ``channels_first=True`` renders C x H x W.
* :class:`DictReach` — ``Dict(pos=Box(2), goal=Box(2))`` (optionally a ``Tuple`` of the two), a
  continuous 2-D velocity action in [-1, 1]^2 moving the agent by 0.2 x action; reward
  ``-|goal - pos|`` (L2) per step, 20 steps. Staying put scores about -16 on average, random
  actions about -17, heading to the goal about -4.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

WIDTH, HEIGHT = 8, 3


class PixelChase(gym.Env):  # type: ignore[type-arg]
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, channels_first: bool = False, continuous: bool = False, max_steps: int = 12) -> None:
        self.channels_first = channels_first
        self.continuous = continuous
        self.max_steps = max_steps
        shape = (2, HEIGHT, WIDTH) if channels_first else (HEIGHT, WIDTH, 2)
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.action_space = (
            spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else spaces.Discrete(2)  # type: ignore[assignment]
        )
        self.pos = self.target = self.t = 0

    def _obs(self) -> np.ndarray:
        img = np.zeros((HEIGHT, WIDTH, 2), np.uint8)
        img[:, self.pos, 0] = 255
        img[:, self.target, 1] = 255
        return np.ascontiguousarray(img.transpose(2, 0, 1)) if self.channels_first else img

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos, self.target = (int(x) for x in self.np_random.choice(WIDTH, size=2, replace=False))
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        right = float(np.asarray(action).reshape(-1)[0]) > 0 if self.continuous else int(action) == 1
        self.pos = int(np.clip(self.pos + (1 if right else -1), 0, WIDTH - 1))
        self.t += 1
        reached = self.pos == self.target
        reward = 1.0 if reached else -0.1
        return self._obs(), reward, reached, self.t >= self.max_steps, {}


class DictReach(gym.Env):  # type: ignore[type-arg]
    metadata: dict[str, Any] = {"render_modes": []}

    #: ``discrete``: four actions (right, left, up, down) instead of a 2-D move.
    MOVES = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], np.float32)

    def __init__(self, as_tuple: bool = False, max_steps: int = 20, discrete: bool = False) -> None:
        self.as_tuple = as_tuple
        self.max_steps = max_steps
        self.discrete = discrete
        box = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = (
            spaces.Tuple((box, box)) if as_tuple else spaces.Dict({"pos": box, "goal": box})  # type: ignore[assignment]
        )
        self.action_space = (
            spaces.Discrete(4) if discrete else spaces.Box(-1.0, 1.0, (2,), np.float32)  # type: ignore[assignment]
        )
        self.pos = np.zeros(2, np.float32)
        self.goal = np.zeros(2, np.float32)
        self.t = 0

    def _obs(self) -> Any:
        pos, goal = self.pos.copy(), self.goal.copy()
        return (pos, goal) if self.as_tuple else {"pos": pos, "goal": goal}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.goal = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        raw = self.MOVES[int(action)] if self.discrete else np.asarray(action, np.float32)
        move = np.clip(raw, -1.0, 1.0) * 0.2
        self.pos = np.clip(self.pos + move, -1.0, 1.0).astype(np.float32)
        self.t += 1
        reward = -float(np.linalg.norm(self.goal - self.pos))
        return self._obs(), reward, False, self.t >= self.max_steps, {}
