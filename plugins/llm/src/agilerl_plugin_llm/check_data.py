"""Validation-time checks of a dataset env's local JSON Lines file (SFT, DPO).

Read with the standard library (no ``datasets``, no torch), line by line, so ``agilerl validate``
finds what the run would hit, naming the file, the line and the column: an empty file, a line that
is not JSON (or uses ``NaN``/``Infinity``), a row that is not an object, a row missing a column its
objective reads (after ``environment.columns`` remapping), a text column that is not text. At most
:data:`MAX_ROWS` rows and :data:`MAX_PROBLEMS` problems are reported. Other formats (.csv, .parquet,
directories, Hub ids) are checked when the env is made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agilerl.errors import Problem

MAX_ROWS = 100_000
MAX_PROBLEMS = 5
_NEEDS = {"sft": (("prompt", "response"), ("messages",)), "preference": (("prompt", "chosen", "rejected"),)}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _mapping(env: Any) -> dict[str, str]:
    """expected column -> actual column, from ``columns`` (either direction) and ``response_column``."""
    out: dict[str, str] = {}
    expected = {"prompt", "response", "chosen", "rejected", "messages"}
    for key, value in dict(getattr(env, "columns", None) or {}).items():
        if key in expected:
            out[key] = value
        elif value in expected:
            out[value] = key
    if getattr(env, "response_column", None):
        out.setdefault("response", env.response_column)
    return out


def dataset_problems(env: Any, objective: str) -> list[Problem]:
    path_value = getattr(env, "dataset_path", None)
    if not path_value or not str(path_value).endswith(".jsonl"):
        return []
    path = Path(path_value)
    if not path.is_file():
        return []  # a missing file is reported by the env with its own hint
    where = "environment.dataset_path"
    mapping = _mapping(env)
    forms = _NEEDS.get(objective, ())
    problems: list[Problem] = []
    absent: dict[tuple[str, ...], tuple[list[int], list[str]]] = {}  # missing columns -> (lines, a row's keys)
    rows = 0
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if rows >= MAX_ROWS or len(problems) >= MAX_PROBLEMS:
                break
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                problems.append(Problem(where, f"{path}:{lineno}: not UTF-8 text (byte {exc.start})"))
                continue
            if not line:
                continue
            rows += 1
            try:
                row = json.loads(line, parse_constant=_reject_constant)
            except ValueError as exc:
                problems.append(Problem(where, f"{path}:{lineno}: not a JSON object ({exc})"))
                continue
            if not isinstance(row, dict):
                problems.append(Problem(where, f"{path}:{lineno}: a row is a JSON object, got {type(row).__name__}"))
                continue
            if forms and not any(all(mapping.get(c, c) in row for c in form) for form in forms):
                missing = tuple(c for c in forms[0] if mapping.get(c, c) not in row)
                lines, _ = absent.setdefault(missing, ([], sorted(row)))
                lines.append(lineno)
                continue
            for col in ("prompt", "response", "chosen", "rejected"):
                actual = mapping.get(col, col)
                if actual in row and not isinstance(row[actual], (str, list)):
                    problems.append(Problem(
                        where, f"{path}:{lineno}: column {actual!r} is {type(row[actual]).__name__} "
                               f"({row[actual]!r}), not text",
                    ))  # fmt: skip
                    break
    for missing, (lines, keys) in absent.items():
        other = "".join(f" (or {', '.join(map(repr, f))})" for f in forms[1:])
        shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
        hint = ", ".join(f"{c}: <your column>" for c in missing)
        problems.append(Problem(where, (
            f"{path}:{lines[0]}: no column {', '.join(repr(mapping.get(c, c)) for c in missing)}{other}, which objective "
            f"{objective!r} needs (the row has {keys}; {len(lines)} row(s) lack it: lines {shown}). Rename the "
            f"column(s) or map them with environment.columns: {{{hint}}}"
        )))  # fmt: skip
    if rows == 0 and not problems:
        problems.append(Problem(where, f"{path}: the file has no rows"))
    return problems


__all__ = ["MAX_PROBLEMS", "MAX_ROWS", "dataset_problems"]
