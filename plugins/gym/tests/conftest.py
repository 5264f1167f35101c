"""Fixtures for the gym plugin's tests: train a manifest through the real ``agilerl train`` CLI."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[3]
# Helper modules beside the tests (gym_test_helpers, gym_test_wrappers) import by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gym_test_helpers import EnvsMade  # noqa: E402

EXAMPLES = REPO / "examples"


def load_example(name: str) -> dict[str, Any]:
    """An example manifest as a dict (tests shrink budgets or change fields, then write it)."""
    return yaml.safe_load((EXAMPLES / name).read_text())


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The rows the core wrote to ``run_dir/metrics.jsonl``."""
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture
def train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, Path, str]]:
    """``train(manifest_dict, *extra_cli_args, name=...)`` -> (exit code, run dir, stdout+stderr)."""
    from agilerl.cli import main

    def _train(manifest: dict[str, Any], *args: str, name: str = "run") -> tuple[int, Path, str]:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(manifest, sort_keys=False))
        run_dir = tmp_path / name
        code = main(["train", str(path), "--run-dir", str(run_dir), "--no-progress", *args])
        out, err = capsys.readouterr()
        return code, run_dir, out + err

    return _train


@pytest.fixture
def example() -> Callable[[str], dict[str, Any]]:
    return load_example


@pytest.fixture
def read_metrics() -> Callable[[Path], list[dict[str, Any]]]:
    return metrics


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture
def envs_made(monkeypatch: pytest.MonkeyPatch) -> EnvsMade:
    """Count the envs ``make_single_env`` builds and which of them get closed (the real envs, only
    their ``close`` recorded): checks that validation builds an env once for all its checks."""
    import agilerl_plugin_gym.envs as envs

    seen = EnvsMade()
    real = envs.make_single_env

    def counting(*args: Any, **kwargs: Any) -> Any:
        env = real(*args, **kwargs)
        seen.made.append(env)
        monkeypatch.setattr(env, "close", lambda: seen.closed.append(env), raising=False)
        return env

    monkeypatch.setattr(envs, "make_single_env", counting)
    return seen
