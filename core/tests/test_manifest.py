"""The manifest contract: what validates, and the message for each way it can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agilerl.errors import ManifestError, ManifestFileError, ManifestSyntaxError
from agilerl.models import TrainingManifest, load_manifest, validate_manifest


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate_manifest(data)
    return [str(p) for p in info.value.problems]


def test_valid_manifest_builds_specs_through_the_registries(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    m = validate_manifest(ucb_manifest)
    assert isinstance(m, TrainingManifest)
    assert type(m.algorithm).__name__ == "UCB1Spec" and m.algorithm.name == "UCB1"
    assert type(m.environment).__name__ == "KArmedBanditSpec"
    assert m.algorithm.c == 1.0
    assert m.evo_steps == 100 and not m.hpo


def test_env_type_defaults_from_the_algorithm(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    del ucb_manifest["environment"]["env_type"]
    assert validate_manifest(ucb_manifest).environment.env_type == "karmed"


def test_null_means_default(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["algorithm"]["c"] = None
    ucb_manifest["training"]["evo_steps"] = None
    m = validate_manifest(ucb_manifest)
    assert m.algorithm.c == 1.4
    assert m.evo_steps == 200  # the spec's default_evo_steps (max_steps is larger)... capped by max_steps
    ucb_manifest["training"]["max_steps"] = 50
    assert validate_manifest(ucb_manifest).evo_steps == 50


def test_agilerl_aliases(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["selection_strategy"] = {"tournament_size": 3}
    ucb_manifest["replay_buffer"] = {"memory_size": 500}
    ucb_manifest["training"]["population_size"] = 3
    del ucb_manifest["training"]["pop_size"]
    ucb_manifest["api_version"] = ucb_manifest.pop("apiVersion")
    m = validate_manifest(ucb_manifest)
    assert m.tournament_selection is not None and m.tournament_selection.tournament_size == 3
    assert m.replay_buffer is not None and m.replay_buffer.max_size == 500
    assert m.training.pop_size == 3 and m.hpo


def test_round_trip(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    m = validate_manifest(ucb_manifest)
    again = validate_manifest(m.to_dict())
    assert again.to_dict() == m.to_dict()


def test_unknown_field_names_the_path_and_suggests(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["algorithm"]["cc"] = 2
    ucb_manifest["training"]["max_step"] = 10
    out = problems(ucb_manifest)
    assert "algorithm.cc: unknown field; did you mean 'c'?" in out
    assert "training.max_step: unknown field; did you mean 'max_steps'?" in out


def test_unknown_section(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["trainig"] = {}
    assert problems(ucb_manifest) == ["trainig: unknown section; did you mean 'training'?"]


def test_wrong_type_and_out_of_range(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["algorithm"]["c"] = "lots"
    ucb_manifest["training"]["pop_size"] = 0
    out = problems(ucb_manifest)
    assert any(p.startswith("algorithm.c: Input should be a valid number") and "'lots'" in p for p in out), out
    assert any(p.startswith("training.pop_size: Input should be greater than or equal to 1") for p in out), out


def test_missing_required_field(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    del ucb_manifest["environment"]["probs"]
    assert problems(ucb_manifest) == ["environment.probs: required field missing"]


def test_missing_sections() -> None:
    out = problems({})
    assert any(p.startswith("algorithm: required section missing") for p in out)
    assert any(p.startswith("environment: required section missing") for p in out)


def test_unknown_algorithm_lists_and_suggests(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["algorithm"]["name"] = "UCB"
    (msg,) = problems(ucb_manifest)[:1]
    assert msg.startswith("algorithm.name: unknown algorithm 'UCB'. Did you mean 'UCB1'?")
    assert "UCB1" in msg.split("Registered algorithms:")[1]


def test_unknown_algorithm_known_to_core_names_the_plugin(
    monkeypatch: pytest.MonkeyPatch, ucb_manifest: dict[str, Any]
) -> None:
    from agilerl import plugins

    monkeypatch.setenv("AGILERL_LOAD_PLUGINS", "")  # no plugins at all
    plugins.reset()
    try:
        ucb_manifest["algorithm"] = {"name": "PPO"}
        out = problems(ucb_manifest)
        assert "pip install agilerl-plugin-gym" in out[0]
    finally:
        monkeypatch.delenv("AGILERL_LOAD_PLUGINS")
        plugins.reset()


def test_unknown_env_type(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["environment"]["env_type"] = "karmd"
    out = problems(ucb_manifest)
    assert out[0].startswith("environment.env_type: unknown env_type 'karmd'. Did you mean 'karmed'?")


def test_rl_hp_selection_must_name_numeric_fields(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["mutation"] = {"rl_hp_selection": {"cc": {"min": 0.1, "max": 2}}}
    out = problems(ucb_manifest)
    assert out == ["mutation.rl_hp_selection.cc: 'cc' is not a numeric hyperparameter of UCB1; did you mean 'c'?"]


def test_unsupported_mutation_operator_is_refused(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["mutation"] = {"probabilities": {"arch_mut": 0.3, "params_mut": 0, "rl_hp_mut": 0.2}}
    out = problems(ucb_manifest)
    assert out == [
        "mutation.probabilities: UCB1 does not support architecture mutation (arch_mut) yet; set arch_mut: 0"
    ]


def test_mf_pbt_needs_a_population_that_splits(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["selection_strategy"] = {"strategy": "multi_frequency"}
    ucb_manifest.setdefault("training", {})["pop_size"] = 4
    assert problems(ucb_manifest) == [
        "selection_strategy: training.pop_size (4) must split into 2 sub-populations of at least 3 agents "
        "(a multiple of n_subpopulations, >= 6)"
    ]


def test_wrong_api_version(example_plugin: Any, ucb_manifest: dict[str, Any]) -> None:
    ucb_manifest["apiVersion"] = "v2"
    assert problems(ucb_manifest) == ["apiVersion: must be 'agilerl.com/v1', got 'v2'"]


def test_malformed_yaml_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("algorithm:\n  name: PPO\n  lr: [1, 2\nenvironment: {}\n")
    with pytest.raises(ManifestSyntaxError) as info:
        load_manifest(path)
    assert str(info.value).startswith(f"{path}:4:")
    assert "invalid YAML" in str(info.value)


def test_manifest_path_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(ManifestFileError, match="manifest not found"):
        load_manifest(tmp_path / "nope.yaml")


def test_json_manifests_load(example_plugin: Any, ucb_manifest: dict[str, Any], tmp_path: Path) -> None:
    import json

    path = tmp_path / "m.json"
    path.write_text(json.dumps(ucb_manifest))
    assert load_manifest(path).algorithm.name == "UCB1"


def test_yaml_is_loaded_safely(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text("algorithm: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ManifestSyntaxError):
        load_manifest(path)
