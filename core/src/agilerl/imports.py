"""``"module:attribute"`` and ``"path/to/file.py:attribute"`` references, resolved in one place.

Manifests and registrations name classes and functions as strings (``my_envs:make_env``,
``envs/grid.py:GridEnv``) so that nothing heavy is imported until it is used. :func:`import_object`
is the one resolver for core and every plugin: each calls it with its own error type, so every bad
reference reads the same way and names its field. :func:`load_file_module` and
:func:`get_attribute` are its two halves, for callers that load a file once and then look up
several names in it (a rubric file listing several reward functions).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from agilerl.errors import PluginError, closest

#: The prefix of the ``sys.modules`` name a Python file is imported under (its resolved path follows).
FILE_MODULE_PREFIX = "agilerl_user_"


def is_file_reference(head: str) -> bool:
    """``head`` (the part before ``:``) names a Python file rather than a module."""
    return head.endswith(".py") or "/" in head or "\\" in head


def split_reference(ref: str, *, dotted_ok: bool = False) -> tuple[str, str] | None:
    """``("module", "attr.path")`` for ``"module:attr.path"`` (or ``"module.attr"`` when
    ``dotted_ok``), ``("path/to/file.py", "attr")`` for a file reference; ``None`` when ``ref`` is
    none of these."""
    head, sep, attr = ref.rpartition(":")
    if sep and head and attr and is_file_reference(head):
        return head, attr  # a file path may hold a ':' itself (C:\...), the attribute never does
    if not sep and is_file_reference(ref):
        return None  # a bare file: the attribute is missing
    module_name, sep, attr = ref.partition(":")
    if not sep and dotted_ok:
        module_name, _, attr = ref.rpartition(".")
    if not module_name or not attr or ":" in attr:
        return None
    return module_name, attr


def load_file_module(
    path: str | Path,
    *,
    what: str = "object",
    error: type[Exception] = PluginError,
    base_dir: str | Path | None = None,
) -> ModuleType:
    """Import the Python file ``path`` as a module and return it.

    The module is registered in ``sys.modules`` under a name made from the file's resolved path, so
    two files with the same name never clash, a second load returns the same module, and pickling
    (dataclasses, worker processes) finds the module by name.

    :param path: the file; a relative path is taken relative to ``base_dir`` (default: the cwd).
    :param what: the manifest field the path came from (starts every error message).
    :param error: the exception type to raise.
    :param base_dir: the directory a relative ``path`` is relative to.
    """
    base = Path.cwd() if base_dir is None else Path(base_dir)
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = base / p
    if not p.is_file():
        raise error(f"{what}: file not found: {p} (relative paths are relative to {base})")
    resolved = p.resolve()
    name = FILE_MODULE_PREFIX + re.sub(r"\W", "_", str(resolved))
    cached = sys.modules.get(name)
    if cached is not None:
        return cached
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise error(f"{what}: cannot import {p} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # anything the file raises while importing
        sys.modules.pop(name, None)
        raise error(f"{what}: importing {p} failed: {type(exc).__name__}: {exc}") from exc
    return module


def get_attribute(
    module: ModuleType,
    attr: str,
    *,
    what: str = "object",
    error: type[Exception] = PluginError,
    where: str | None = None,
) -> Any:
    """``module.attr`` (``attr`` may be a dotted path); an ``error`` with a did-you-mean, or the
    callables the module defines itself, when it is missing.

    :param where: how the message names the module (default: ``module 'name'``).
    """
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            public = [n for n in dir(module) if not n.startswith("_")]
            found = closest(part, [n for n in dir(target) if not n.startswith("_")])
            own = [
                n
                for n in public
                if callable(getattr(module, n, None))
                and getattr(getattr(module, n), "__module__", None) == module.__name__
            ]
            msg = f"{what}: {where or f'module {module.__name__!r}'} has no attribute {attr!r}"
            if found:
                msg += f"; did you mean {found!r}?"
            elif own:
                msg += f" (callables there: {', '.join(own)})"
            raise error(msg) from None
    return target


def import_object(
    ref: str,
    *,
    what: str = "object",
    error: type[Exception] = PluginError,
    dotted_ok: bool = False,
    hint: str = "Check the spelling and that the package is installed.",
    base_dir: str | Path | None = None,
) -> Any:
    """Import the object ``ref`` names; raise ``error`` with a message starting ``"{what}: "``.

    :param ref: ``"package.module:Name"`` (an attribute path may follow: ``module:Outer.inner``), or
        ``"path/to/file.py:Name"`` (a file: its part before the last ``:`` ends in ``.py`` or holds a
        path separator).
    :param what: the manifest field or registration the reference came from.
    :param error: the exception type to raise (a plugin's own, usually an ``AgileRLError``).
    :param dotted_ok: accept ``"package.module.Name"`` as well.
    :param hint: appended when the module cannot be imported.
    :param base_dir: the directory a relative file path is relative to (default: the cwd).
    """
    parts = split_reference(ref, dotted_ok=dotted_ok)
    if parts is None:
        form = "'package.module:Name'" + (", 'package.module.Name'" if dotted_ok else "")
        raise error(f"{what}: {ref!r} is not of the form {form} or 'path/to/file.py:Name'")
    head, attr = parts
    if is_file_reference(head):
        module = load_file_module(head, what=what, error=error, base_dir=base_dir)
        return get_attribute(module, attr, what=what, error=error, where=f"file {head!r}")
    try:
        module = importlib.import_module(head)
    except Exception as exc:  # an ImportError, or anything the module raises while importing
        raise error(f"{what}: cannot import module {head!r} for {ref!r}: {type(exc).__name__}: {exc}. {hint}") from exc
    return get_attribute(module, attr, what=what, error=error)


def accepted_kwargs(fn: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The part of ``kwargs`` that ``fn`` accepts by name (all of it when ``fn`` takes ``**kwargs`` or has
    no signature to read): how a factory or a user's callable is called with the context it asks for."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


__all__ = [
    "accepted_kwargs",
    "FILE_MODULE_PREFIX",
    "get_attribute",
    "import_object",
    "is_file_reference",
    "load_file_module",
    "split_reference",
]
