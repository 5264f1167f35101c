"""AgileRL's named environments (``environment.name: gsm8k``): a catalog name stands for a dataset, a
rubric and a prompt template, so a manifest needs nothing else.

Nothing is downloaded: the catalog's dataset is read from the local Hugging Face caches, or from a
local copy the manifest gives (``dataset_path``, which replaces the catalog's dataset and keeps its
rubric and template). Without either, ``agilerl validate`` names the dataset and both places.
Pure Python: validation imports neither torch nor ``datasets``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_RUBRICS = Path(__file__).resolve().parent / "rubrics"


@dataclass(frozen=True)
class CatalogEnv:
    """One named environment: where its rows come from, how a reply is scored, how a prompt reads."""

    hf_dataset_id: str
    hf_dataset_config: str | None
    rubric_file_path: str
    prompt_template: dict[str, str]
    max_reward: float
    columns: tuple[str, ...] = ("question", "answer")
    rubric_name: str = "reward_fn"
    about: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


CATALOG: dict[str, CatalogEnv] = {
    "gsm8k": CatalogEnv(
        hf_dataset_id="openai/gsm8k",
        hf_dataset_config="main",
        rubric_file_path=str(_RUBRICS / "gsm8k.py"),
        prompt_template={
            "system_0": "You are a helpful assistant. Think through the problem inside <think> </think> tags, "
            "then give only the final number inside <answer> </answer> tags.",
            "user_1": "{question}",
            "assistant_2": "<think>",
        },
        max_reward=2.0,
        about="grade-school maths word problems (question, answer ending in '#### <number>')",
    ),
}

#: Fields that name where a rollout env's episodes come from (any one set: the catalog adds no dataset).
_DATASET_FIELDS = ("dataset", "dataset_path", "hf_dataset_id")
_OTHER_SOURCES = ("entrypoint", "env_name", "env_url", "env_image")


def apply_catalog(data: dict[str, Any]) -> dict[str, Any]:
    """Fill a rollout env section whose ``name`` is a catalog entry (given fields win)."""
    entry = CATALOG.get(str(data.get("name") or "").lower())
    if entry is None or any(data.get(f) for f in _OTHER_SOURCES):
        return data
    data = dict(data)
    data.setdefault("env_type", "rollout")
    if not any(data.get(f) for f in _DATASET_FIELDS):
        data["hf_dataset_id"] = entry.hf_dataset_id
        data.setdefault("hf_dataset_config", entry.hf_dataset_config)
    if not data.get("rubric_file_path") and not data.get("reward_file_path"):
        data["rubric_file_path"] = entry.rubric_file_path
        data.setdefault("rubric_name", entry.rubric_name)
    data.setdefault("prompt_template", dict(entry.prompt_template))
    data.setdefault("max_reward", entry.max_reward)
    return data


def cached_locally(dataset_id: str, config: str | None = None) -> bool:
    """Whether a Hugging Face dataset is in either local cache (``datasets``' or the hub's), read as
    the run reads them (:func:`agilerl_plugin_llm.hf_cache.dataset_cached`)."""
    from agilerl_plugin_llm.hf_cache import dataset_cached

    return dataset_cached(dataset_id, config)


def missing_dataset(spec: Any) -> list[tuple[str, str]]:
    """Validation check: the catalog's dataset, when the spec reads it, must be on this machine."""
    entry = CATALOG.get(str(getattr(spec, "name", "") or "").lower())
    dataset_id = getattr(spec, "hf_dataset_id", None)
    if entry is None or dataset_id != entry.hf_dataset_id:
        return []
    if cached_locally(dataset_id, getattr(spec, "hf_dataset_config", None)):
        return []
    config = f", '{entry.hf_dataset_config}'" if entry.hf_dataset_config else ""
    return [(
        "name",
        f"{spec.name!r} is the catalog's {entry.about or spec.name}: its dataset {dataset_id!r}"
        f"{f' (config {entry.hf_dataset_config!r})' if entry.hf_dataset_config else ''} is not in the local "
        "Hugging Face caches (HF_DATASETS_CACHE or HF_HUB_CACHE; by default ~/.cache/huggingface/datasets and "
        "~/.cache/huggingface/hub). Nothing is downloaded at run time: fetch it beforehand "
        f"(python -c \"import datasets; datasets.load_dataset('{dataset_id}'{config})\"), or give a local copy "
        f"as environment.dataset_path (.jsonl, .json, .csv or .parquet with columns "
        f"{', '.join(entry.columns)}); the catalog's rubric and prompt template still apply",
    )]  # fmt: skip


