"""Helpers for testing plugins, shipped with core. Use as a pytest plugin in your conftest::

    pytest_plugins = ["agilerl.testing"]

Fixtures:

``agilerl_strict``
    strict plugin loading (a broken plugin fails the test) for the test's duration.
``register_plugin``
    ``register_plugin(obj, name=None)`` registers an in-process plugin object; it is removed after
    the test and the registries refill.
``write_manifest``
    ``write_manifest(dict, name="manifest.yaml")`` writes a YAML manifest to ``tmp_path``.
``run_cli``
    ``run_cli("validate", path)`` runs ``agilerl`` in-process and returns ``(exit_code, out, err)``.

Functions, for testing a plugin installed for real (entry points and all) in a subprocess:

``plugin_package(root, dist, module, files)``
    writes a source package (``pyproject.toml`` with an ``agilerl`` entry point to ``module.hooks``).
``pip_install_into(target, *packages)``
    installs packages into a directory of their own; put it on ``PYTHONPATH`` of the subprocess.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import agilerl.plugins as plugins
from agilerl.cli import main
from agilerl.registry import ENV_TYPES, MANIFEST_REGISTRY

_PYPROJECT = """\
[build-system]
requires = ["hatchling>=1.21"]
build-backend = "hatchling.build"

[project]
name = "{dist}"
version = "{version}"
requires-python = ">=3.10"

[project.entry-points.agilerl]
{ep} = "{module}.hooks"

[tool.hatch.build.targets.wheel]
packages = ["src/{module}"]
"""


def plugin_package(
    root: Path, dist: str, module: str, files: dict[str, str], *, entry_point: str | None = None, version: str = "1.0.0"
) -> Path:
    """Write a plugin's source package under ``root/dist``: ``files`` (dedented) go into ``src/module``, and
    the entry point ``entry_point`` (default ``module``; the plugins load in its sort order) of the
    ``agilerl`` group names ``module.hooks``. Returns the package directory."""
    pkg = root / dist
    src = pkg / "src" / module
    src.mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(
        _PYPROJECT.format(dist=dist, ep=entry_point or module, module=module, version=version)
    )
    (src / "__init__.py").write_text("")
    for name, text in files.items():
        (src / name).write_text(textwrap.dedent(text))
    return pkg


def pip_install_into(target: Path, *packages: Path) -> Path:
    """``pip install --target target`` the packages (no dependencies, no build isolation: offline). Returns
    ``target``, the directory to put on the subprocess's ``PYTHONPATH``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), *map(str, packages)],
        check=True,
    )  # fmt: skip
    return target


def assert_registered(*, algorithms: list[str] = (), env_types: list[str] = ()) -> None:  # type: ignore[assignment]
    """Fail unless the named algorithms and env types are in the registries."""
    missing = [a for a in algorithms if a not in MANIFEST_REGISTRY] + [e for e in env_types if e not in ENV_TYPES]
    assert not missing, f"not registered: {missing}; loaded plugins: {[i.name for i in plugins.plugin_infos()]}"


@pytest.fixture
def agilerl_strict(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AGILERL_STRICT_PLUGINS", "1")
    yield


@pytest.fixture
def register_plugin() -> Iterator[Callable[..., str]]:
    names: list[str] = []

    def _register(obj: object, name: str | None = None) -> str:
        registered = plugins.register_plugin(obj, name=name)
        names.append(registered)
        return registered

    yield _register
    for name in names:
        plugins.unregister_plugin(name)


@pytest.fixture
def write_manifest(tmp_path: Path) -> Callable[..., Path]:
    def _write(data: dict[str, Any], name: str = "manifest.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    return _write


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def _run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return _run
