"""A small env whose legal actions change every step, reporting them as the manifest's
``env_config.source`` says (``info``, ``method``, ``obs`` or none): the action-masking tests' env."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

N_ACTIONS = 6


class MaskedChoiceEnv(gym.Env[Any, np.int64]):
    """Each step 1-3 of 6 actions are allowed (and shown in the observation): +1 for an allowed
    action, -1 for another; 20 steps an episode. ``source`` says how the env reports the mask
    (``None``: it does not, so an unmasked agent must learn the rule from the observation)."""

    def __init__(self, source: str | None = "info") -> None:
        self.source = source
        box = gym.spaces.Box(0.0, 1.0, (N_ACTIONS,), np.float32)
        self.observation_space = (
            gym.spaces.Dict({"obs": box, "action_mask": gym.spaces.MultiBinary(N_ACTIONS)}) if source == "obs" else box
        )
        self.action_space = gym.spaces.Discrete(N_ACTIONS)
        self.mask = np.ones(N_ACTIONS, dtype=bool)
        self.t = 0

    def _draw(self) -> tuple[Any, dict[str, Any]]:
        self.mask = np.zeros(N_ACTIONS, dtype=bool)
        self.mask[self.np_random.choice(N_ACTIONS, size=int(self.np_random.integers(1, 4)), replace=False)] = True
        obs = self.mask.astype(np.float32)
        if self.source == "obs":
            return {"obs": obs, "action_mask": self.mask.astype(np.int8)}, {}
        return obs, ({"action_mask": self.mask.copy()} if self.source == "info" else {})

    def action_masks(self) -> np.ndarray:
        if self.source != "method":
            raise AttributeError("action_masks")
        return self.mask.copy()

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._draw()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        reward = 1.0 if self.mask[int(action)] else -1.0
        self.t += 1
        obs, info = self._draw()
        return obs, reward, False, self.t >= 20, info