def _first_row(path: Path) -> dict[str, Any] | None:
    """A local .jsonl/.csv file's first row (None: another format, or unreadable here: the rows' own
    checks say why)."""
    import csv
    import json

    try:
        with path.open(encoding="utf-8", newline="") as fh:
            if path.suffix.lower() == ".csv":
                return next(csv.DictReader(fh), None)
            if path.suffix.lower() == ".jsonl":
                for line in fh:
                    if line.strip():
                        row = json.loads(line)
                        return row if isinstance(row, dict) else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return None


def _first_row_columns(path: Path) -> set[str] | None:
    row = _first_row(path)
    return None if row is None else set(row)


def rubric_probe_problems(spec: Any) -> list[tuple[str, str]]:
    """The rubric called once on the first row of a local dataset file with an empty completion, as
    the run calls it before any model loads (docs/llm.md, "Rubrics"): a rubric that raises, or
    returns something that is not a number, is refused at validation too. (The rubric file is the
    manifest's own code, imported as the run imports it.)"""
    given = getattr(spec, "dataset_path", None)
    functions = list(getattr(spec, "reward_functions", None) or [])
    if not given or getattr(spec, "columns", None) or len(functions) > 1:
        return []  # a column mapping or several weighted functions: the run's own probe checks them
    path = Path(str(given)).expanduser()
    row = _first_row(path) if path.is_file() else None
    if row is None:
        return []
    from agilerl.errors import AgileRLError
    from agilerl_plugin_llm.envs import as_reward
    from agilerl_plugin_llm.rollout.sources import ANSWER_COLUMN, QUESTION_COLUMNS, load_rubric

    try:
        rubric = load_rubric(spec)
    except AgileRLError as exc:
        field, _, why = str(exc).partition(": ")
        return [(field.removeprefix("environment."), why or str(exc))]
    name = functions[0][0] if functions else getattr(spec, "rubric_name", None) or "reward_fn"
    question = next((row[c] for c in QUESTION_COLUMNS if c in row), None)
    try:
        value = rubric("", row.get(ANSWER_COLUMN), question)
    except Exception as exc:
        return [("rubric_name", f"{name}(completion, answer, question) raised on a probe call with an empty "
                                f"completion and the first row: {type(exc).__name__}: {exc}")]  # fmt: skip
    try:
        as_reward(value, f"{name}(completion, answer, question)")
    except AgileRLError as exc:
        return [("rubric_name", str(exc))]
    return []


def catalog_column_problems(spec: Any) -> list[tuple[str, str]]:
    """A local ``dataset_path`` standing in for a catalog env's dataset must hold the columns the
    catalog's rubric and prompt template read (else the run trains on, and is scored from, nothing)."""
    entry = CATALOG.get(str(getattr(spec, "name", "") or "").lower())
    given = getattr(spec, "dataset_path", None)
    if entry is None or not given:
        return []
    path = Path(str(given)).expanduser()
    columns = _first_row_columns(path) if path.is_file() else None
    if columns is None:
        return []
    lacking = [c for c in entry.columns if c not in columns]
    if not lacking:
        return []
    return [(
        "dataset_path",
        f"{str(given)!r} stands in for the catalog env {spec.name!r}'s dataset, but its rows have no "
        f"{', '.join(map(repr, lacking))} column (they have {', '.join(map(repr, sorted(columns)))}); the catalog's "
        f"rubric and prompt template read {', '.join(map(repr, entry.columns))}: rename the columns to those",
    )]  # fmt: skip


def dataset_source_problems(spec: Any) -> list[tuple[str, str]]:
    """The dataset rollout source's validation check: a catalog dataset that is not here, or a local
    copy without the catalog's columns, else the rows' and rubric's own checks
    (:func:`agilerl_plugin_llm.check_data.rollout_source_problems`)."""
    missing = missing_dataset(spec) or catalog_column_problems(spec)
    if missing:
        return missing
    from agilerl_plugin_llm.check_data import rollout_source_problems

    return rollout_source_problems(spec) or rubric_probe_problems(spec)


__all__ = ["CATALOG", "CatalogEnv", "apply_catalog", "cached_locally", "catalog_column_problems", "dataset_source_problems",
           "missing_dataset", "rubric_probe_problems"]  # fmt: skip
