"""A population resumed mid-evolution carries on: indices, hyperparameters, fitness histories,
mutation labels and the generation count come back from the checkpoint, and evolution continues
from them (on the example plugin's UCB1, registered in-process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agilerl import LocalTrainer, checkpoint
from agilerl.hpo.selection import TournamentSelection


def evolving(manifest: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    manifest["training"].update(pop_size=4, max_steps=400, checkpoint_steps=100, checkpoint_path=str(tmp_path / "ck"))
    manifest["mutation"] = {
        "probabilities": {"no_mut": 0.2, "rl_hp_mut": 0.8},
        "rl_hp_selection": {"c": {"min": 0.1, "max": 3.0, "grow_factor": 1.5, "shrink_factor": 0.6}},
        "rand_seed": 7,
    }
    manifest["tournament_selection"] = {"tournament_size": 2, "elitism": True}
    return manifest


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_checkpoint_holds_the_whole_population(
    example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path
) -> None:
    LocalTrainer.from_manifest(evolving(ucb_manifest, tmp_path), run_dir=tmp_path / "run").train()
    saved = checkpoint.load(tmp_path / "ck_200.pt")
    assert saved["generation"] == 1 and saved["phase"] == "evaluated"
    assert len(saved["agents"]) == 4
    for agent in saved["agents"]:
        assert set(agent) >= {"index", "fitness", "steps", "mut", "hyperparameters", "counts", "values"}
        assert len(agent["fitness"]) == 2 and agent["steps"] == 200
    assert len({a["index"] for a in saved["agents"]}) == 4
    assert max(a["index"] for a in saved["agents"]) > 3  # generation 1 holds offspring of generation 0
    assert {"selection", "mutation"} <= set(saved["rng"])  # the evolution's random streams


def test_resume_mid_evolution_continues_from_the_saved_population(
    example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = evolving(ucb_manifest, tmp_path)
    full = LocalTrainer.from_manifest(manifest, run_dir=tmp_path / "full").train()
    saved = checkpoint.load(tmp_path / "ck_200.pt")

    # Record what the resumed run's first selection sees: the population rebuilt from the file.
    seen: list[list[tuple[int, float, list[float], int, str | None]]] = []
    select = TournamentSelection.select

    def spy(self: TournamentSelection, population: list[Any]) -> Any:
        seen.append([(a.index, a.spec.c, list(a.fitness), a.steps, a.mut) for a in population])
        return select(self, population)

    monkeypatch.setattr(TournamentSelection, "select", spy)
    manifest["training"]["checkpoint_path"] = str(tmp_path / "ck2")
    resumed = LocalTrainer.from_manifest(manifest, resume_from=tmp_path / "ck_200.pt", run_dir=tmp_path / "b").train()

    expected = [(a["index"], a["hyperparameters"]["c"], a["fitness"], a["steps"], a["mut"]) for a in saved["agents"]]
    assert seen[0] == expected
    # The log continues at the next generation; offspring get indices beyond every saved one.
    logged = rows(tmp_path / "b")
    assert sorted({r["generation"] for r in logged}) == [2, 3]
    assert min(r["agent"] for r in logged if r["parent"] != r["agent"]) > max(a["index"] for a in saved["agents"])
    assert {r["parent"] for r in logged if r["generation"] == 2} <= {a["index"] for a in saved["agents"]}
    # Every agent's fitness history extends the history of the saved agent it descends from.
    histories = [a["fitness"] for a in saved["agents"]]
    for agent in resumed.population:
        assert agent.steps == 400 and len(agent.fitness) == 4
        assert agent.fitness[:2] in histories
        assert 0.1 <= agent.spec.c <= 3.0
    # Same checkpoint, same seeds: the first resumed generation evolves exactly as the full run did
    # (selection and mutation streams restored); later generations also depend on the env's draws.
    full_rows = [r for r in rows(tmp_path / "full") if r["generation"] == 2]
    key = ("agent", "parent", "mutation", "hp/c")
    assert [tuple(r[k] for k in key) for r in logged if r["generation"] == 2] == [
        tuple(r[k] for k in key) for r in full_rows
    ]
    assert len(full.population) == len(resumed.population) == 4


def test_the_returned_population_is_the_last_evaluated_one_best_first_and_the_elite_is_saved(
    example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path
) -> None:
    result = LocalTrainer.from_manifest(evolving(ucb_manifest, tmp_path), run_dir=tmp_path / "run").train()
    last = [r for r in rows(tmp_path / "run") if r["generation"] == result.generations - 1]
    # exactly the agents evaluated last (not offspring made after that evaluation), with those scores
    assert sorted((a.index, a.fitness[-1]) for a in result.population) == sorted(
        (r["agent"], r["fitness"]) for r in last
    )
    assert result.fitnesses == sorted(result.fitnesses, reverse=True)
    assert all(a.steps == 400 and len(a.fitness) == result.generations for a in result.population)
    elite = checkpoint.load(result.elite_path)["agents"]
    assert len(elite) == 1 and elite[0]["index"] == result.best.index
    assert elite[0]["fitness"] == result.best.fitness
