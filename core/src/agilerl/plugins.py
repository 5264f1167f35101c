"""Finding and loading plugins.

Plugins are modules named in the ``agilerl`` entry-point group. They load lazily, on first use of a
registry, and each entry point inside its own ``try``: one broken plugin is reported (distribution,
version, error) and the rest still work.

Environment switches:

``AGILERL_STRICT_PLUGINS=1``
    re-raise the first plugin error instead of warning (tests and CI run strict).
``AGILERL_LOAD_PLUGINS=a,b``
    load only the named entry points or distributions; set but empty loads none.
``AGILERL_DISABLE_PLUGINS=a,b``
    skip the named entry points or distributions.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import threading
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy

import agilerl.hookspecs as hookspecs
from agilerl.errors import PluginError

ENTRY_POINT_GROUP = "agilerl"


@dataclass
class PluginInfo:
    """What ``agilerl plugins`` reports for one plugin."""

    name: str
    distribution: str | None
    version: str | None
    module: str
    hooks: list[str] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "hooks": self.hooks,
            "error": self.error,
        }


class PluginLoadWarning(UserWarning):
    """A plugin failed to load and was skipped."""


_lock = threading.RLock()
_pm: pluggy.PluginManager | None = None
_loaded = False
#: entry points not yet loaded while a load is under way (None: no load under way)
_pending: list[md.EntryPoint] | None = None
_infos: dict[str, PluginInfo] = {}
_listeners: list[Any] = []


def _new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with every allowed plugin loaded."""
    load_plugins()
    assert _pm is not None
    return _pm


