"""Meta-tests that keep the project honest: every hook is tested and documented; core never imports a
plugin; plugins use only core's public API; `import agilerl` and `agilerl validate` stay light."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
TEST_DIRS = [ROOT / "core" / "tests", ROOT / "tests", *sorted((ROOT / "plugins").glob("*/tests"))]
HEAVY = {"torch", "transformers", "peft", "gradio", "openenv", "vllm", "datasets", "gymnasium", "pettingzoo", "trl"}


def all_hooks() -> list[tuple[str, str]]:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gen_docs import hook_specs
    finally:
        sys.path.pop(0)
    return [(name, sig) for name, sig, _, _ in hook_specs()]


@pytest.mark.parametrize("name,signature", all_hooks())
def test_every_hook_has_a_test(name: str, signature: str) -> None:
    me = Path(__file__).resolve()
    files = [p for d in TEST_DIRS for p in d.rglob("*.py") if p.resolve() != me]
    assert any(name in p.read_text() for p in files), f"no test mentions the hook {name}"


@pytest.mark.parametrize("name,signature", all_hooks())
def test_every_hook_is_documented_with_its_exact_signature(name: str, signature: str) -> None:
    page = (ROOT / "docs" / "plugins" / "hooks.md").read_text()
    assert f"## `{name}`" in page, f"{name} missing from docs/plugins/hooks.md: run scripts/gen_docs.py"
    assert f"def {signature}" in page, f"{name}'s signature changed: run scripts/gen_docs.py"


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_core_imports_no_plugin() -> None:
    bad = [
        f"{p.relative_to(ROOT)}: {name}"
        for p in (ROOT / "core" / "src").rglob("*.py")
        for name in imports_of(p)
        if name.startswith("agilerl_plugin")
    ]
    assert not bad, "core must not import plugins:\n" + "\n".join(bad)


def _declared_plugin_deps(pkg: Path) -> set[str]:
    meta = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]
    deps = list(meta.get("dependencies", []))
    for extra in meta.get("optional-dependencies", {}).values():
        deps += extra
    return {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].replace("-", "_") for d in deps}


@pytest.mark.parametrize("pkg", sorted((ROOT / "plugins").glob("*/")), ids=lambda p: p.name)
def test_plugins_use_core_public_api_and_declared_plugins_only(pkg: Path) -> None:
    own = f"agilerl_plugin_{pkg.name}"
    allowed = _declared_plugin_deps(pkg)
    bad = []
    for path in (pkg / "src").rglob("*.py"):
        for name in imports_of(path):
            parts = name.split(".")
            if parts[0] == "agilerl" and any(p.startswith("_") for p in parts[1:]):
                bad.append(f"{path.relative_to(ROOT)}: private core module {name}")
            if parts[0].startswith("agilerl_plugin") and parts[0] != own and parts[0] not in allowed:
                bad.append(f"{path.relative_to(ROOT)}: {name} (not a declared dependency of {pkg.name})")
    assert not bad, "\n".join(bad)


def _heavy_modules_after(code: str, heavy: set[str] = HEAVY) -> list[str]:
    probe = (
        code + f"\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r})))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_import_agilerl_imports_no_torch_and_no_plugin() -> None:
    code = "import agilerl, agilerl.models, agilerl.builders, agilerl.strategies\nimport sys\nassert not any(m.startswith('agilerl_plugin') for m in sys.modules)"
    assert _heavy_modules_after(code) == []


def example_manifests() -> list[Path]:
    return sorted(p for p in (ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("manifest", example_manifests(), ids=lambda p: p.name)
def test_examples_validate_without_heavy_imports(manifest: Path, request: pytest.FixtureRequest) -> None:
    args = ["validate", str(manifest)]
    if "./tiny-model" in manifest.read_text():  # the LLM examples' model, which their users build first
        model = request.getfixturevalue("tiny_model_dir")
        args += ["--set", f"network.pretrained_model_name_or_path={model}"]
    code = f"from agilerl.cli import main\nrc = main({args!r})\nassert rc == 0, rc\n"
    # Checking an env id against gymnasium's registry at validation is fine; torch & co are not.
    heavy = HEAVY - {"gymnasium", "pettingzoo"}
    assert _heavy_modules_after(code, heavy) == [], "agilerl validate must stay light (no torch etc. at registration)"
