"""Validation-time checks of an LLM env's local rows (SFT, DPO, and dataset-backed rollouts).

Read with the standard library (no ``datasets``, no torch), so ``agilerl validate`` finds what the
run would hit, naming the file, the line and the column: a path that does not exist or is not a
data file (``/etc/passwd``, a directory a dataset env cannot read), an empty file, a line that is
not JSON (or uses ``NaN``/``Infinity``), a row that is not an object, a row missing a column its
objective reads (after ``environment.columns`` remapping), a text column that is not text, a
conversational column (a message list) that is not a well-formed conversation
(:mod:`agilerl_plugin_llm.chat`) or a CSV cell holding one as JSON text; and conversational rows for a
tokenizer without a chat template (:func:`chat_template_problems`, reading the model's files). Blank
lines in JSON Lines are skipped, as the run skips them. ``.json``, ``.jsonl`` and ``.csv`` are read
row by row (at most :data:`MAX_ROWS`; at most :data:`MAX_PROBLEMS` problems are reported); a
``.parquet`` file's magic bytes are checked (its columns when the run starts). A Hub dataset id
(``hf_dataset_id``, or ``dataset`` naming no local path) must be in a local Hugging Face cache
(:mod:`agilerl_plugin_llm.hf_cache`), as the run never downloads; its rows are read when the run starts.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError, Problem
from agilerl_plugin_llm.chat import conversation_problem, is_conversational, looks_like_json_messages
from agilerl_plugin_llm.check_inputs import looks_like_path, rubric_problems
from agilerl_plugin_llm.envs import as_reward
from agilerl_plugin_llm.hf_cache import dataset_cached, not_cached_advice
from agilerl_plugin_llm.reward_model import reward_model_problems
from agilerl_plugin_llm.rollout.catalog import CATALOG, missing_dataset
from agilerl_plugin_llm.rollout.reward_funcs import batched_sources_set, reward_funcs_problems
from agilerl_plugin_llm.rollout.sources import (
    ANSWER_COLUMN,
    QUESTION_COLUMNS,
    RolloutSourceError,
    check_prompt_template,
    heldout_count,
    load_rubric,
)

MAX_ROWS = 100_000
MAX_PROBLEMS = 5
_MAX_JSON_BYTES = 256 << 20
#: Objective -> the column sets a row may have (any one of them).
_NEEDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "sft": (("prompt", "response"), ("messages",), ("prompt", "completion")),
    # conversational pairs may leave the prompt implicit (TRL)
    "preference": (("prompt", "chosen", "rejected"), ("chosen", "rejected")),
    "rollout": (("question",), ("prompt",)),  # agilerl_plugin_llm.rollout.sources.QUESTION_COLUMNS
}
_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".pq")
_UTF8_FIX = "save the file as UTF-8 text"
_JSONL_FIX = 'each line of a .jsonl file is one JSON object ({"column": value, ...}); fix or delete this line'
_NO_ROWS_FIX = "put the rows in it (.jsonl: one JSON object per line) or give the file that holds them"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _mapping(env: Any, objective: str) -> dict[str, str]:
    """expected column -> actual column, as the run applies ``columns`` for ``objective``."""
    columns = dict(getattr(env, "columns", None) or {})
    if objective == "rollout":
        # AgileRL's {dataset column: role} ({nums: question}); {role: column} is accepted too
        # (agilerl_plugin_llm.rollout.sources.column_copies)
        roles = {"question", "prompt", "answer"}
        return {**{k: v for k, v in columns.items() if k in roles}, **{v: k for k, v in columns.items() if v in roles}}
    out: dict[str, str] = {}
    expected = {"prompt", "response", "chosen", "rejected", "messages", "completion"}
    for key, value in columns.items():
        if key in expected:
            out[key] = value
        elif value in expected:
            out[value] = key
    if getattr(env, "response_column", None):
        out.setdefault("response", env.response_column)
    return out


def _rows(path: Path, where: str, problems: list[Problem]) -> Iterator[tuple[int, Any]]:
    """``(line, row)`` of each row of a .jsonl/.json/.csv file; unreadable parts become problems."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        with path.open("rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError as exc:
                    problems.append(Problem(where, f"{path}:{lineno}: not UTF-8 text (byte {exc.start}); {_UTF8_FIX}"))
                    continue
                if not line:
                    continue
                try:
                    yield lineno, json.loads(line, parse_constant=_reject_constant)
                except ValueError as exc:
                    problems.append(Problem(where, f"{path}:{lineno}: not a JSON object: {_JSONL_FIX} ({exc})"))
    elif suffix == ".json":
        if path.stat().st_size > _MAX_JSON_BYTES:
            return  # too large to parse at validation: the run reads it
        try:
            data = json.loads(path.read_bytes().decode("utf-8"), parse_constant=_reject_constant)
        except UnicodeDecodeError as exc:
            problems.append(Problem(where, f"{path}: not UTF-8 text (byte {exc.start}); {_UTF8_FIX}"))
            return
        except ValueError as exc:
            problems.append(Problem(where, f"{path}: not JSON ({exc}); fix the JSON there: a .json dataset is a list "
                                           "of row objects ([{...}, ...])"))  # fmt: skip
            return
        if isinstance(data, dict):
            data = data.get("data", data.get("rows"))
        if not isinstance(data, list):
            problems.append(
                Problem(
                    where,
                    f"{path}: a .json dataset is a list of row objects ([{{...}}, ...]) or "
                    '{"data": [...]}; write the rows so, or as .jsonl (one object per line)',
                )
            )
            return
        yield from ((i, row) for i, row in enumerate(data, start=1))
    elif suffix == ".csv":
        try:
            with path.open(newline="", encoding="utf-8") as fh:
                yield from ((i, row) for i, row in enumerate(csv.DictReader(fh), start=2))
        except UnicodeDecodeError as exc:
            problems.append(Problem(where, f"{path}: not UTF-8 text (byte {exc.start}); {_UTF8_FIX}"))
        except csv.Error as exc:
            problems.append(
                Problem(
                    where,
                    f"{path}: not CSV ({exc}); write a header row of column names, then one "
                    "row per line (quote fields that hold commas or line breaks)",
                )
            )


