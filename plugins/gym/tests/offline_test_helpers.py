"""Recording offline datasets in tests: episodes from a policy, written as AgileRL HDF5 and as Minari."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

Episode = dict[str, np.ndarray]


def record_episodes(
    policy: Callable[[np.ndarray], int] | None, min_steps: int, *, eps: float = 0.0, seed: int = 0
) -> list[Episode]:
    """Whole CartPole-v1 episodes until ``min_steps`` steps: ``policy`` (None: uniform random) acting
    epsilon-greedily. Each episode holds ``observations`` (steps + 1 rows), ``actions``, ``rewards``,
    ``terminations``, ``truncations``."""
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    episodes: list[Episode] = []
    total = 0
    while total < min_steps:
        obs, _ = env.reset(seed=seed * 100_003 + len(episodes))
        rows: dict[str, list[Any]] = {"observations": [obs], "actions": [], "rewards": [], "terminations": [],
                                      "truncations": []}  # fmt: skip
        done = False
        while not done:
            explore = policy is None or rng.random() < eps
            action = int(rng.integers(2)) if explore else int(policy(obs))  # type: ignore[misc]
            obs, reward, terminated, truncated, _ = env.step(action)
            for key, value in (("observations", obs), ("actions", action), ("rewards", reward),
                               ("terminations", terminated), ("truncations", truncated)):  # fmt: skip
                rows[key].append(value)
            done = terminated or truncated
        episodes.append({k: np.asarray(v) for k, v in rows.items()})
        total += len(rows["rewards"])
    env.close()
    return episodes


def mean_return(episodes: list[Episode]) -> float:
    return float(np.mean([e["rewards"].sum() for e in episodes]))


def write_hdf5(path: Path, episodes: list[Episode], *, next_observations: bool = False) -> Path:
    """AgileRL's offline HDF5 format: observations, actions, rewards, terminals, one row per step."""
    import h5py

    with h5py.File(path, "w") as f:
        f["observations"] = np.concatenate([e["observations"][:-1] for e in episodes]).astype(np.float32)
        f["actions"] = np.concatenate([e["actions"] for e in episodes])
        f["rewards"] = np.concatenate([e["rewards"] for e in episodes]).astype(np.float32)
        f["terminals"] = np.concatenate([e["terminations"] for e in episodes])
        if next_observations:
            f["next_observations"] = np.concatenate([e["observations"][1:] for e in episodes]).astype(np.float32)
    return path


def write_minari(dataset_id: str, episodes: list[Episode], env_id: str = "CartPole-v1") -> None:
    """A local Minari dataset (under ``MINARI_DATASETS_PATH``) holding these episodes."""
    import warnings

    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    buffers = [
        EpisodeBuffer(
            id=i,
            observations=e["observations"],
            actions=e["actions"],
            rewards=list(e["rewards"]),
            terminations=list(e["terminations"]),
            truncations=list(e["truncations"]),
        )
        for i, e in enumerate(episodes)
    ]
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "eval_env is set to None": the recording env is the one
        minari.create_dataset_from_buffers(
            dataset_id, buffers, env=env, algorithm_name="test", ref_min_score=0.0, ref_max_score=500.0
        )
    env.close()
