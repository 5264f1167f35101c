"""Hindsight experience replay (HER), as Stable-Baselines3's ``HerReplayBuffer``.

For goal-conditioned envs (a Dict observation with ``observation``, ``achieved_goal`` and
``desired_goal``, and ``compute_reward(achieved_goal, desired_goal, info)``; see
:mod:`agilerl_plugin_gym.goal_envs`). The manifest turns it on in its ``replay_buffer`` section
(``her: true``, ``her_args: {n_sampled_goal, goal_selection_strategy}``); any single-agent
off-policy algorithm of the off-policy engine (DQN, DDPG, TD3, SAC, TQC, and those added to it) then learns
from relabelled goals, because the relabelling happens where batches are drawn.

* **Storing.** The engine hands each vector step to :meth:`HerReplayBuffer.add_step`. A sub-env's
  transitions wait until its episode ends (or the ``learn`` call ends: :meth:`close_episodes`),
  then the episode is written to the ring in one piece, each row knowing its episode (``ep_id``),
  its step in it (``ep_t``) and the episode's length (``ep_len``). Only finished episodes are
  sampled, as in SB3.
* **Sampling.** A fraction ``1 - 1 / (n_sampled_goal + 1)`` of each batch is relabelled: its desired
  goal (in ``obs`` and ``next_obs``) becomes the achieved goal after another step of the same
  episode — ``future``: this step or a later one, ``final``: the last step, ``episode``: any step —
  and its reward is recomputed with the env's ``compute_reward``. The done flag stays the
  transition's own (SB3's choice). A row whose chosen goal step has been overwritten in the ring
  keeps its own goal.

The sampling RNG and the episode counter are checkpointed with the buffer, so a resumed run draws
the same batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agilerl.errors import AgileRLError
from agilerl_plugin_gym.buffers import ReplayBuffer
from agilerl_plugin_gym.envs import make_single_env
from agilerl_plugin_gym.goal_envs import is_goal_conditioned
from agilerl_plugin_gym.observations import SEP

__all__ = ["GOAL_STRATEGIES", "HerReplayBuffer", "HerSettings", "goal_reward_function"]

GOAL_STRATEGIES = ("future", "final", "episode")
_META = ("ep_id", "ep_t", "ep_len")


@dataclass(frozen=True)
class HerSettings:
    """``replay_buffer.her_args``: goals relabelled per real one and how they are chosen."""

    n_sampled_goal: int = 4
    goal_selection_strategy: str = "future"

    @property
    def her_ratio(self) -> float:
        """The fraction of each batch that is relabelled."""
        return 1.0 - 1.0 / (self.n_sampled_goal + 1)

    @classmethod
    def from_manifest(cls, manifest: Any) -> HerSettings | None:
        """The settings when the manifest's ``replay_buffer.her`` is on, else None."""
        rb = manifest.replay_buffer
        if rb is None or not getattr(rb, "her", False):
            return None
        args = rb.her_args
        return cls(int(args.n_sampled_goal), str(args.goal_selection_strategy))


def goal_reward_function(env_spec: Any) -> Callable[[Any, Any, Any], Any]:
    """The ``compute_reward`` of one env made from ``env_spec`` (kept open for the run: HER calls
    it for every relabelled batch, as SB3 calls it through its vector env)."""
    env = make_single_env(env_spec)
    problem = is_goal_conditioned(env)
    if problem is not None:
        env.close()
        raise AgileRLError(f"replay_buffer.her: {problem}")
    compute: Callable[[Any, Any, Any], Any] = env.get_wrapper_attr("compute_reward")
    return compute


