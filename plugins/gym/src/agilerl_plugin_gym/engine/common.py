"""What both engines' loops share: per-learn-call env seeds, training-episode statistics, lazily
computed step statistics and the per-sub-env helpers of the multi-agent loops."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

__all__ = ["EpisodeReturns", "LazyStats", "env_rows", "episode_scores", "episode_seed"]


def episode_seed(run_seed: int | None, agent_index: int, agent_steps: int) -> int | None:
    """The seed of the env reset that starts a ``learn`` call.

    Agents of a population share the training env, so each ``learn`` call starts fresh episodes;
    the seed depends only on checkpointed state (run seed, agent index, agent step count), so a run
    resumed from a checkpoint resets the env exactly as the uninterrupted run did.
    """
    if run_seed is None:
        return None
    return (run_seed * 1_000_003 + agent_index * 7_919 + agent_steps) % (2**31 - 1)


class EpisodeReturns:
    """Returns of training episodes that finish during one ``learn`` call (for the metrics row).

    :param n: parallel sub-envs.
    :param key: metrics name of the mean return (``train_return``; multi-agent: ``train_score``).
    """

    def __init__(self, n: int, key: str = "train_return") -> None:
        self.key = key
        self.running = np.zeros(n)
        self.finished: list[float] = []

    def step(self, reward: np.ndarray, done: np.ndarray, valid: np.ndarray | None = None) -> None:
        """Add one vector step's rewards (masked by ``valid``); bank the sub-envs that are ``done``."""
        self.running += reward if valid is None else reward * valid
        if done.any():
            self.finished.extend(self.running[done].tolist())
            self.running[done] = 0.0

    def row(self) -> dict[str, float]:
        if not self.finished:
            return {}
        return {self.key: float(np.mean(self.finished)), "train_episodes": float(len(self.finished))}


class LazyStats(Mapping[str, Any]):
    """A gradient step's statistics, computed when first read.

    The off-policy engine keeps only the last step's statistics of a ``learn`` call (the metrics
    row), so the ones of every other step are never read: a learner that returns this saves their
    kernels (DQN: the loss value and the mean Q, a few µs of a ~0.5 ms step).
    """

    __slots__ = ("_compute", "_values")

    def __init__(self, compute: Callable[[], Mapping[str, Any]]) -> None:
        self._compute: Callable[[], Mapping[str, Any]] | None = compute
        self._values: Mapping[str, Any] | None = None

    def _get(self) -> Mapping[str, Any]:
        if self._values is None:
            assert self._compute is not None
            self._values, self._compute = self._compute(), None
        return self._values

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def episode_scores(agent: Any, rewards: dict[str, np.ndarray]) -> np.ndarray:
    """Per-copy score of one multi-agent vector step's rewards (sum or mean over agents: ``sum_scores``)."""
    return agent.episode_score(np.stack([rewards[a] for a in agent.agent_ids], axis=1))  # type: ignore[no-any-return]


def env_rows(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``mask`` (num_envs,) broadcastable against ``like`` (num_envs, ...)."""
    return mask.reshape((-1,) + (1,) * (like.ndim - 1))
