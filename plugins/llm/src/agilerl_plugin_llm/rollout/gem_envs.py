"""GEM's multi-turn games (PyPI ``gem-llm``) as text envs: AgileRL's ``env_name: game:Sudoku-v0-hard``.

AgileRL builds ``env_name`` with ``gem.make(env_name)`` and plays it turn by turn; here ``env_name``
becomes an ``entrypoint`` whose ``factory`` is ``gem:make`` (see ``LLMEnvSpec``), and the harness
renders GEM's ``info["prefix"]``/``info["suffix"]`` around each observation as AgileRL does. GEM's
envs already speak the text-env protocol: ``reset(seed) -> (str, info)``,
``step(str) -> (str, reward, terminated, truncated, info)`` and a ``max_turns`` attribute.

One wrinkle: ``import gem`` calls ``logging.basicConfig``, which gives the root logger a stderr
handler, so every agilerl log line would print twice. :func:`import_gem` imports it and undoes that.
"""

from __future__ import annotations

import importlib
import logging
import sys
from types import ModuleType
from typing import Any

from agilerl.errors import closest

#: The module names of GEM's package (``gem-llm`` installs ``gem``).
GEM_MODULE = "gem"


def import_gem() -> ModuleType:
    """Import GEM, keeping the root logger's handlers and level as they were before the import."""
    if GEM_MODULE in sys.modules:
        return sys.modules[GEM_MODULE]
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        return importlib.import_module(GEM_MODULE)
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


def uses_gem(ref: str | None) -> bool:
    """Whether a ``module:attr`` reference (a ``factory`` or ``entrypoint``) lives in GEM."""
    if not ref or ":" not in ref:
        return False
    module = ref.partition(":")[0]
    return module == GEM_MODULE or module.startswith(GEM_MODULE + ".")


def gem_game_problem(env_id: str) -> str | None:
    """Why GEM has no game ``env_id`` (did-you-mean among its registered ids); None when it has, or
    when GEM keeps no registry to ask (then ``gem.make`` answers when the run builds it)."""
    gem = import_gem()
    registry = getattr(getattr(getattr(gem, "envs", None), "registration", None), "ENV_REGISTRY", None)
    if not isinstance(registry, dict) or not registry or env_id in registry:
        return None
    ids = sorted(str(k) for k in registry)
    hint = closest(env_id, ids)
    return f"GEM has no game {env_id!r}" + (
        f"; did you mean {hint!r}?" if hint else f"; its games are {', '.join(ids[:20])}"
    )


def gem_config_problem(env_id: str, config: dict[str, Any]) -> str | None:
    """Why ``env_config`` cannot configure the GEM game ``env_id`` (None: it can, or GEM does not say).

    GEM's games take ``**_`` after their own arguments, so a misspelt key (``max_turn``) is dropped
    without a word and the game runs with its defaults: the keys are checked against the game
    class's named arguments instead."""
    import inspect

    gem = import_gem()
    registry = getattr(getattr(getattr(gem, "envs", None), "registration", None), "ENV_REGISTRY", None)
    spec = registry.get(env_id) if isinstance(registry, dict) else None
    entry = getattr(spec, "entry_point", None)
    if not isinstance(entry, str) or ":" not in entry:
        return None
    module, _, name = entry.partition(":")
    try:
        cls = getattr(importlib.import_module(module), name)
        params = inspect.signature(cls.__init__).parameters.values()
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    named = {p.name for p in params if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    unknown = [k for k in config if k not in named]
    if not unknown:
        return None
    hints = [f"{k!r}" + (f" (did you mean {hint!r}?)" if (hint := closest(k, named)) else "") for k in unknown]
    return (
        f"the GEM game {env_id} ({name}) takes no {', '.join(hints)}: GEM would drop it and play with "
        f"its defaults; its options are {', '.join(sorted(named)) or 'none'}"
    )


def entrypoint_problems(spec: Any) -> list[tuple[str, str]]:
    """The entrypoint rollout source's validation check for a GEM game: its id in GEM's registry,
    and its ``env_config`` keys (the only constructor whose options we can read without running
    user code)."""
    entrypoint = getattr(spec, "entrypoint", None)
    if not entrypoint or not uses_gem(getattr(spec, "factory", None)):
        return []
    unknown = gem_game_problem(str(entrypoint))
    if unknown is not None:
        return [("env_name" if getattr(spec, "env_name", None) else "entrypoint", unknown)]
    config = getattr(spec, "env_config", None)
    problem = gem_config_problem(str(entrypoint), dict(config)) if config else None
    return [("env_config", problem)] if problem else []


__all__ = ["GEM_MODULE", "entrypoint_problems", "gem_config_problem", "gem_game_problem", "import_gem", "uses_gem"]
