"""Errors the OpenEnv plugin raises. Every one names the (redacted) URL, the cause and the fix."""

from __future__ import annotations

from agilerl.errors import AgileRLError


class OpenEnvError(AgileRLError):
    """Base class: something about an OpenEnv server or its configuration a user can fix."""


class OpenEnvUnavailableError(OpenEnvError):
    """No replica could be reached (down at start, or every replica stayed down mid-run)."""


class OpenEnvProtocolError(OpenEnvError):
    """The server at ``env_url`` does not speak the OpenEnv WebSocket protocol (or not as configured)."""


class OpenEnvCapacityError(OpenEnvError):
    """Every replica refused a new session with ``CAPACITY_REACHED`` while other clients hold them all
    (when this run's own episodes fill a server, the extra ones wait instead)."""


class ServeEnvError(AgileRLError):
    """``agilerl serve-env`` could not load or serve the text env."""
