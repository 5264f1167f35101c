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


__all__ = ["GEM_MODULE", "import_gem", "uses_gem"]
