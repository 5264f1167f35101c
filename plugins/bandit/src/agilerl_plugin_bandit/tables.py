"""Where a bandit's data comes from: the datasets scikit-learn ships and how a table path resolves.

A leaf (standard library only): the specs check paths with it at validation, the env reads the
tables it names, and the data checks use both without either importing the other.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["BUILTIN_DATASETS", "table_path_problem"]

#: Datasets that scikit-learn ships inside its wheel: ``environment.name`` may name them instead of
#: giving ``features``/``targets`` paths. Loaded from the local install, never downloaded.
BUILTIN_DATASETS: dict[str, str] = {
    "iris": "load_iris",
    "wine": "load_wine",
    "breast_cancer": "load_breast_cancer",
}


def table_path_problem(value: str, base: str | None, field: str) -> tuple[Path, str | None]:
    """Where a table path points (relative to ``environment.path`` when set, else the working
    directory) and, when it cannot be read, the message saying why."""
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None:
        p = Path(base).expanduser() / p
    if not p.exists():
        hint = f" (relative to environment.path {base!r})" if base is not None and not Path(value).is_absolute() else ""
        return p, (
            f"environment.{field}: file not found: {p}{hint}. Check the path; relative paths resolve against "
            f"environment.path when set, else the working directory ({Path.cwd()})."
        )
    if p.is_dir():
        return p, f"environment.{field}: {p} is a directory; give a .csv or .parquet file"
    if not os.access(p, os.R_OK):
        return p, f"environment.{field}: {p} is not readable (check its permissions)"
    return p, None
