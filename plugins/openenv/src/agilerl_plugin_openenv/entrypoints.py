"""Loading a text env from an ``entrypoint`` string: ``"package.module:Class"`` or ``"path/to/file.py:Class"``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agilerl.imports import import_object
from agilerl_plugin_openenv.errors import ServeEnvError


def load_entrypoint(entrypoint: str) -> Callable[..., Any]:
    """The callable named by ``entrypoint`` (a class or a factory function returning a text env)."""
    obj = import_object(entrypoint, what=f"entrypoint {entrypoint!r}", error=ServeEnvError)
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