def _file_problems(path: Path, where: str, value: str, *, directories: bool) -> list[Problem] | None:
    """Problems with ``path`` as a data file ([] when it is a readable one; None: not checked further)."""
    if not path.exists():
        return [Problem(where, f"no such file: {value} (relative to {Path.cwd()})")]
    if path.is_dir():
        if not directories:
            return [Problem(where, f"{value} is a directory; give a .jsonl, .json, .csv or .parquet file")]
        saved = (path / "dataset_info.json").exists() or (path / "state.json").exists()
        if saved or any(p.suffix.lower() in _SUFFIXES and p.is_file() for p in path.iterdir()):
            return None  # a save_to_disk directory or a folder of data files: read by `datasets` at run start
        return [Problem(where, (f"{value} is a directory without data files (.jsonl, .json, .csv, .parquet) and "
                                "not a datasets save_to_disk directory"))]  # fmt: skip
    if path.suffix.lower() not in _SUFFIXES:
        return [Problem(where, (f"{value} is not a dataset file (suffix {path.suffix or 'none'!r}); "
                                "use .jsonl, .json, .csv or .parquet"))]  # fmt: skip
    if path.stat().st_size == 0:
        return [Problem(where, f"{path}: the file has no rows (it is empty); {_NO_ROWS_FIX}")]
    if path.suffix.lower() in (".parquet", ".pq"):
        with path.open("rb") as fh:
            head = fh.read(4)
            fh.seek(-4, 2)
            tail = fh.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            return [
                Problem(
                    where,
                    f"{path} is not a Parquet file (no PAR1 magic bytes at its ends); write it again "
                    "(pandas: DataFrame.to_parquet) or give the rows as .jsonl",
                )
            ]
        return None
    return []


