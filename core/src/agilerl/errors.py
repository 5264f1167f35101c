"""Error types that carry a message a person can act on.

Every error agilerl raises on bad input is an :class:`AgileRLError`: the CLI prints its message (one
screen, no traceback) and exits with its ``exit_code``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agilerl.known_plugins import KNOWN_PLUGINS, KNOWN_PROVIDERS


def known_providers(kind: str) -> dict[str, str]:
    """The names of ``kind`` (``algorithm``, ``env_type``, ``paradigm``) that a plugin we publish
    provides -> that plugin's distribution: what "unknown name" messages offer to install."""
    key = {"algorithm": "algorithms", "env_type": "env_types", "paradigm": "paradigms"}.get(kind, "")
    return {name: dist for dist, kinds in KNOWN_PLUGINS.items() for name in kinds.get(key, ())}


def closest(name: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The candidate most like ``name`` (case-insensitive), or None."""
    cands = list(candidates)
    lowered = {c.lower(): c for c in cands}
    if name.lower() in lowered:
        return lowered[name.lower()]
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[hits[0]] if hits else None


class AgileRLError(Exception):
    """Base class: bad input or configuration that a user can fix."""

    exit_code: int = 1


class PluginError(AgileRLError):
    """A plugin could not be loaded or registered something inconsistent."""

    exit_code = 2


class DuplicateRegistrationError(PluginError):
    """Two providers registered the same name in one table."""


class AmbiguousNameError(PluginError, KeyError):
    """Two plugins registered one name (an algorithm, an env type): only that name is unusable
    until the manifest or the environment picks its provider."""

    def __init__(self, kind: str, name: str, providers: Sequence[str], message: str) -> None:
        self.kind, self.name, self.providers = kind, name, list(providers)
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


class UnknownNameError(AgileRLError, KeyError):
    """A name (algorithm, env type, paradigm, ...) that no installed plugin registered."""

    def __init__(self, kind: str, name: str, registered: Sequence[str]) -> None:
        self.kind, self.name, self.registered = kind, name, list(registered)
        # A name a known plugin provides, which is not installed: that plugin's install line first,
        # not a fuzzy match with an installed name that merely contains it.
        uninstalled = {n: d for n, d in known_providers(kind).items() if n not in self.registered}
        if name in uninstalled:
            provider = uninstalled[name]
            parts = [
                f"unknown {kind} {name!r}: it is provided by the plugin {provider!r}, which is not installed "
                f"(or not loaded): pip install {provider}."
            ]
        else:
            parts = [f"unknown {kind} {name!r}."]
            # the fuzzy match among what could be meant: installed names and known plugins' names
            hint = closest(name, [*self.registered, *uninstalled])
            if hint is not None and hint != name:
                parts.append(f"Did you mean {hint!r}?")
                if hint in uninstalled:
                    parts.append(f"It is provided by {uninstalled[hint]!r}: pip install {uninstalled[hint]}.")
        shown = ", ".join(sorted(registered)) if registered else "(none: is a plugin installed?)"
        parts.append(f"Registered {kind}s: {shown}.")
        super().__init__(" ".join(parts))

    def __str__(self) -> str:  # KeyError quotes its message; we don't want that
        return str(self.args[0])


class MissingPluginError(AgileRLError, ImportError):
    """A seed API name whose implementation lives in a plugin that is not installed."""

    def __init__(self, name: str, provider: str | None = None) -> None:
        provider = provider or KNOWN_PROVIDERS.get(name)
        if provider:
            msg = f"{name} is provided by the plugin {provider!r}, which is not installed or not loaded: pip install {provider}"
        else:
            msg = f"{name} is not provided by any loaded plugin"
        super().__init__(msg)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a manifest: where, and what to do about it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<manifest>'}: {self.message}"


class ManifestError(AgileRLError):
    """A manifest failed validation. ``problems`` holds one entry per field."""

    def __init__(self, problems: Sequence[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        n = len(self.problems)
        head = f"invalid manifest{where}: {n} problem{'s' if n != 1 else ''}"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


class ManifestFileError(AgileRLError):
    """The manifest file is missing or unreadable: the command could not run (exit 2)."""

    exit_code = 2


class ManifestSyntaxError(AgileRLError):
    """The manifest file is not valid YAML/JSON: the manifest is invalid (exit 1)."""


class TrainingInterrupted(AgileRLError):
    """Ctrl-C during training; a checkpoint was written first when possible."""

    exit_code = 130
