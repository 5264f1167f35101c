"""A small PettingZoo parallel env whose agents' legal actions change every step, reporting them as
``source`` says (``obs``: PettingZoo's ``{"observation", "action_mask"}`` observations; ``info``:
``infos[agent]["action_mask"]``; ``none``: no masks): the IPPO action-masking tests' env."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

N_ACTIONS = 6
EPISODE = 20


class MaskedChoiceParallelEnv(ParallelEnv):  # type: ignore[misc]
    """Two agents; each step 1-3 of 6 actions are allowed for each (and shown in its observation):
    +1 for an allowed action (with ``best_first``: only for the first allowed one, 0 for the others),
    -1 for another; 20 steps an episode. ``source`` ``none``: no masks, so
    an unmasked agent must learn the rule from the observation."""

    metadata = {"name": "masked_choice_v0", "is_parallelizable": True}

    def __init__(self, source: str = "obs", best_first: bool = False, render_mode: str | None = None) -> None:
        self.source = source
        self.best_first = best_first
        self.render_mode = render_mode
        self.possible_agents = ["player_0", "player_1"]
        self.agents: list[str] = []
        box = spaces.Box(0.0, 1.0, (N_ACTIONS,), np.float32)
        obs_space: spaces.Space[Any] = (
            spaces.Dict({"observation": box, "action_mask": spaces.MultiBinary(N_ACTIONS)}) if source == "obs" else box
        )
        self.observation_spaces = dict.fromkeys(self.possible_agents, obs_space)
        self.action_spaces = {a: spaces.Discrete(N_ACTIONS) for a in self.possible_agents}
        self.masks: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng()
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self.action_spaces[agent]

    def _draw(self) -> tuple[dict[str, Any], dict[str, Any]]:
        obs: dict[str, Any] = {}
        infos: dict[str, Any] = {}
        for a in self.agents:
            mask = np.zeros(N_ACTIONS, dtype=np.int8)
            mask[self.rng.choice(N_ACTIONS, size=int(self.rng.integers(1, 4)), replace=False)] = 1
            self.masks[a] = mask
            seen = mask.astype(np.float32)
            obs[a] = {"observation": seen, "action_mask": mask} if self.source == "obs" else seen
            infos[a] = {"action_mask": mask.copy()} if self.source == "info" else {}
        return obs, infos

    def _reward(self, mask: np.ndarray, action: int) -> float:
        if not mask[action]:
            return -1.0
        return 1.0 if not self.best_first or action == int(np.argmax(mask)) else 0.0

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        return self._draw()

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        rewards = {a: self._reward(self.masks[a], int(actions[a])) for a in self.agents}
        self.t += 1
        done = self.t >= EPISODE
        terms = dict.fromkeys(self.agents, False)
        truncs = dict.fromkeys(self.agents, done)
        obs, infos = self._draw()
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos


def parallel_env(**kwargs: Any) -> MaskedChoiceParallelEnv:
    return MaskedChoiceParallelEnv(**kwargs)