def dataset_problems(env: Any, objective: str) -> list[Problem]:
    """Problems with the local rows ``env`` names for ``objective`` (sft, preference or rollout)."""
    where, value = "environment.dataset_path", getattr(env, "dataset_path", None)
    if not value:
        # The run reads hf_dataset_id (else dataset) as a local path when one exists, else as a Hub id
        # from the local caches (it never downloads).
        hub_id, dataset = getattr(env, "hf_dataset_id", None), getattr(env, "dataset", None)
        named = hub_id or dataset
        if not named:
            return []
        where = "environment.hf_dataset_id" if hub_id else "environment.dataset"
        value = named
        if not Path(str(named)).expanduser().exists():
            return _hub_dataset_problems(str(named), where, getattr(env, "hf_dataset_config", None))
    path = Path(str(value)).expanduser()
    # Dataset envs read directories with `datasets`; a rollout reads one file from dataset_path, but a
    # Hub id that names a local directory (a local copy of that dataset) is read with `datasets` too.
    directories = objective != "rollout" or where != "environment.dataset_path"
    checked = _file_problems(path, where, str(value), directories=directories)
    if checked is None or checked:
        return checked or []
    mapping = _mapping(env, objective)
    forms = _NEEDS.get(objective, ())
    problems: list[Problem] = []
    absent: dict[tuple[str, ...], tuple[list[int], list[str]]] = {}  # missing columns -> (lines, a row's keys)
    rows = 0
    for lineno, row in _rows(path, where, problems):
        if rows >= MAX_ROWS or len(problems) >= MAX_PROBLEMS:
            break
        rows += 1
        if not isinstance(row, dict):
            problems.append(
                Problem(
                    where,
                    f"{path}:{lineno}: a row is a JSON object, got {type(row).__name__}; "
                    'write each row as {"column": value, ...}',
                )
            )
            continue
        if forms and not any(all(mapping.get(c, c) in row for c in form) for form in forms):
            missing = tuple(c for c in forms[0] if mapping.get(c, c) not in row)
            lines, _ = absent.setdefault(missing, ([], sorted(row)))
            lines.append(lineno)
            continue
        for col in ("prompt", "response", "chosen", "rejected"):
            actual = mapping.get(col, col)
            if objective != "rollout" and actual in row and not isinstance(row[actual], (str, list)):
                problems.append(Problem(
                    where, f"{path}:{lineno}: column {actual!r} is {type(row[actual]).__name__} "
                           f"({row[actual]!r}), not text; write it as a string",
                ))  # fmt: skip
                break
        why = chat_row_problem(row, objective, mapping)
        if why:
            problems.append(Problem(where, f"{path}:{lineno}: {why}"))
    for missing, (lines, keys) in absent.items():
        other = "".join(f" (or {', '.join(map(repr, f))})" for f in forms[1:])
        shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
        hint = ", ".join(f"{c}: <your column>" for c in missing)
        needs = "a rollout" if objective == "rollout" else f"objective {objective!r}"
        problems.append(Problem(where, (
            f"{path}:{lines[0]}: no column {', '.join(repr(mapping.get(c, c)) for c in missing)}{other}, which "
            f"{needs} needs (the row has {keys}; {len(lines)} row(s) lack it: lines {shown}). Rename the "
            f"column(s) or map them with environment.columns: {{{hint}}}"
        )))  # fmt: skip
    if rows == 0 and not problems:
        problems.append(Problem(where, f"{path}: the file has no rows; {_NO_ROWS_FIX}"))
    return problems


#: The columns that may hold a conversation (a list of messages), per objective.
_CHAT_COLUMNS = {
    "sft": ("messages", "prompt", "response", "completion"),
    "preference": ("prompt", "chosen", "rejected"),
    "rollout": ("prompt", "question"),
}


def chat_row_problem(row: dict[str, Any], objective: str, mapping: dict[str, str] | None = None) -> str | None:
    """Why a row's conversational columns are malformed (the same checks the run makes), or None."""
    mapping = mapping or {}
    for col in _CHAT_COLUMNS.get(objective, ()):
        actual = mapping.get(col, col)
        value = row.get(actual)
        if looks_like_json_messages(value):
            return (f"column {actual!r} is text holding a JSON list of messages (a CSV cell cannot hold a list); "
                    "store conversational rows as .jsonl, .parquet or a save_to_disk directory")  # fmt: skip
        if objective == "rollout" and isinstance(value, list) and not any(isinstance(m, dict) for m in value):
            continue  # a list of plain values (Countdown's numbers) is a standard column a prompt_template formats
        if isinstance(value, list):
            why = conversation_problem(value)
            if why:
                return f"column {actual!r}: {why}"
            if objective == "rollout" and value[-1].get("role") not in ("user", "tool"):
                return (
                    f"column {actual!r}: the prompt ends with a {value[-1]['role']} message; end it with the user turn"
                )
    if objective == "preference" and mapping.get("prompt", "prompt") not in row:
        chosen, rejected = row.get(mapping.get("chosen", "chosen")), row.get(mapping.get("rejected", "rejected"))
        if not (is_conversational(chosen) and is_conversational(rejected)):
            return ("no 'prompt' column, and chosen/rejected are not message lists (an implicit prompt is the "
                    "messages two conversations share); add a prompt column or map one with environment.columns")  # fmt: skip
    return None


