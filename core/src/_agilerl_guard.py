"""agilerl-core's guard against the other ``agilerl`` (the PyPI distribution AgileRL).

The PyPI distribution ``agilerl`` installs a package with the same import name as agilerl-core's,
``agilerl``. This module lives outside the ``agilerl`` package so that both ``agilerl`` (which warns on
import) and the ``agilerl`` command's launcher (:mod:`_agilerl_core`, which must work when ``import
agilerl`` gives the other package, or fails) can ask, and neither imports the other to do so.
"""

from __future__ import annotations

DISTRIBUTION = "agilerl-core"


def foreign_agilerl() -> str | None:
    """A message when the PyPI distribution ``agilerl`` is installed in this environment, else None."""
    from importlib import metadata

    try:
        dist = metadata.distribution("agilerl")
    except metadata.PackageNotFoundError:
        return None
    name = dist.metadata["Name"] or "agilerl"
    return (
        f"the PyPI package {name!r} {dist.version} (AgileRL) is installed here and uses the same import name, "
        f"'agilerl', as {DISTRIBUTION}: only one of them can be imported. Uninstall one "
        f"(pip uninstall {name}) or give each its own virtual environment."
    )
