"""A multi-agent replay buffer: one row per env step, with every agent's transition in it.

Centralised critics need all agents' observations and actions of the *same* step, so the agents'
transitions are stored side by side in one row (``obs/<agent>``, ``action/<agent>``, ...) of the
shared :class:`agilerl_plugin_gym.buffers.ReplayBuffer` (preallocated numpy ring, tensor sampling,
checkpoint-safe state).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agilerl_plugin_gym.buffers import ReplayBuffer

FIELDS = ("obs", "action", "reward", "next_obs", "done")


class MultiAgentReplayBuffer:
    """Ring buffer of joint transitions.

    :param max_size: capacity in joint transitions (``replay_buffer.max_size``).
    :param agent_ids: the agents, in a fixed order.
    :param device: device of sampled tensors.
    :param seed: sampling RNG seed.
    """

    def __init__(
        self, max_size: int, agent_ids: Sequence[str], *, device: str | torch.device = "cpu", seed: int | None = None
    ) -> None:
        self.agent_ids = list(agent_ids)
        self.buffer = ReplayBuffer(max_size, device=device, seed=seed)

    def __len__(self) -> int:
        return len(self.buffer)

    @property
    def max_size(self) -> int:
        return self.buffer.max_size

    def add(
        self,
        obs: Mapping[str, np.ndarray],
        action: Mapping[str, np.ndarray],
        reward: Mapping[str, np.ndarray],
        next_obs: Mapping[str, np.ndarray],
        done: Mapping[str, np.ndarray],
        mask: np.ndarray | None = None,
    ) -> int:
        """Store one row per env; each argument maps agent id -> array with a leading env axis."""
        fields: dict[str, Any] = {}
        for name, values in zip(FIELDS, (obs, action, reward, next_obs, done), strict=True):
            for agent in self.agent_ids:
                fields[f"{name}/{agent}"] = np.asarray(values[agent], dtype=np.float32)
        return self.buffer.add(mask=mask, **fields)

    def sample(self, batch_size: int) -> dict[str, dict[str, torch.Tensor]]:
        """``{field: {agent: tensor (batch, ...)}}``."""
        flat = self.buffer.sample(batch_size)
        out: dict[str, dict[str, torch.Tensor]] = {name: {} for name in FIELDS}
        for key, value in flat.items():
            name, _, agent = key.partition("/")
            out[name][agent] = value
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"agent_ids": list(self.agent_ids), "buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.agent_ids = list(state["agent_ids"])
        self.buffer.load_state_dict(state["buffer"])


__all__ = ["MultiAgentReplayBuffer"]
