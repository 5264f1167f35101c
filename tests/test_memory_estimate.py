"""The validation-time memory estimate: core counts the envs, each plugin its own parts.

Core's floors (``agilerl.checks.FLOORS``) are paradigm-agnostic (an env, an env worker process);
the gym plugin adds its agents, the steps one update stores and the replay buffer
(``agilerl_plugin_gym.spec_base.MEMORY_FLOORS``), the bandit plugin its preallocated replay memory.
The sums are the ones core made before the RL floors moved to the gym plugin.
"""

from __future__ import annotations

from typing import Any

import pytest

from agilerl.checks import FLOORS, resource_problems
from agilerl.models import load_manifest
from agilerl_plugin_bandit.specs import MEMORY_PAIR_FLOOR
from agilerl_plugin_gym.spec_base import MEMORY_FLOORS

AGENT, STEP = MEMORY_FLOORS["agent"], MEMORY_FLOORS["transition"]


def _estimate(data: dict[str, Any]) -> tuple[int, str]:
    """The estimate's total (the least memory the manifest is accepted with) and the field it names."""
    manifest = load_manifest(data)
    lo, hi = 0, 1 << 50
    while lo < hi:  # the smallest available memory with no problem
        mid = (lo + hi) // 2
        if resource_problems(manifest, available=mid):
            lo = mid + 1
        else:
            hi = mid
    (problem,) = resource_problems(manifest, available=lo - 1)
    return lo, problem.path


def test_core_keeps_only_paradigm_agnostic_floors() -> None:
    assert set(FLOORS) == {"env", "env_process"}


def test_on_policy_counts_agents_envs_and_the_stored_rollout() -> None:
    total, field = _estimate({
        "algorithm": {"name": "PPO", "learn_step": 100_000},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
        "training": {"pop_size": 3},
    })  # fmt: skip
    assert total == 3 * AGENT + 2 * FLOORS["env"] + 100_000 * STEP == 3 * (64 << 10) + 2 * (4 << 10) + 1_600_000
    assert field == "algorithm.learn_step"


def test_off_policy_counts_the_replay_buffer() -> None:
    total, field = _estimate({
        "algorithm": {"name": "DQN"},
        "environment": {"name": "CartPole-v1", "num_envs": 1},
        "replay_buffer": {"max_size": 1_000_000},
        "training": {"pop_size": 2},
    })  # fmt: skip
    assert total == 2 * AGENT + FLOORS["env"] + 1_000_000 * STEP
    assert field == "replay_buffer.max_size"


def test_env_worker_processes_are_cores() -> None:
    total, field = _estimate({
        "algorithm": {"name": "PPO"},
        "environment": {"name": "CartPole-v1", "num_envs": 64, "sync": False},
    })  # fmt: skip
    ppo_learn_step = load_manifest({"algorithm": "PPO", "environment": {"name": "CartPole-v1"}}).algorithm.learn_step
    assert total == AGENT + 64 * FLOORS["env_process"] + ppo_learn_step * STEP
    assert field == "environment.num_envs"


@pytest.mark.parametrize("buffer", [None, 50_000_000])
def test_bandit_counts_each_members_replay_memory(buffer: int | None) -> None:
    data: dict[str, Any] = {"algorithm": {"name": "NeuralUCB"}, "environment": {"name": "iris"},
                            "training": {"pop_size": 4}}  # fmt: skip
    if buffer is not None:
        data["replay_buffer"] = {"max_size": buffer}
    total, field = _estimate(data)
    assert total == FLOORS["env"] + 4 * (buffer or 10_000) * MEMORY_PAIR_FLOOR
    assert field == ("replay_buffer.max_size" if buffer else "training.pop_size")