class HerReplayBuffer(ReplayBuffer):
    """A replay buffer that stores whole episodes and relabels goals when sampling (module docstring).

    :param compute_reward: the env's ``compute_reward(achieved_goal, desired_goal, info)``, batched.
    :param settings: the goal strategy and ``n_sampled_goal``.
    Other arguments as :class:`~agilerl_plugin_gym.buffers.ReplayBuffer`.
    """

    def __init__(
        self,
        max_size: int,
        *,
        compute_reward: Callable[[Any, Any, Any], Any],
        settings: HerSettings,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        dtypes: Mapping[str, Any] | None = None,
    ) -> None:
        if settings.goal_selection_strategy not in GOAL_STRATEGIES:
            raise ValueError(f"goal_selection_strategy must be one of {GOAL_STRATEGIES}")
        super().__init__(max_size, device=device, seed=seed, dtypes=dtypes)
        self.compute_reward = compute_reward
        self.settings = settings
        #: Episodes written so far (the next one's ``ep_id``).
        self.episodes = 0
        #: Per sub-env, the transitions of its episode in progress.
        self.open: list[list[dict[str, Any]]] = []

    # --- storing -------------------------------------------------------------------------------------
    def add_step(
        self,
        *,
        obs: Mapping[str, np.ndarray],
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: Mapping[str, np.ndarray],
        terminated: np.ndarray,
        truncated: np.ndarray,
        keep: np.ndarray,
    ) -> None:
        """One vector step: the transitions of the sub-envs in ``keep``; an ended episode is stored."""
        n = len(keep)
        if len(self.open) != n:
            self.open = [[] for _ in range(n)]
        action = np.asarray(action)
        for e in np.flatnonzero(keep):
            self.open[e].append({
                "obs": {k: np.asarray(v[e]) for k, v in obs.items()},
                "action": action[e],
                "reward": reward[e],
                "next_obs": {k: np.asarray(v[e]) for k, v in next_obs.items()},
                "done": terminated[e],
            })  # fmt: skip
            if terminated[e] or truncated[e]:
                self._store_episode(int(e))

    def close_episodes(self) -> None:
        """End every episode in progress (the ``learn`` call is over: the next one resets the env)."""
        for e in range(len(self.open)):
            if self.open[e]:
                self._store_episode(e)

    def _store_episode(self, e: int) -> None:
        rows, self.open[e] = self.open[e], []
        length = len(rows)
        fields: dict[str, Any] = {
            "obs": {k: np.stack([r["obs"][k] for r in rows]) for k in rows[0]["obs"]},
            "action": np.stack([r["action"] for r in rows]),
            "reward": np.asarray([r["reward"] for r in rows]),
            "next_obs": {k: np.stack([r["next_obs"][k] for r in rows]) for k in rows[0]["next_obs"]},
            "done": np.asarray([r["done"] for r in rows]),
            "ep_id": np.full(length, self.episodes, np.int64),
            "ep_t": np.arange(length, dtype=np.int64),
            "ep_len": np.full(length, length, np.int64),
        }
        self.episodes += 1
        self.add(**fields)

    # --- sampling ------------------------------------------------------------------------------------
    def sample(self, batch_size: int) -> dict[str, Any]:
        """``batch_size`` transitions drawn uniformly, the first ``her_ratio`` of them relabelled."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = self.rng.integers(0, self.size, size=batch_size)
        arrays = {k: v[idx] for k, v in self.data.items()}  # copies (fancy indexing)
        n_her = int(batch_size * self.settings.her_ratio)
        if n_her:
            self._relabel(idx[:n_her], arrays)
        batch = {k: torch.from_numpy(v).to(self.device, non_blocking=True) for k, v in arrays.items() if k not in _META}
        return self._grouped(batch)

    def sample_many(self, batch_size: int, n: int) -> list[dict[str, Any]]:
        return [self.sample(batch_size) for _ in range(n)]

    def _relabel(self, rows: np.ndarray, arrays: dict[str, np.ndarray]) -> None:
        data = self.data
        t, length = data["ep_t"][rows], data["ep_len"][rows]
        strategy = self.settings.goal_selection_strategy
        if strategy == "final":
            offset = length - 1 - t
        elif strategy == "future":
            offset = self.rng.integers(0, length - t)  # this step or a later one
        else:  # episode
            offset = self.rng.integers(0, length) - t
        goal_rows = (rows + offset) % self.max_size
        same = data["ep_id"][goal_rows] == data["ep_id"][rows]  # not overwritten since
        which = np.flatnonzero(same)
        goals = data[f"next_obs{SEP}achieved_goal"][goal_rows[which]]
        arrays[f"obs{SEP}desired_goal"][which] = goals
        arrays[f"next_obs{SEP}desired_goal"][which] = goals
        achieved = arrays[f"next_obs{SEP}achieved_goal"][which]
        reward = np.asarray(self.compute_reward(achieved, goals, [{} for _ in range(len(which))]))
        arrays["reward"][which] = reward.reshape(arrays["reward"][which].shape)

    # --- checkpoints ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if any(self.open):  # the engine closes episodes at the end of each learn call
            raise RuntimeError("HerReplayBuffer: checkpoint with episodes in progress (call close_episodes first)")
        return {**super().state_dict(), "episodes": self.episodes}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.episodes = int(state.get("episodes", 0))
        self.open = []
