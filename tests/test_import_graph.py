"""No import circle inside core, the gym, openenv or bandit plugin.

A circle is what makes a module impossible to read (or import) on its own: each side needs the
other. The graph counts every import a module can run: at module level and inside functions (a
lazy import inside a function is the usual way to hide a circle, not to remove one); only
``if TYPE_CHECKING:`` blocks (annotations) are left out. An edge goes to the most specific module
an import names:
``from agilerl.models import sections`` is an edge to ``agilerl.models.sections``,
``from agilerl.models import Spec`` one to ``agilerl.models`` (its ``__init__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: (package name, its directory, the part of the graph to check).
PACKAGES = [
    ("agilerl", ROOT / "core/src/agilerl", "agilerl"),
    ("agilerl_plugin_gym", ROOT / "plugins/gym/src/agilerl_plugin_gym", "agilerl_plugin_gym"),
    ("agilerl_plugin_openenv", ROOT / "plugins/openenv/src/agilerl_plugin_openenv", "agilerl_plugin_openenv"),
    ("agilerl_plugin_bandit", ROOT / "plugins/bandit/src/agilerl_plugin_bandit", "agilerl_plugin_bandit"),
]


def _modules(name: str, root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(nodes: list[ast.AST]) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement under ``nodes``, at any depth, except under ``if TYPE_CHECKING:``."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            out += _imports(list(node.orelse))
        else:
            out += _imports(list(ast.iter_child_nodes(node)))
    return out


def _edges(module: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(list(tree.body)):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, *([base] if base else [])])
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            targets.add(sub if sub in known else base)
    return {t for t in targets if t in known and t != module}


def _graph(name: str, root: Path) -> dict[str, set[str]]:
    modules = _modules(name, root)
    known = set(modules)
    return {m: _edges(m, p, known) for m, p in modules.items()}


def _cycles(graph: dict[str, set[str]], scope: str) -> list[list[str]]:
    """Every elementary circle through modules under ``scope`` (Tarjan's SCCs, then one path each)."""
    nodes = {m for m in graph if m == scope or m.startswith(scope + ".")}
    sub = {m: graph[m] & nodes for m in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in sorted(sub[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


#: Circles known and being removed. Nothing may be added here; an entry whose circle is gone is dropped.
KNOWN: list[list[str]] = []


@pytest.mark.parametrize(("name", "root", "scope"), PACKAGES, ids=[p[2] for p in PACKAGES])
def test_no_import_circle(name: str, root: Path, scope: str) -> None:
    cycles = [c for c in _cycles(_graph(name, root), scope) if c not in KNOWN]
    assert not cycles, "import circles (modules that import each other at import time): " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


def test_the_check_sees_a_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n"
                              "from . import a\n")  # fmt: skip
    (pkg / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("def f():\n    from pkg import e\n")
    (pkg / "e.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.d\nelse:\n    import pkg.d\n"
    )
    assert sorted(_cycles(_graph("pkg", pkg), "pkg")) == [["pkg.a", "pkg.b"], ["pkg.d", "pkg.e"]]
