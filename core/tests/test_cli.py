"""The agilerl CLI: exit codes, JSON output, one-screen errors (never a bare traceback)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def manifest_file(example_plugin: Any, ucb_manifest: dict[str, Any], write_manifest: Callable[..., Path]) -> Path:
    return write_manifest(ucb_manifest)


def test_validate_valid(run_cli: Run, manifest_file: Path) -> None:
    code, out, _ = run_cli("validate", manifest_file)
    assert code == 0
    assert "valid" in out and "UCB1 (multi_armed_bandit/online, from example-inprocess)" in out


def test_validate_json(run_cli: Run, manifest_file: Path) -> None:
    code, out, _ = run_cli("validate", manifest_file, "--json")
    assert code == 0 and json.loads(out)["valid"] is True


def test_validate_invalid_lists_every_problem(
    run_cli: Run, example_plugin: Any, ucb_manifest: dict[str, Any], write_manifest: Callable[..., Path]
) -> None:
    ucb_manifest["algorithm"]["cc"] = 1
    ucb_manifest["training"]["pop_size"] = -1
    path = write_manifest(ucb_manifest)
    code, out, err = run_cli("validate", path)
    assert code == 1 and "Traceback" not in err
    assert "2 problems" in err and "algorithm.cc: unknown field; did you mean 'c'?" in err
    code, out, _ = run_cli("validate", path, "--json")
    verdict = json.loads(out)
    assert code == 1 and verdict["valid"] is False
    assert {p["path"] for p in verdict["problems"]} == {"algorithm.cc", "training.pop_size"}


def test_validate_could_not_run(run_cli: Run, tmp_path: Path) -> None:
    code, _, err = run_cli("validate", tmp_path / "missing.yaml")
    assert code == 2 and "manifest not found" in err and "Traceback" not in err


def test_malformed_yaml_is_invalid(run_cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("algorithm: {name: UCB1\n")
    code, _, err = run_cli("validate", path)
    assert code == 1 and f"{path}:2:1: invalid YAML" in err


def test_set_overrides(run_cli: Run, manifest_file: Path) -> None:
    code, out, _ = run_cli("validate", manifest_file, "--set", "training.max_steps=123", "--json")
    assert code == 0 and json.loads(out)["manifest"]["training"]["max_steps"] == 123


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("algorithm=UCB2", "--set algorithm: would replace the whole algorithm mapping (c, name) with 'UCB2'; "
                           "set the field you mean, e.g. --set algorithm.name=UCB2"),
        ("environment.env_type.x=1", "--set environment.env_type: environment.env_type is 'karmed' in the manifest, "
                                     "not a mapping"),
    ],
)  # fmt: skip
def test_a_set_that_would_replace_more_than_it_names_is_refused(
    run_cli: Run, manifest_file: Path, override: str, said: str
) -> None:
    for command in ("validate", "train"):
        code, _, err = run_cli(command, manifest_file, "--set", override)
        assert code == 1 and said in err and "Traceback" not in err, err
    # what it names, it sets; null removes
    code, out, _ = run_cli("validate", manifest_file, "--set", "algorithm.c=0.5", "--set", "mutation=null", "--json")
    assert code == 0 and json.loads(out)["manifest"]["algorithm"]["c"] == 0.5


def test_train_and_plot(run_cli: Run, manifest_file: Path, tmp_path: Path) -> None:
    code, out, err = run_cli("train", manifest_file, "--run-dir", tmp_path / "run", "--no-progress")
    assert code == 0, err
    assert "best agent 0 fitness 0.85" in out
    code, out, _ = run_cli("plot", tmp_path / "run")
    png = tmp_path / "run" / "learning_curve.png"
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_resume_from_checkpoint_alone(run_cli: Run, manifest_file: Path, tmp_path: Path) -> None:
    code, _, err = run_cli(
        "train", manifest_file, "--run-dir", tmp_path / "a", "--no-progress",
        "--set", "training.checkpoint_steps=100", "--set", f"training.checkpoint_path={tmp_path / 'ck'}",
        "--set", "training.max_steps=200",
    )  # fmt: skip
    assert code == 0, err
    code, _out, err = run_cli("train", "--resume", tmp_path / "ck_200.pt", "--run-dir", tmp_path / "b", "--no-progress")
    assert code == 0, err


def test_plot_without_metrics(run_cli: Run, tmp_path: Path) -> None:
    code, _, err = run_cli("plot", tmp_path)
    assert code == 1 and "no metrics.jsonl" in err


def test_schema_lists_registered_algorithms_and_envs(run_cli: Run, example_plugin: Any, tmp_path: Path) -> None:
    code, out, _ = run_cli("schema")
    schema = json.loads(out)
    algos = {v["title"] for v in schema["properties"]["algorithm"]["oneOf"]}
    assert "UCB1" in algos
    ucb = next(v for v in schema["properties"]["algorithm"]["oneOf"] if v["title"] == "UCB1")
    assert ucb["x-hpo-ranges"] == {"c": [0.05, 4.0]} and ucb["additionalProperties"] is False
    assert any("karmed" in v["title"] for v in schema["properties"]["environment"]["oneOf"])
    code, out, _ = run_cli("schema", "-o", tmp_path / "s.json")
    assert code == 0 and json.loads((tmp_path / "s.json").read_text()) == schema


def test_schema_validates_a_manifest_in_an_editor(
    run_cli: Run, example_plugin: Any, ucb_manifest: dict[str, Any]
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    _, out, _ = run_cli("schema")
    schema = json.loads(out)
    jsonschema.validate(ucb_manifest, schema)
    ucb_manifest["algorithm"]["typo"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(ucb_manifest, schema)


def test_listing_commands(run_cli: Run, example_plugin: Any) -> None:
    code, out, _ = run_cli("plugins", "--json")
    assert code == 0 and "example-inprocess" in {p["name"] for p in json.loads(out)}
    code, out, _ = run_cli("algorithms", "--json")
    assert {"name": "UCB1", "provider": "example-inprocess"}.items() <= next(
        r for r in json.loads(out) if r["name"] == "UCB1"
    ).items()
    code, out, _ = run_cli("envs")
    assert code == 0 and "karmed" in out


def test_plugin_commands(register_plugin: Callable[..., str], run_cli: Run) -> None:
    from agilerl import hookimpl

    class Cmd:
        @hookimpl
        def agilerl_register_commands(self, subparsers: Any) -> None:
            p = subparsers.add_parser("hello", help="say hello")
            p.add_argument("--name", default="world")
            p.set_defaults(handler=lambda args: print(f"hello {args.name}") or 0)

    register_plugin(Cmd(), name="cmd")
    code, out, _ = run_cli("hello", "--name", "agilerl")
    assert code == 0 and out.strip() == "hello agilerl"


def test_no_command_prints_help(run_cli: Run) -> None:
    code, out, _ = run_cli()
    assert code == 2 and "usage: agilerl" in out
