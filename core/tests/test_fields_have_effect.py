"""Every accepted field has its effect, or validation refuses it by name (core's sections)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agilerl import LocalTrainer
from agilerl.errors import ManifestError
from agilerl.models import validate_manifest


def _one_problem(manifest: dict[str, Any]) -> str:
    with pytest.raises(ManifestError) as info:
        validate_manifest(manifest)
    assert len(info.value.problems) == 1, info.value
    return str(info.value.problems[0])


def test_max_wall_seconds_stops_the_run_between_generations(
    example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path
) -> None:
    unlimited = LocalTrainer.from_manifest(ucb_manifest, run_dir=tmp_path / "a").train()
    assert unlimited.stopped_by == "max_steps" and unlimited.generations >= 4
    # Any positive limit is past once the first generation has run: deterministic, not timing-based.
    ucb_manifest["training"].update(max_wall_seconds=1e-9, checkpoint_steps=10_000,
                                    checkpoint_path=str(tmp_path / "ck"))  # fmt: skip
    limited = LocalTrainer.from_manifest(ucb_manifest, run_dir=tmp_path / "b").train()
    assert limited.stopped_by == "max_wall_seconds"
    assert limited.generations == 1 and limited.population[0].steps == 100
    assert limited.checkpoint_path is not None and limited.checkpoint_path.exists()  # resumable


@pytest.mark.parametrize(
    ("section", "fields", "needle"),
    [
        ("training", {"checkpoint_optimizer": False}, "checkpoints always hold the optimizer states"),
        ("training", {"reporting_interval": 10}, "metrics are written once per generation"),
        ("mutation", {"dormant_threshold": 0.1}, "does not detect dormant neurons"),
        ("mutation", {"network": {"min_latent_dim": 8}}, "give mutation ranges in the network section"),
        ("replay_buffer", {"standard_buffer": False}, "every replay buffer here is a standard one"),
    ],
)
def test_fields_with_no_effect_here_are_refused_by_name(
    example_plugin: Any, ucb_manifest: dict[str, Any], section: str, fields: dict[str, Any], needle: str
) -> None:
    ucb_manifest[section] = {**ucb_manifest.get(section, {}), **fields}
    problem = _one_problem(ucb_manifest)
    assert problem.startswith(f"{section}.{next(iter(fields))}:") and needle in problem


@pytest.mark.parametrize(
    "fields",
    [{"learning_delay": 10}, {"eps_start": 0.5}, {"episode_steps": 50}, {"evaluation_interval": 3},
     {"num_epochs": 2}, {"sum_scores": False}, {"rollout_mode": "async"}],
)  # fmt: skip
def test_training_fields_an_algorithm_does_not_read_are_refused(
    example_plugin: Any, ucb_manifest: dict[str, Any], fields: dict[str, Any]
) -> None:
    ucb_manifest["training"].update(fields)
    key = next(iter(fields))
    assert _one_problem(ucb_manifest) == f"training.{key}: not used by UCB1 (not supported yet); remove it"


def test_training_fields_at_their_default_are_fine(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["training"].update(learning_delay=None, rollout_mode="colocated", checkpoint_optimizer=True)
    assert validate_manifest(ucb_manifest).training.rollout_mode == "colocated"


def test_training_hpo_must_agree_with_the_evolution_sections(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["training"]["hpo"] = True
    assert _one_problem(ucb_manifest).startswith("training.hpo: true needs a mutation or tournament_selection")
    ucb_manifest["tournament_selection"] = {"tournament_size": 2}
    assert validate_manifest(ucb_manifest).hpo
    ucb_manifest["training"]["hpo"] = False
    assert _one_problem(ucb_manifest).startswith("training.hpo: false, but a mutation or tournament_selection")


@pytest.mark.parametrize(
    ("section", "fields", "needle"),
    [
        ("training", {"weight_sync_backend": "nccl"}, "training.weight_sync_backend: not used by UCB1"),
        ("training", {"eval_greedy": False}, "training.eval_greedy: not used by UCB1"),
        ("training", {"async_rollout": True}, "async_rollout was retired by AgileRL; write rollout_mode: async"),
        (
            "replay_buffer",
            {"group_replay_max_age": 2},
            "replay_buffer.group_replay_max_age: not supported yet (AgileRL's group-replay buffer)",
        ),
        ("replay_buffer", {"kind": "llm"}, "replay buffer kind 'llm' is not supported yet"),
        ("network", {"has_evolvable_encoder": True}, "network.has_evolvable_encoder: not supported yet"),
        ("network", {"has_evolvable_encoder": False}, "network.has_evolvable_encoder: not supported yet"),
    ],
)
def test_agilerl_fields_we_lack_are_named_never_unknown(
    example_plugin: Any, ucb_manifest: dict[str, Any], section: str, fields: dict[str, Any], needle: str
) -> None:
    ucb_manifest[section] = {**ucb_manifest.get(section, {}), **fields}
    problem = _one_problem(ucb_manifest)
    assert needle in problem and "unknown field" not in problem
