"""Shared fixtures for the bandit plugin's tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "examples" / "data"


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    # Small nets run fastest on one thread, and CI's two cores are shared.
    torch.set_num_threads(1)


@pytest.fixture
def mushrooms() -> dict[str, str]:
    """The categorical example dataset, as absolute paths (tests may run from any directory)."""
    return {
        "features": str(DATA / "mushrooms_features.csv"),
        "targets": str(DATA / "mushrooms_targets.csv"),
    }
