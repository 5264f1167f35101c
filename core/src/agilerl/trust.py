"""The one trust rule for code a checkpoint names.

A checkpoint is loaded with ``torch.load(weights_only=True)``: the file itself runs nothing. But
the manifest stored in it can name code (an env ``entrypoint``, a ``factory``, a ``path`` put on
``sys.path``, wrappers, a rubric file, reward functions (``reward_funcs``), an observation processor, the ``module:EnvId`` form of
``environment.name``) that rebuilding the run would import and call.

Every entry point that reads a checkpoint (``agilerl train --resume``, ``agilerl eval``,
``agilerl export-policy``, :func:`agilerl.load`, ``LocalTrainer.from_checkpoint``) applies
:func:`require_trust` before the stored manifest is validated (validating a custom env imports it):
code named by a checkpoint is imported only when it is

- registered code: a module of ``agilerl`` or of an installed, loaded plugin's own package (for
  example a wrapper a plugin ships for its own algorithms); an environment *module* named by
  ``environment.name`` (a dotted env module, the head of ``module:EnvId``) may also come from a
  package a plugin declares as a dependency; a ``factory`` the env type's plugin declares in its
  spec's ``registered_factories`` (say, a game library's ``make`` that builds only the games
  registered with it), whose ``entrypoint`` is then an id that factory looks up, not an import; or
- trusted by the user: the manifest file given instead of the stored one, or ``--trust-checkpoint``
  (``trust=True`` / ``trust_checkpoint=True`` in Python).

Files (``path``, ``rubric_file_path``, ``envs/grid.py:GridEnv``) are never registered code.
``environment.path`` counts as code even with no ``entrypoint`` or ``factory`` beside it: the env
loaders put it first on ``sys.path``, so any module imported later (by the run, the exporter, the
logger) may come from that directory. An env type whose loader does that only for an entrypoint
(its ``path`` being otherwise the base of data files) says so with
``EnvSpec.path_imports_alone = False``.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from agilerl.errors import AgileRLError
from agilerl.imports import is_file_reference
from agilerl.plugins import plugin_infos
from agilerl.registry import ENV_TYPES

#: Manifest keys whose values are imported, executed or put on ``sys.path``.
CODE_KEYS = frozenset({"entrypoint", "factory", "path", "env_wrappers", "wrappers", "rubric_file_path",
                       "reward_file_path", "observation_processor", "reward_funcs"})  # fmt: skip
#: Keys that name a file or directory: never registered code.
FILE_KEYS = frozenset({"path", "rubric_file_path", "reward_file_path"})

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_module(name: Any) -> str | None:
    """The module ``environment.name`` makes its env type import, if it names one: the head of
    the ``module:EnvId`` form, or a dotted module path (an env module), or a
    bare name that is an importable top-level module (found without importing it)."""
    if not isinstance(name, str) or not name:
        return None
    head, sep, _ = name.partition(":")
    if sep:
        return head or None
    parts = name.split(".")
    if not all(_IDENT.match(p) for p in parts):
        return None  # a registry id (Name-v1, Namespace/Name-v5) or a label
    if len(parts) > 1:
        return name
    try:
        return name if importlib.util.find_spec(name) is not None else None
    except (ImportError, ValueError):
        return None


def code_references(manifest: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(field path, value)`` of every manifest field that names code to import or run."""
    found: list[tuple[str, Any]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                sub = f"{path}.{k}" if path else str(k)
                # `environment.path` is put first on sys.path by the env loaders whatever else the
                # section says (every later import may come from it); a nested `path` counts beside
                # an entrypoint or factory
                imports = (
                    k != "path"
                    or (path == "environment" and _path_imports_alone(node))
                    or any(node.get(c) for c in ("entrypoint", "factory"))
                )
                if k in CODE_KEYS and v not in (None, "", [], {}) and imports:
                    found.append((sub, v))
                else:
                    walk(v, sub)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    env = manifest.get("environment")
    if isinstance(env, Mapping) and _env_module(env.get("name")) is not None:
        found.append(("environment.name", env["name"]))
    for section in ("environment", "algorithm"):
        walk(manifest.get(section) or {}, section)
    return found


def _root(module: str) -> str:
    return module.split(".")[0]


def _references(value: Any) -> list[str] | None:
    """The module names ``value`` (a code field's value) imports; ``None`` when it names a file or
    anything that is not a plain ``module:attr`` / ``module.attr`` reference."""
    if isinstance(value, str):
        if ":" not in value and not is_file_reference(value) and not all(_IDENT.match(p) for p in value.split(".")):
            return []  # a registered id (entrypoint: MyEnv-v0), not an import
        head = value.rpartition(":")[0] if ":" in value else value.rpartition(".")[0]
        if not head or is_file_reference(head) or not all(_IDENT.match(p) for p in head.split(".")):
            return None
        if "__main__" in head.split("."):
            return None  # a __main__ module runs its program when imported
        return [head]
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], Mapping):
            return _references(value[0])  # a [target, kwargs] wrapper entry
        out: list[str] = []
        for item in value:
            refs = _references(item)
            if refs is None:
                return None
            out += refs
        return out
    return None


