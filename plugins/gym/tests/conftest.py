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
