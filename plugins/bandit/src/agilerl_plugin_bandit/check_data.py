"""Validation-time checks of a bandit's tables: every problem the run would hit, found before it
starts, naming the file, the row (1-based line of the file, header = line 1) and the column.

Refused: a missing, empty or unreadable file; a table with no rows or no columns; NaN or
infinite numeric features; missing target values; features and targets of different lengths;
``categorical`` / ``target_column`` naming absent columns; a target with one class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agilerl.errors import Problem
from agilerl_plugin_bandit.tables import BUILTIN_DATASETS

if TYPE_CHECKING:
    import pandas as pd

    from agilerl.models.manifest import TrainingManifest
    from agilerl_plugin_bandit.specs import BanditEnvSpec


def _problem(message: str) -> Problem:
    path, sep, rest = message.partition(": ")
    if sep and path.startswith("environment"):
        return Problem(path, rest)
    return Problem("environment", message)


def _non_finite(table: pd.DataFrame, field: str, file: str) -> list[Problem]:
    import numpy as np
    import pandas as pd

    out: list[Problem] = []
    for col in table.columns:
        series = table[col]
        if pd.api.types.is_bool_dtype(series) or not pd.api.types.is_numeric_dtype(series):
            bad = series.isna().to_numpy()
        else:
            bad = ~np.isfinite(series.to_numpy(dtype=np.float64))
        if bad.any():
            rows = np.flatnonzero(bad)
            value = series.iloc[int(rows[0])]
            value = value.item() if hasattr(value, "item") else value
            lines = ", ".join(str(int(r) + 2) for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
            out.append(Problem(
                f"environment.{field}",
                f"{file}: column {str(col)!r} has {len(rows)} non-finite value(s) ({value!r} at line {int(rows[0]) + 2}; "
                f"lines {lines}); fill or drop those rows",
            ))  # fmt: skip
    return out


def data_problems(manifest: TrainingManifest) -> list[Problem]:
    """Problems of the manifest's table bandit (none for builtin datasets and entrypoints)."""
    spec: BanditEnvSpec = manifest.environment  # type: ignore[assignment]
    if getattr(spec, "entrypoint", None) is not None or not hasattr(spec, "builtin_dataset"):
        return []
    if spec.features is None:
        if spec.builtin_dataset is None:
            return [Problem(
                "environment.name",
                f"{spec.name!r} is not a shipped dataset ({', '.join(sorted(BUILTIN_DATASETS))}) and no "
                "features/targets tables or entrypoint are given: the bandit has no data",
            )]  # fmt: skip
        return []
    # pandas only for tables (validating a builtin dataset or an entrypoint imports neither pandas nor torch)
    from agilerl_plugin_bandit.env import (  # deferred: numpy and pandas, loaded only to read a table
        BanditDataError,
        make_bandit_env,
        read_table,
    )

    problems: list[Problem] = []
    tables: dict[str, Any] = {}
    for field in ("features", "targets"):
        value = getattr(spec, field)
        if value is None:
            continue
        try:
            tables[field] = read_table(value, field=field, base=spec.path)
        except BanditDataError as exc:
            message = str(exc)
            if "No columns to parse" in message:
                message = f"environment.{field}: {value} is empty (no header, no rows)"
            problems.append(_problem(message))
            continue
        if len(tables[field]) == 0:
            problems.append(Problem(f"environment.{field}", f"{value}: the table has a header but no rows"))
            continue
        problems += _non_finite(tables[field], field, str(value))
    if problems:
        return problems
    if "features" in tables and "targets" in tables and len(tables["features"]) != len(tables["targets"]):
        return [Problem(
            "environment.targets",
            f"{spec.targets} has {len(tables['targets'])} rows but {spec.features} has {len(tables['features'])}; "
            "they must describe the same rows, in the same order",
        )]  # fmt: skip
    try:
        make_bandit_env(spec)
    except BanditDataError as exc:
        return [_problem(str(exc))]
    return []


__all__ = ["data_problems"]