def _csv_env(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def strict() -> bool:
    return os.environ.get("AGILERL_STRICT_PLUGINS", "").lower() in {"1", "true", "yes"}


def load_plugins() -> None:
    """Load every entry point of group ``agilerl`` once (idempotent, thread-safe, re-entrant-safe).

    The built-in plugins import core's real modules only, so loading them never calls back in here.
    A third-party plugin that imports one of the seed API's plugin-provided names while it is being
    imported (``from agilerl.models import SingleAgentAlgorithmSpec`` at the top of its ``specs.py``:
    :mod:`agilerl.compat`, which reads the registries) does: that nested call loads the entry points
    still waiting (so the name it asks for can be found) and returns; the entry point being imported,
    and the final checks, stay with the outer call. No entry point is ever loaded or registered twice.
    """
    global _pm, _loaded, _pending
    with _lock:
        if _loaded:
            return
        outer = _pending is None
        if outer:
            _pm = _pm or _new_manager()
            _pending = _entry_points()
        pm = _pm
        assert pm is not None and _pending is not None
        try:
            while _pending:
                _load_one(pm, _pending.pop(0))
        except BaseException:
            if outer:
                _pending = None
            raise
        if not outer:
            return  # the outer call finishes: hook specs, pending checks, listeners
        _pending = None
        try:
            pm.hook.agilerl_add_hookspecs(plugin_manager=pm)
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            _loaded = True
            raise PluginError(
                f"a plugin implements a hook that does not exist: {exc}. "
                "Check the function's name against the hook reference (docs/plugins/hooks.md)."
            ) from exc
        _loaded = True
        # hook names per plugin after plugin-defined specs were added
        for name, info in _infos.items():
            mod = pm.get_plugin(name)
            if mod is not None:
                info.hooks = sorted(h.name for h in pm.get_hookcallers(mod) or [])
    for listener in list(_listeners):
        listener()


def _entry_points() -> list[md.EntryPoint]:
    """The allowed entry points of group ``agilerl``, by name, one per name."""
    allow = _csv_env("AGILERL_LOAD_PLUGINS")
    deny = _csv_env("AGILERL_DISABLE_PLUGINS") or set()
    try:
        found = md.entry_points(group=ENTRY_POINT_GROUP)
    except Exception as exc:  # pragma: no cover - broken metadata on disk
        raise PluginError(f"could not read the {ENTRY_POINT_GROUP!r} entry points: {exc}") from exc
    chosen: dict[str, md.EntryPoint] = {}
    for ep in sorted(found, key=lambda e: e.name):
        dist = ep.dist.name if ep.dist is not None else None
        names = {ep.name, dist or ""}
        if allow is not None and not names & allow:
            continue
        if names & deny or ep.name in chosen:
            continue
        chosen[ep.name] = ep
    return list(chosen.values())


def _load_one(pm: pluggy.PluginManager, ep: md.EntryPoint) -> None:
    """Import and register one entry point; a failure is reported with its distribution and version."""
    global _loaded
    dist = ep.dist.name if ep.dist is not None else None
    version = ep.dist.version if ep.dist is not None else None
    info = PluginInfo(ep.name, dist, version, ep.value)
    _infos[ep.name] = info
    try:
        module = ep.load()
        if pm.get_plugin(ep.name) is None:
            pm.register(module, name=ep.name)
        info.hooks = sorted(impl.name for impl in pm.get_hookcallers(module) or [])
    except Exception as exc:
        info.error = f"{type(exc).__name__}: {exc}"
        where = f"{dist} {version}" if dist else ep.value
        message = f"agilerl plugin {ep.name!r} ({where}) failed to load: {info.error}"
        gone = _removed_editable_source(ep) if isinstance(exc, ImportError) else None
        if gone is not None:
            # Left behind by a checkout that moved or renamed the package: not a broken plugin, so
            # strict mode only warns. The fix is the user's one command.
            info.error = f"stale editable install: its source {gone} no longer exists"
            message = (
                f"agilerl plugin {ep.name!r} ({where}) is a stale editable install: its source {gone} no "
                f"longer exists; run `pip uninstall {dist}` (or scripts/install.sh in a checkout)"
            )
            warnings.warn(message, PluginLoadWarning, stacklevel=3)
            return
        if strict():
            _loaded = True  # don't retry on every call; the error is reported once
            raise PluginError(message) from exc
        warnings.warn(message, PluginLoadWarning, stacklevel=3)


def _removed_editable_source(ep: md.EntryPoint) -> str | None:
    """The source directory of ``ep``'s editable install if that directory is gone, else None."""
    import json
    from urllib.parse import unquote, urlparse

    try:
        raw = ep.dist.read_text("direct_url.json") if ep.dist is not None else None
        data = json.loads(raw) if raw else {}
    except (OSError, ValueError):
        return None
    url = data.get("url", "")
    if not (data.get("dir_info") or {}).get("editable") or not url.startswith("file://"):
        return None
    path = unquote(urlparse(url).path)
    return None if os.path.isdir(path) else path


def report_hook_failure(name: str, hook: str, exc: Exception) -> None:
    """A loaded plugin's hook raised: record it against the plugin and warn (strict mode raises)."""
    info = _infos.get(name)
    where = f"{info.distribution} {info.version}" if info is not None and info.distribution else name
    message = f"agilerl plugin {name!r} ({where}) failed in {hook}: {type(exc).__name__}: {exc}"
    if info is not None and info.error is None:
        info.error = f"{hook}: {type(exc).__name__}: {exc}"
    if strict():
        raise PluginError(message) from exc
    warnings.warn(message, PluginLoadWarning, stacklevel=3)


def register_plugin(plugin: object, name: str | None = None) -> str:
    """Register an in-process plugin object (a module or class with hook implementations).

    Meant for tests and notebooks; packages should use the entry point. Returns the name used.
    """
    load_plugins()
    assert _pm is not None
    registered = _pm.register(plugin, name=name)
    assert registered is not None
    _pm.check_pending()
    _infos[registered] = PluginInfo(
        registered,
        None,
        None,
        getattr(plugin, "__name__", type(plugin).__name__),
        sorted(h.name for h in _pm.get_hookcallers(plugin) or []),
    )
    for listener in list(_listeners):
        listener()
    return registered


def unregister_plugin(name: str) -> None:
    """Remove a plugin registered with :func:`register_plugin`."""
    if _pm is not None and _pm.get_plugin(name) is not None:
        _pm.unregister(name=name)
    _infos.pop(name, None)
    for listener in list(_listeners):
        listener()


def on_change(listener: Any) -> None:
    """Call ``listener()`` whenever the set of plugins changes (registries use it to refill)."""
    _listeners.append(listener)


def plugin_infos() -> list[PluginInfo]:
    """Every plugin seen, loaded or failed, sorted by name."""
    load_plugins()
    return [_infos[k] for k in sorted(_infos)]


def reset() -> None:
    """Forget every plugin (tests use this with different environment switches)."""
    global _pm, _loaded, _pending
    with _lock:
        _pm = None
        _loaded = False
        _pending = None
        _infos.clear()
    for listener in list(_listeners):
        listener()


def plugin_info(name: str) -> PluginInfo | None:
    """What is known of the plugin registered as ``name`` (None: an in-process object unknown here)."""
    return _infos.get(name)


def describe(name: str) -> str:
    """``'name' (distribution version)``: a plugin as messages name it."""
    info = _infos.get(name)
    if info is None or not info.distribution:
        return repr(name)
    return f"{name!r} ({info.distribution} {info.version or ''})".replace(" )", ")")


def plugin_module(name: str) -> ModuleType | None:
    pm = get_plugin_manager()
    obj = pm.get_plugin(name)
    return obj if isinstance(obj, ModuleType) else None