def first_row(env: Any) -> dict[str, Any] | None:
    """The first row of the local .jsonl/.json/.csv file ``env`` names (None: not such a file, or no row)."""
    value = getattr(env, "dataset_path", None) or getattr(env, "hf_dataset_id", None) or getattr(env, "dataset", None)
    path = Path(str(value)).expanduser() if value else None
    if path is None or not path.is_file() or path.suffix.lower() not in (".jsonl", ".json", ".csv"):
        return None
    for _, row in _rows(path, "", []):
        return row if isinstance(row, dict) else None
    return None


def chat_template_problems(env: Any, model_path: str | None, objective: str) -> list[Problem]:
    """Conversational rows need a chat template: the model's tokenizer's (read from its files, nothing
    loaded) or ``chat_template_path``; ``apply_chat_template: false`` cannot render them at all."""
    row = first_row(env)
    if row is None:
        return []
    mapping = _mapping(env, objective)
    chat = [c for c in _CHAT_COLUMNS.get(objective, ()) if is_conversational(row.get(mapping.get(c, c)))]
    if not chat:
        return []
    column = mapping.get(chat[0], chat[0])
    if not getattr(env, "apply_chat_template", True):
        return [Problem("environment.apply_chat_template", (
            f"the rows are conversational (column {column!r} holds messages), which only a chat template renders; "
            "remove apply_chat_template: false"))]  # fmt: skip
    if getattr(env, "chat_template_path", None) or not model_path:
        return []
    directory = Path(str(model_path)).expanduser()
    if not directory.is_dir() or has_chat_template(directory):
        return []
    return [Problem("environment.chat_template_path", (
        f"the rows are conversational (column {column!r} holds messages) and the tokenizer in {model_path} has no "
        "chat template to render them; set environment.chat_template_path to a Jinja template file, or use a "
        "model whose tokenizer has one"))]  # fmt: skip


def has_chat_template(directory: Path) -> bool:
    """Whether the tokenizer saved in ``directory`` has a chat template (its files read, nothing loaded)."""
    if (directory / "chat_template.jinja").is_file() or (directory / "chat_template.json").is_file():
        return True
    config = directory / "tokenizer_config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
    except (OSError, ValueError):
        return True  # unreadable: model_problems reports it
    return bool(isinstance(data, dict) and data.get("chat_template"))


def _hub_dataset_problems(name: str, where: str, config: str | None) -> list[Problem]:
    """A dataset named by Hub id must be in a local cache (a name written as a path must exist)."""
    if looks_like_path(name) or Path(name).suffix.lower() in _SUFFIXES:
        return [Problem(where, f"no such file: {name} (relative to {Path.cwd()}); give an existing data file "
                               "(.jsonl, .json, .csv or .parquet) or a Hub id in the local cache")]  # fmt: skip
    if dataset_cached(name, config):
        return []
    return [Problem(where, not_cached_advice(name, dataset=True, config=config))]


def rollout_source_problems(spec: Any) -> list[tuple[str, str]]:
    """The validation check of the dataset rollout source (rows + rubric): ``(field, why)`` pairs."""
    out = [(p.path.removeprefix("environment."), p.message) for p in dataset_problems(spec, "rollout")]
    batched = batched_sources_set(spec)
    if not batched:
        out += rubric_problems(spec)
    elif getattr(spec, "rubric_file_path", None):
        out.append(
            (
                "rubric_file_path",
                f"{', '.join(batched)} already score the completions; keep one way of "
                "scoring (a rubric function can become a reward function taking completions and **kwargs)",
            )
        )
    out += reward_funcs_problems(spec)
    try:
        check_prompt_template(getattr(spec, "prompt_template", None))
    except RolloutSourceError as exc:
        field, _, why = str(exc).partition(": ")
        out.append((field.removeprefix("environment."), why or str(exc)))
    if getattr(spec, "max_turns", None) not in (None, 1):
        out.append(("max_turns", "a dataset + rubric rollout is single-turn; remove max_turns"))
    return out


