"""Partially observable variants of gymnasium envs, for recurrent policies (``environment.env_wrappers``).

* :class:`MaskObservation` keeps only some entries of a Box observation vector;
* :class:`MaskVelocity` is CartPole with its two velocities hidden (cart position and pole angle
  remain): a policy must infer motion from the history, which a feedforward policy cannot.

In a manifest::

    environment:
      name: CartPole-v1
      env_wrappers: [agilerl_plugin_gym.pomdp.MaskVelocity]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["MaskObservation", "MaskVelocity"]


class MaskObservation(gym.ObservationWrapper):  # type: ignore[type-arg]
    """Observe only the entries ``keep`` of a 1-D Box observation."""

    def __init__(self, env: gym.Env[Any, Any], keep: Sequence[int]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise TypeError(f"MaskObservation needs a 1-D Box observation space, not {space}")
        self.keep = np.asarray(list(keep), dtype=np.int64)
        self.observation_space = spaces.Box(space.low[self.keep], space.high[self.keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


class MaskVelocity(MaskObservation):
    """CartPole with the cart and pole velocities hidden (observes position and angle only)."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env, keep=(0, 2))
