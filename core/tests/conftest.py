"""Fixtures for core's tests: the example third-party plugin, registered in-process.

(The cross-package test in ``tests/test_example_plugin.py`` installs it for real and checks that it
is found through its entry point; here we only need its classes.)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

EXAMPLE_SRC = Path(__file__).resolve().parents[2] / "examples" / "plugins" / "agilerl-plugin-example" / "src"


@pytest.fixture
def example_plugin(register_plugin: Callable[..., str]) -> Iterator[Any]:
    """Register the example plugin's hooks module in-process; yields the module."""
    sys.path.insert(0, str(EXAMPLE_SRC))
    try:
        # The example third-party package's hooks, loaded by name: core's tests use it as a toy
        # paradigm, while core's own code never imports a plugin (tests/test_meta.py checks that).
        hooks = importlib.import_module("agilerl_plugin_example.hooks")
        register_plugin(hooks, name="example-inprocess")
        yield hooks
    finally:
        sys.path.remove(str(EXAMPLE_SRC))


@pytest.fixture
def ucb_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "agilerl.com/v1",
        "algorithm": {"name": "UCB1", "c": 1.0},
        "environment": {"env_type": "karmed", "probs": [0.1, 0.3, 0.5, 0.85, 0.4], "seed": 0},
        "training": {"max_steps": 400, "evo_steps": 100, "pop_size": 1, "seed": 0, "progress": False},
    }