@lru_cache(maxsize=1)
def _dependency_roots(plugin_dists: frozenset[str]) -> frozenset[str]:
    """Top-level packages of the distributions the loaded plugins declare as dependencies (extras too)."""
    wanted: set[str] = set()
    for dist in plugin_dists:
        try:
            requires = md.requires(dist) or []
        except md.PackageNotFoundError:
            continue
        for req in requires:
            m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if m:
                wanted.add(_normalise(m.group(1)))
    return frozenset(
        top for top, dists in md.packages_distributions().items() if any(_normalise(d) in wanted for d in dists)
    )


def _normalise(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def registered_roots() -> frozenset[str]:
    """Top-level packages whose code counts as registered: ``agilerl`` and each loaded plugin's package."""
    # an entry point's value is "pkg.module" or "pkg.module:object"
    return frozenset(
        {"agilerl"} | {_root(i.module.partition(":")[0]) for i in plugin_infos() if not i.error and i.module}
    )


def _env_spec_class(env: Mapping[str, Any]) -> Any:
    """The spec class a loaded plugin registers for ``env``'s ``env_type``, or ``None``."""
    if not isinstance(env.get("env_type"), str):
        return None

    try:
        return ENV_TYPES.spec_class(env["env_type"])
    except Exception:  # an env type no loaded plugin registers
        return None


def _path_imports_alone(env: Mapping[str, Any]) -> bool:
    """Whether ``environment.path`` alone is code for this env type (``EnvSpec.path_imports_alone``;
    an env type no loaded plugin registers: yes)."""
    spec_cls = _env_spec_class(env)
    return True if spec_cls is None else bool(getattr(spec_cls, "path_imports_alone", True))


def _registered_factory(env: Any) -> bool:
    """Whether ``env`` (the ``environment`` section) builds through a factory its env type's plugin
    vouches for (``EnvSpec.registered_factories``): then the ``entrypoint`` is an id that factory
    looks up, not an import."""
    if not isinstance(env, Mapping) or not isinstance(env.get("factory"), str):
        return False
    spec_cls = _env_spec_class(env)  # none: nobody vouches for its factory
    return spec_cls is not None and env["factory"] in spec_cls.registered_factories


def untrusted_references(manifest: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The :func:`code_references` that are not registered code (see the module docstring)."""
    refs = code_references(manifest)
    if not refs:
        return []
    roots = registered_roots()
    vouched = (
        ("environment.factory", "environment.entrypoint") if _registered_factory(manifest.get("environment")) else ()
    )
    out = []
    for path, value in refs:
        if path in vouched:
            continue
        leaf = path.rpartition(".")[2].partition("[")[0]
        if leaf in FILE_KEYS:
            out.append((path, value))
            continue
        if path == "environment.name":
            module = _env_module(value) or ""
            if _root(module) in roots:
                continue

            dists = frozenset(i.distribution for i in plugin_infos() if not i.error and i.distribution)
            if "__main__" not in module.split(".") and _root(module) in _dependency_roots(dists):
                continue
            out.append((path, value))
            continue
        modules = _references(value)
        if modules is None or any(_root(m) not in roots for m in modules):
            out.append((path, value))
    return out


class UntrustedCheckpointError(AgileRLError):
    """A checkpoint's stored manifest names code that is not registered, and the user has not said to run it."""


#: What each entry point tells the user to do instead (``{path}`` is the checkpoint).
RESUME_REMEDY = (
    "Resume with the manifest file you trust (agilerl train MANIFEST --resume {path}), or pass "
    "--trust-checkpoint (trust_checkpoint=True in Python) if you wrote this checkpoint yourself."
)
LOAD_REMEDY = (
    "Pass the manifest file you trust (--manifest MANIFEST; manifest=... in Python), or "
    "--trust-checkpoint (trust=True in Python) if you wrote this checkpoint yourself."
)


def require_trust(
    checkpoint_path: str, manifest: Mapping[str, Any], *, trusted: bool, doing: str = "resuming", remedy: str = ""
) -> None:
    """Refuse a checkpoint whose stored manifest names unregistered code, unless ``trusted``.

    :param doing: what would import it, for the message (``"resuming"``, ``"loading"``).
    :param remedy: what to do instead (default :data:`RESUME_REMEDY`).
    """
    if trusted:
        return
    refs = untrusted_references(manifest)
    if not refs:
        return
    shown = "\n".join(f"  - {path}: {value!r}" for path, value in refs)
    raise UntrustedCheckpointError(
        f"the manifest stored in {checkpoint_path} names code that {doing} would import or run:\n{shown}\n"
        + (remedy or RESUME_REMEDY).format(path=checkpoint_path)
    )


__all__ = [
    "CODE_KEYS",
    "LOAD_REMEDY",
    "RESUME_REMEDY",
    "UntrustedCheckpointError",
    "code_references",
    "registered_roots",
    "require_trust",
    "untrusted_references",
]
