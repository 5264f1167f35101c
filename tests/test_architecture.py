"""Layers without hidden cycles (issue 33, DESIGN invariant 12), measured with Python's ``ast``.

- No import cycle among the project's modules, counting imports made inside functions (imports under
  ``if TYPE_CHECKING:`` never run and are not counted).
- An import of the same package deferred into a function is the exception (at most 30), kept to
  keep a heavy dependency lazy, and says why on its statement or the line above: ``# deferred: ...``.
- The import-linter contracts in ``.importlinter`` (the named layers of core and of each plugin) are
  kept, and they name every module, so a new module must be placed in a layer.
"""

from __future__ import annotations

import ast
import configparser
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "core" / "src", *sorted((ROOT / "plugins").glob("*/src"))]
MAX_DEFERRED = 30


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for src in SOURCES:
        for path in src.rglob("*.py"):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The project modules an import statement names (``from a import b``: ``a``, and ``a.b`` if a module)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, base] if base else package)
        names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
    out = set()
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    return {
        id(inner)
        for node in tree.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }


def _graph() -> tuple[dict[str, set[str]], list[tuple[str, Path, ast.Import | ast.ImportFrom]]]:
    """Every runtime import edge, and the same-package imports made inside a function or class."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    deferred: list[tuple[str, Path, ast.Import | ast.ImportFrom]] = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        nested = {id(inner) for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom, ast.If, ast.Try))
                  for inner in ast.walk(node)}  # fmt: skip
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in skip:
                continue
            targets = _imported(module, node)
            edges[module] |= targets
            if id(node) in nested and any(t.split(".")[0] == module.split(".")[0] for t in targets):
                deferred.append((module, path, node))
    return edges, deferred


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_sits_in_an_import_cycle_counting_imports_inside_functions() -> None:
    edges, _ = _graph()
    cycles = _cycles(edges)
    assert sum(map(len, cycles)) == 0, "\n".join(" -> ".join(c) for c in cycles)


def test_deferred_same_package_imports_are_few_and_each_says_why() -> None:
    _, deferred = _graph()
    assert len(deferred) <= MAX_DEFERRED, [f"{p.relative_to(ROOT)}:{n.lineno}" for _, p, n in deferred]
    unexplained = []
    for _, path, node in deferred:
        lines = path.read_text(encoding="utf-8").splitlines()
        text = lines[node.lineno - 2 : node.end_lineno]  # the line above, and the statement's own lines
        if not any("# deferred:" in line and line.split("# deferred:", 1)[1].strip() for line in text):
            unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not unexplained, "a deferred import says why (# deferred: <reason>):\n" + "\n".join(unexplained)


def _contract_modules() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter", encoding="utf-8")
    named: set[str] = set()
    for section in config.sections():
        if config[section].get("type") == "layers":
            for line in config[section]["layers"].split("\n"):
                named |= {m.strip() for m in line.replace("|", ":").split(":") if m.strip()}
    return named


def test_the_layer_contracts_name_every_module() -> None:
    named = _contract_modules()
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    unplaced = [
        m
        for m in sorted(MODULES)
        if not m.startswith("_agilerl")  # the launcher and its guard, outside the package
        and m not in packages
        and not any(m == n or m.startswith(n + ".") for n in named)
    ]
    assert not unplaced, f"modules in no layer of .importlinter: {unplaced}"
    assert not named - set(MODULES), f".importlinter names modules that do not exist: {sorted(named - set(MODULES))}"


def test_the_import_linter_contracts_are_kept() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "broken" in proc.stdout and " 0 broken" in proc.stdout, proc.stdout[-2000:]


def _plugin_imports() -> list[tuple[str, str]]:
    out = []
    for module, path in MODULES.items():
        if not module.startswith("agilerl_plugin_"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("agilerl", "agilerl.models", "agilerl.compat"):
                out.append((f"{path.relative_to(ROOT)}:{node.lineno}", ast.unparse(node)))
    return out


def test_the_built_in_plugins_import_cores_real_modules() -> None:
    """Not the facade (``agilerl``), not the seed API's package (``agilerl.models``, whose plugin-provided
    names read the registries): so loading a built-in plugin never calls back into the plugin loader."""
    assert _plugin_imports() == []


def test_the_seed_api_forwards_live_in_one_compat_module() -> None:
    importers = sorted(m for m, targets in _graph()[0].items() if "agilerl.compat" in targets)
    assert importers == ["agilerl.models", "agilerl.models.env"], importers
    for module in ("agilerl.models", "agilerl.models.env"):
        text = MODULES[module].read_text(encoding="utf-8")
        assert "ENV_TYPES.function(" not in text and "_plugin_models" not in text, module


def test_the_seed_api_still_resolves_through_the_compat_module() -> None:
    import agilerl.compat
    import agilerl.models
    import agilerl.models.env

    assert agilerl.models.env.make_gym_env is agilerl.compat.make_gym_env
    assert agilerl.models.PPOSpec is agilerl.compat.spec_class("PPOSpec")
    assert agilerl.models.SingleAgentAlgorithmSpec.__module__.startswith("agilerl_plugin_gym")


def test_the_install_hint_table_matches_what_the_plugins_register() -> None:
    """``agilerl.known_plugins`` (the data behind "pip install X" hints) names, for each distribution we
    publish, exactly the algorithms, env types and paradigms it registers and the seed names it provides."""
    from agilerl import plugins
    from agilerl.compat import spec_class
    from agilerl.known_plugins import KNOWN_PLUGINS, KNOWN_PROVIDERS
    from agilerl.registry import BUILDERS, ENV_TYPES, MANIFEST_REGISTRY

    dist_of = {info.name: info.distribution for info in plugins.plugin_infos()}
    for dist, table in KNOWN_PLUGINS.items():
        assert dist in dist_of.values(), f"{dist} is not installed here: the table cannot be checked"
        mine = {name for name, d in dist_of.items() if d == dist}
        registered = {
            "algorithms": {e.key for e in MANIFEST_REGISTRY.entries() if e.provider in mine},
            "env_types": {e.key for e in ENV_TYPES.entries() if e.provider in mine},
            "paradigms": {e.key for e in BUILDERS.entries() if e.provider in mine},
        }
        for kind, names in registered.items():
            assert set(table[kind]) == names, (
                f"{dist} {kind}: the table says {sorted(table[kind])}, registered {sorted(names)}"
            )
        functions = {f for e in ENV_TYPES.entries() if e.provider in mine for f in e.value.functions}
        package = dist.replace("-", "_")
        for name in table["seed_names"]:
            if name.startswith("make_"):
                assert name in functions, f"{dist} registers no env function {name}"
            else:
                assert spec_class(name).__module__.startswith(package), (name, spec_class(name).__module__)
        seed_functions = {n for n in table["seed_names"] if n.startswith("make_")}
        assert functions == seed_functions, (
            f"{dist} env functions: table {sorted(seed_functions)}, registered {sorted(functions)}"
        )
    owners: dict[str, set[str]] = {}
    for dist, table in KNOWN_PLUGINS.items():
        for names in table.values():
            for name in names:
                owners.setdefault(name, set()).add(dist)
    assert {n: d for n, d in owners.items() if len(d) > 1} == {}, "a name is listed for two distributions"
    assert {n: next(iter(d)) for n, d in owners.items()} == KNOWN_PROVIDERS


def test_below_the_cli_no_core_module_imports_the_agilerl_facade() -> None:
    """``agilerl/__init__`` re-exports the registry and the trainer: a module below them importing it
    is how the 22-module cycle through ``agilerl``, ``registry`` and ``plugins`` came about."""
    edges, _ = _graph()
    # (and the launcher, outside the package, which checks what ``import agilerl`` gives)
    assert sorted(m for m, targets in edges.items() if "agilerl" in targets) == ["_agilerl_core", "agilerl.cli"]
