"""PettingZoo env module names: where PettingZoo's old names live now (cheap: no env is imported).

PettingZoo moved its MPE environments into their own package, PyPI ``mpe2`` (same envs, same
spaces, same module names): ``pettingzoo.mpe.simple_spread_v3`` is ``mpe2.simple_spread_v3``, and
importing the old name only raises "MPE has been moved". AgileRL's published manifests still use
the old names, so a name under a moved package resolves to its new home when that is installed.
"""

from __future__ import annotations

import importlib.util
import logging

log = logging.getLogger(__name__)

#: Old package prefix -> (new package, how to install it).
MOVED_PACKAGES: dict[str, tuple[str, str]] = {
    "pettingzoo.mpe": ("mpe2", "pip install mpe2 (or 'agilerl-plugin-gym[mpe]')"),
}


def moved_name(name: str) -> tuple[str, str, str] | None:
    """``(new module name, new package, install hint)`` when ``name`` lies under a moved package."""
    for old, (new, install) in MOVED_PACKAGES.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :], new, install
    return None


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def resolve_module_name(name: str) -> str:
    """The module to import for a PettingZoo env ``name``: its new home when it moved and that
    package is installed (logged once per call site), else ``name`` unchanged."""
    moved = moved_name(name)
    if moved is None or not _installed(moved[1]):
        return name
    log.info("%s is %s now (PettingZoo moved it to the %s package); using %s", name, moved[0], moved[1], moved[0])
    return moved[0]


def moved_problem(name: str) -> str | None:
    """What to do when ``name`` lies under a moved package that is not installed (else ``None``)."""
    moved = moved_name(name)
    if moved is None or _installed(moved[1]):
        return None
    new_name, package, install = moved
    return (
        f"{name!r} moved out of PettingZoo into the {package} package ({new_name}): {install}; the old name then "
        f"resolves to {new_name!r}, or write that name"
    )


__all__ = ["MOVED_PACKAGES", "moved_name", "moved_problem", "resolve_module_name"]
