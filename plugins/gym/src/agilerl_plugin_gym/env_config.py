"""The parts of an ``environment`` section both env makers read the same way (single-agent
gymnasium envs in :mod:`agilerl_plugin_gym.envs`, PettingZoo envs in
:mod:`agilerl_plugin_gym.multi_agent.vec_env`): ``path``, ``env_config`` and ``env_wrappers``.

Each maker passes its own error class, so a user sees one kind of error per env kind, each message
starting with the field it is about. No gymnasium or torch here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError
from agilerl.imports import import_object

__all__ = ["add_env_path", "load_env_config", "resolve_wrappers"]

_HINT = "Check the spelling, that the package is installed, or set environment.path to its directory."


def add_env_path(spec: Any, error: type[AgileRLError]) -> None:
    """Put ``environment.path`` (a directory) first on ``sys.path``; ``error`` when it is not one."""
    path = getattr(spec, "path", None)
    if not path:
        return
    resolved = Path(path).resolve()
    if not resolved.is_dir():
        raise error(f"environment.path: {path!r} is not a directory")
    if str(resolved) not in sys.path:
        sys.path.insert(0, str(resolved))


def load_env_config(spec: Any, error: type[AgileRLError]) -> dict[str, Any]:
    """``environment.env_config`` as keyword arguments: a mapping, or a YAML or JSON file holding one."""
    cfg = getattr(spec, "env_config", None)
    if cfg is None:
        return {}
    if isinstance(cfg, dict):
        return dict(cfg)
    path = Path(cfg)
    if not path.is_file():
        raise error(f"environment.env_config: {cfg!r} is neither a mapping nor an existing YAML/JSON file")
    import yaml

    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:  # json.JSONDecodeError is a ValueError
        raise error(f"environment.env_config: {cfg} could not be parsed: {exc}") from None
    if not isinstance(data, dict):
        raise error(f"environment.env_config: {cfg} must hold a mapping of keyword arguments")
    return data


def resolve_wrappers(
    entries: Sequence[Any] | None, field: str, error: type[AgileRLError]
) -> list[tuple[Callable[..., Any], dict[str, Any]]]:
    """``(wrapper, kwargs)`` per entry of ``env_wrappers``: a class or callable, a ``"module:Name"``
    (or dotted) string, or a ``[wrapper, kwargs]`` pair; ``error`` naming ``field[i]`` otherwise."""
    out: list[tuple[Callable[..., Any], dict[str, Any]]] = []
    for i, entry in enumerate(entries or ()):
        where = f"{field}[{i}]"
        if isinstance(entry, (tuple, list)) and len(entry) == 2:
            target, kwargs = entry
        else:
            target, kwargs = entry, {}
        if isinstance(target, str):
            target = import_object(target, what=where, error=error, dotted_ok=True, hint=_HINT)
        if not callable(target):
            raise error(f"{where}: {target!r} is not a wrapper class or callable")
        out.append((target, dict(kwargs or {})))
    return out