def _first_row(path: Path) -> dict[str, Any] | None:
    """A local .jsonl/.csv file's first row (None: another format, or unreadable here: the rows' own
    checks say why)."""
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
    if getattr(spec, "reward_funcs", None) or getattr(spec, "reward_model", None):
        return []  # batched reward sources, no rubric: their own checks ran (reward_funcs_problems, ...)
    functions = list(getattr(spec, "reward_functions", None) or [])
    if not given or getattr(spec, "columns", None) or len(functions) > 1:
        return []  # a column mapping or several weighted functions: the run's own probe checks them
    path = Path(str(given)).expanduser()
    row = _first_row(path) if path.is_file() else None
    if row is None:
        return []
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


def dataset_source_problems(spec: Any, manifest: Any = None) -> list[tuple[str, str]]:
    """The dataset rollout source's validation check: a catalog dataset that is not here, or a local copy
    without the catalog's columns; else the rows' and rubric's own checks (:func:`rollout_source_problems`),
    whether conversational rows have a chat template to render them (the manifest names the model), the
    reward model's own checks, and the rubric probed on the first row."""
    missing = missing_dataset(spec) or catalog_column_problems(spec)
    if missing:
        return missing
    model = getattr(getattr(manifest, "algorithm", None), "pretrained_model_name_or_path", None)
    chat = [(p.path.removeprefix("environment."), p.message) for p in chat_template_problems(spec, model, "rollout")]
    problems = rollout_source_problems(spec) + chat + reward_model_problems(getattr(spec, "reward_model", None))
    return problems or rubric_probe_problems(spec)


def local_row_count(path: Path) -> int | None:
    """Rows in a local .jsonl/.json/.csv file as the run reads them (blank lines skipped); None for
    another format, a file too large to count here, or one whose rows have problems (their own checks
    report those)."""
    if not path.is_file() or path.suffix.lower() not in (".jsonl", ".json", ".csv"):
        return None
    problems: list[Problem] = []
    rows = 0
    for _ in _rows(path, "", problems):
        rows += 1
        if rows > MAX_ROWS:
            return None
    return None if problems or rows == 0 else rows


def eval_prompts_heldout_problems(manifest: Any) -> list[Problem]:
    """``training.eval_prompts`` larger than the held-out split of a local dataset file: the evaluation
    would score some held-out rows twice and report a spread over more prompts than it has. (Rows read
    only when the run starts, a Hub dataset or Parquet, are checked then, before any model loads.)"""
    asked = getattr(manifest.training, "eval_prompts", None)
    env = manifest.environment
    given = getattr(env, "dataset_path", None) or getattr(env, "dataset", None)
    if asked is None or not given:
        return []
    rows = local_row_count(Path(str(given)).expanduser())
    if rows is None:
        return []
    fraction = getattr(env, "train_test_split", None)
    heldout = heldout_count(rows, fraction)
    if asked <= heldout:
        return []
    split = "the default train_test_split 0.9" if fraction is None else f"train_test_split {fraction}"
    return [Problem("training.eval_prompts", (
        f"{asked} is more than the {heldout} held-out rows of {given} ({rows} rows; {split} holds out {heldout}); "
        f"lower eval_prompts to at most {heldout}, or hold out more rows (a smaller environment.train_test_split)"
    ))]  # fmt: skip


__all__ = [
    "MAX_PROBLEMS",
    "MAX_ROWS",
    "chat_row_problem",
    "chat_template_problems",
    "dataset_problems",
    "catalog_column_problems",
    "dataset_source_problems",
    "eval_prompts_heldout_problems",
    "has_chat_template",
    "local_row_count",
    "rollout_source_problems",
    "rubric_probe_problems",
]
