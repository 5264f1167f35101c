"""Core's modules import each other without a circle: neither at module level nor through an import
deferred into a function (which hides a circle from Python, not from a reader); TYPE_CHECKING aside."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Ids of the nodes inside ``if TYPE_CHECKING:`` blocks (imports for annotations only)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _edges(*, deferred: bool = False) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    if deferred:  # the agilerl package (the console-script shim _agilerl_core imports it by design)
        modules = {m: p for m, p in modules.items() if m == "agilerl" or m.startswith("agilerl.")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        nodes = [n for n in ast.walk(tree) if id(n) not in skip] if deferred else tree.body
        for node in nodes:
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for t in targets:
                if t in modules and t != name and not name.startswith(t + "."):  # a package's own submodule
                    graph[name].add(t)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_core_module_imports_form_no_circle() -> None:
    cycle = _cycle(_edges())
    assert cycle is None, " -> ".join(cycle or [])


def test_deferred_imports_form_no_circle_either() -> None:
    # e.g. ray_backend importing the trainer's private seeding inside MemberWorker.__init__, while
    # the trainer reaches ray_backend through make_backend: a circle an import inside a function hid.
    cycle = _cycle(_edges(deferred=True))
    assert cycle is None, " -> ".join(cycle or [])


def test_hookspecs_depend_on_no_other_core_module() -> None:
    # The plugin manager imports hookspecs; the registry imports the plugin manager. hookspecs
    # importing the registry (even for types) closed the circle.
    text = (SRC / "agilerl" / "hookspecs.py").read_text(encoding="utf-8")
    imported = {n.module for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom) and n.module}
    assert {m for m in imported if m.startswith("agilerl")} <= {"agilerl.registration"}
