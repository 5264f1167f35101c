"""Small goal-conditioned envs for hindsight experience replay (HER), as Stable-Baselines3's tests use.

:class:`BitFlippingEnv`: the state is ``n_bits`` bits, the goal another ``n_bits``; an action flips
one bit (a Box action flips every bit whose component is positive). The reward is 0 when the
state equals the goal and -1 otherwise; the episode ends on success or after ``max_steps``
(default ``n_bits``) steps. A random policy almost never reaches a random goal of 8 or more bits,
so learning from the env's own rewards stalls, while HER's relabelled goals teach it quickly.

Use it from a manifest as a custom env::

    environment:
      name: BitFlipping
      custom: true
      entrypoint: agilerl_plugin_gym.goal_envs:BitFlippingEnv
      env_config: {n_bits: 8}
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["BitFlippingEnv", "is_goal_conditioned"]

#: The observation keys of a goal-conditioned env (gymnasium-robotics' ``GoalEnv``).
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


def is_goal_conditioned(env: Any) -> str | None:
    """Why ``env`` is not a goal-conditioned env HER can relabel (None: it is one): a Dict
    observation with ``observation``/``achieved_goal``/``desired_goal`` and a ``compute_reward``."""
    space = env.observation_space
    if not isinstance(space, spaces.Dict) or not set(GOAL_KEYS) <= set(space.spaces):
        return (
            f"HER needs a goal-conditioned env: a Dict observation with keys {', '.join(GOAL_KEYS)}; "
            f"this env's observation space is {space}"
        )
    try:
        compute = env.get_wrapper_attr("compute_reward")
    except AttributeError:
        compute = None
    if not callable(compute):
        return (
            "HER needs a goal-conditioned env with compute_reward(achieved_goal, desired_goal, info); this env has none"
        )
    return None


class BitFlippingEnv(gym.Env[dict[str, np.ndarray], Any]):
    """Flip bits until the state equals the goal (see the module docstring).

    :param n_bits: bits in the state and the goal.
    :param continuous: a Box action in [-1, 1]^n (every bit whose component is > 0 flips) instead
        of Discrete(n) (DDPG/TD3 can then learn it).
    :param max_steps: steps before the episode is truncated (default ``n_bits``).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n_bits: int = 8, continuous: bool = False, max_steps: int | None = None) -> None:
        self.n_bits = int(n_bits)
        self.continuous = bool(continuous)
        self.max_steps = int(max_steps or n_bits)
        bits = spaces.Box(0.0, 1.0, (self.n_bits,), np.float32)
        goal_space = spaces.Dict({"observation": bits, "achieved_goal": bits, "desired_goal": bits})
        self.observation_space = goal_space  # type: ignore[assignment]
        self.action_space: spaces.Space[Any] = (
            spaces.Box(-1.0, 1.0, (self.n_bits,), np.float32) if self.continuous else spaces.Discrete(self.n_bits)
        )
        self.state = np.zeros(self.n_bits, np.float32)
        self.goal = np.zeros(self.n_bits, np.float32)
        self.steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": self.state.copy(), "achieved_goal": self.state.copy(), "desired_goal": self.goal.copy()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self.goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        while np.array_equal(self.state, self.goal):  # never solved before the first step
            self.goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self.steps = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.continuous:
            flip = np.asarray(action).reshape(self.n_bits) > 0
            self.state[flip] = 1.0 - self.state[flip]
        else:
            i = int(action)
            self.state[i] = 1.0 - self.state[i]
        self.steps += 1
        reward = float(self.compute_reward(self.state, self.goal, {}))
        success = reward == 0.0
        return self._obs(), reward, success, self.steps >= self.max_steps and not success, {"is_success": success}

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> Any:
        """0 where the achieved goal equals the desired one, else -1 (batched over a leading axis)."""
        distance = np.abs(np.asarray(achieved_goal) - np.asarray(desired_goal)).sum(axis=-1)
        return -(distance > 0).astype(np.float32)
