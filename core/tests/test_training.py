"""The core's training path end to end, on the example plugin's UCB1 (registered in-process)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agilerl import LocalTrainer, checkpoint
from agilerl.errors import AgileRLError, TrainingInterrupted


def test_trains_and_finds_the_best_arm(example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path) -> None:
    result = LocalTrainer.from_manifest(ucb_manifest, run_dir=tmp_path).train()
    population, fitnesses = result
    assert population[0].best_arm() == 3 and fitnesses == [0.85]
    assert population[0].steps == 400 and result.generations == 4
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["steps"] for r in rows] == [100, 200, 300, 400]
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0].startswith("generation,agent,steps,fitness")
    assert result.elite_path is not None and checkpoint.load(result.elite_path)["agents"][0]["steps"] == 400


def test_target_score_stops_early(example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path) -> None:
    ucb_manifest["training"]["target_score"] = 0.8
    result = LocalTrainer.from_manifest(ucb_manifest, run_dir=tmp_path).train()
    assert result.stopped_by == "target_score" and result.population[0].steps < 400


def test_population_with_evolution(example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path) -> None:
    ucb_manifest["training"].update(pop_size=4, max_steps=300)
    ucb_manifest["mutation"] = {
        "probabilities": {"no_mut": 0.2, "rl_hp_mut": 0.8},
        "rl_hp_selection": {"c": {"min": 0.1, "max": 3.0}},
        "rand_seed": 1,
    }
    ucb_manifest["tournament_selection"] = {"tournament_size": 2, "elitism": True}
    result = LocalTrainer.from_manifest(ucb_manifest, run_dir=tmp_path).train()
    assert len(result.population) == 4
    assert max(a.index for a in result.population) > 3  # offspring got fresh indices
    assert result.fitnesses == sorted(result.fitnesses, reverse=True)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {r["mutation"] for r in rows} >= {"c"}
    assert all(0.1 <= r["hp/c"] <= 3.0 for r in rows if r["generation"] > 0)


def test_checkpoint_and_resume_continue_the_same_run(
    example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt" / "ucb"
    ucb_manifest["training"].update(max_steps=200, checkpoint_steps=100, checkpoint_path=str(ckpt))
    first = LocalTrainer.from_manifest(ucb_manifest, run_dir=tmp_path / "a").train()
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["ucb_100.pt", "ucb_200.pt"]
    # resume from the file with a larger budget: the counts carry on
    ucb_manifest["training"]["max_steps"] = 400
    trainer = LocalTrainer.from_manifest(ucb_manifest, resume_from=ckpt.parent / "ucb_200.pt", run_dir=tmp_path / "b")
    resumed = trainer.train()
    agent = resumed.population[0]
    assert agent.steps == 400 and sum(agent.counts) == 400
    assert agent.fitness[:2] == first.population[0].fitness  # history kept
    # the stored manifest alone is enough to resume
    again = LocalTrainer.from_checkpoint(ckpt.parent / "ucb_200.pt", run_dir=tmp_path / "c").train()
    assert again.population[0].steps == 200  # stored max_steps was 200: already done, evaluated again


def test_ctrl_c_writes_a_checkpoint_first_and_the_run_resumes(
    example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path
) -> None:
    trainer = LocalTrainer.from_manifest(ucb_manifest, run_dir=tmp_path)
    learn = trainer.strategy.learn
    calls = {"n": 0}

    def interrupted_learn(agent: Any, run: Any, num_steps: int) -> dict[str, float]:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return learn(agent, run, num_steps)

    trainer.strategy.learn = interrupted_learn  # type: ignore[method-assign]
    with pytest.raises(TrainingInterrupted, match="agilerl train --resume") as info:
        trainer.train()
    assert info.value.exit_code == 130
    path = tmp_path / "checkpoint_interrupted.pt"
    saved = checkpoint.load(path)
    assert saved["agents"][0]["steps"] == 200
    resumed = LocalTrainer.from_manifest(ucb_manifest, resume_from=path, run_dir=tmp_path / "r").train()
    assert resumed.population[0].steps == 400


def test_same_seed_same_result(example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path) -> None:
    ucb_manifest["environment"].pop("seed")
    a = LocalTrainer.from_manifest(ucb_manifest, run_dir=tmp_path / "a").train().population[0]
    b = LocalTrainer.from_manifest(ucb_manifest, run_dir=tmp_path / "b").train().population[0]
    assert a.counts == b.counts and a.values == b.values


def test_checkpoint_writes_are_atomic(tmp_path: Path) -> None:
    target = tmp_path / "c.pt"
    checkpoint.save(target, {"format": checkpoint.FORMAT, "x": 1})

    def broken(fh: Any) -> None:
        fh.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError):
        checkpoint.atomic_write(target, broken)
    assert checkpoint.load(target)["x"] == 1  # the old file is intact
    assert os.listdir(tmp_path) == ["c.pt"]  # no temp file left behind


def test_loading_something_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    bad = tmp_path / "x.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(AgileRLError, match="cannot read checkpoint"):
        checkpoint.load(bad)
    with pytest.raises(AgileRLError, match="no checkpoint at"):
        checkpoint.load(tmp_path / "missing.pt")
