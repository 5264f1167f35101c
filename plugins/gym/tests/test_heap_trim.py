"""Every gym engine hands the C heap's free pages back while it trains (agilerl.training.heap): the
updates' freed tensors fragment glibc's heap and, untrimmed, a long generation's resident memory
creeps (benchmarks/README.md, "Peak RSS")."""

from __future__ import annotations

from pathlib import Path

import pytest
from gym_test_helpers import tiny_manifest

from agilerl.training import heap
from agilerl.training.trainer import LocalTrainer


@pytest.mark.parametrize("algo", ["PPO", "DQN", "IPPO", "MADDPG"])
def test_each_engine_trims_after_its_updates(algo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = heap.release_free_heap
    monkeypatch.setattr(heap, "release_free_heap", lambda: calls.append(1) or real())
    monkeypatch.setattr(heap, "TRIM_INTERVAL_S", 0.0)  # every update's tick trims
    manifest = tiny_manifest(algo, tmp_path)
    manifest["training"].update(pop_size=1, max_steps=512, evo_steps=512, checkpoint_steps=None)
    manifest.pop("tournament_selection"), manifest.pop("mutation")
    result = LocalTrainer.from_manifest(manifest, run_dir=str(tmp_path / "run")).train()
    assert result.population[0].steps >= 512
    # PPO / IPPO: one update per rollout of 64 env steps; DQN / MADDPG: one every 4 env steps after
    # the first 32 (training.learning_delay); the run's evaluation adds none.
    updates = 512 // 64 if algo in ("PPO", "IPPO") else (512 - 32) // 4
    assert updates <= len(calls) <= updates + 1, (len(calls), updates)
