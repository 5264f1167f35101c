"""Loading a text env from an ``entrypoint`` string: ``"package.module:Class"`` or ``"path/to/file.py:Class"``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agilerl_plugin_openenv.errors import ServeEnvError


def load_entrypoint(entrypoint: str) -> Callable[..., Any]:
    """The callable named by ``entrypoint`` (a class or a factory function returning a text env)."""
    target, sep, attr = entrypoint.rpartition(":")
    if not sep or not target or not attr:
        raise ServeEnvError(
            f"entrypoint {entrypoint!r} is not of the form 'package.module:Class' or 'path/to/file.py:Class'"
        )
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise ServeEnvError(f"entrypoint {entrypoint!r}: no such file {str(path)!r}")
        name = f"_agilerl_entrypoint_{path.stem}_{abs(hash(str(path)))}"
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ServeEnvError(f"entrypoint {entrypoint!r}: cannot load {str(path)!r} as a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # dataclasses and pickling look the module up by name
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[name]
                raise ServeEnvError(f"entrypoint {entrypoint!r}: importing {path.name} failed: {exc}") from exc
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ServeEnvError(f"entrypoint {entrypoint!r}: cannot import {target!r}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in dir(module) if not n.startswith("_"))
            raise ServeEnvError(
                f"entrypoint {entrypoint!r}: {target!r} has no attribute {attr!r} (it has: {', '.join(names)})"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise ServeEnvError(f"entrypoint {entrypoint!r} names a {type(obj).__name__}, not a class or factory function")
    return obj  # type: ignore[no-any-return]


def text_env_factory(entrypoint: str, env_config: dict[str, Any] | None = None) -> Callable[[], Any]:
    """A zero-argument factory creating a fresh text env per call (``env_config`` as keyword arguments)."""
    target = load_entrypoint(entrypoint)
    kwargs = dict(env_config or {})

    def make() -> Any:
        return target(**kwargs)

    make.__name__ = getattr(target, "__name__", "make_text_env")
    return make
