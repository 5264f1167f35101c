"""Fixtures for cross-package tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_PLUGIN = ROOT / "examples" / "plugins" / "agilerl-plugin-example"


@pytest.fixture(scope="session")
def example_plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Install the example third-party plugin for real (a wheel built by pip) into its own directory.

    Processes started with ``PYTHONPATH=<site>`` see it as an installed distribution, entry point
    included, while this virtualenv stays untouched.
    """
    site = tmp_path_factory.mktemp("example-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(site), str(EXAMPLE_PLUGIN)],
        check=True,
    )  # fmt: skip
    return site


@pytest.fixture(scope="session")
def example_env(example_plugin_site: Path) -> dict[str, str]:
    """Environment variables for a subprocess that sees the installed example plugin."""
    return plugin_env(example_plugin_site)


def plugin_env(site: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["AGILERL_STRICT_PLUGINS"] = "1"
    return env


AGILERL_CLI = [sys.executable, "-m", "agilerl.cli"]
