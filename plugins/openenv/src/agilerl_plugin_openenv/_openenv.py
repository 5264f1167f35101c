"""The one place that imports openenv-core (heavy: it pulls gradio, fastmcp, ...).

``import openenv.core`` imports gradio eagerly for its optional web UI, which costs seconds per
process (measured 4-7 s of a 11 s import on a busy 2-core machine). We never use that UI, and
openenv-core itself treats gradio as optional (``env_server/__init__`` catches
``ModuleNotFoundError`` for it). So, unless gradio is already imported or the user asked for the web
UI (``ENABLE_WEB_INTERFACE``), we hide gradio for the duration of the import and restore
``sys.modules`` right after: later ``import gradio`` in the same process works normally.
"""

from __future__ import annotations

import os
import sys
import threading
from types import ModuleType
from typing import Any

_lock = threading.Lock()


def _web_ui_wanted() -> bool:
    return os.environ.get("ENABLE_WEB_INTERFACE", "false").lower() in ("true", "1", "yes")


def import_openenv() -> ModuleType:
    """Import and return ``openenv.core`` (without gradio when we can)."""
    with _lock:
        if "openenv.core" in sys.modules:
            return sys.modules["openenv.core"]
        hide = "gradio" not in sys.modules and not _web_ui_wanted()
        if hide:
            sys.modules["gradio"] = None  # type: ignore[assignment]  # import gradio -> ModuleNotFoundError
        try:
            import openenv.core as core
            import openenv.core.env_client
            import openenv.core.generic_client  # noqa: F401
        finally:
            if hide and sys.modules.get("gradio", 0) is None:
                del sys.modules["gradio"]
        return core  # type: ignore[no-any-return]


def env_server() -> Any:
    """``openenv.core.env_server`` (Environment, Action, Observation, State, create_app, ...)."""
    import_openenv()
    import openenv.core.env_server as server

    return server


def generic_client_cls() -> Any:
    """``openenv.core.generic_client.GenericEnvClient``."""
    import_openenv()
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient
