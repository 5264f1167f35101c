"""Reading a dataset env's rows: local files and directories, the local Hugging Face caches, column
remapping, and the two row forms TRL knows (standard text columns and conversational message lists).

Formats: JSON, JSON Lines, CSV, Parquet, a folder of data files, a ``datasets`` ``save_to_disk``
directory (``load_from_disk``), or a Hub dataset id read from the local caches only. A message list
is checked as a conversation (:mod:`agilerl_plugin_llm.chat`), naming the row; text holding a JSON
message list (what a CSV cell becomes) is refused rather than trained on as text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError
from agilerl_plugin_llm.chat import check_conversation, is_conversational, looks_like_json_messages, plain
from agilerl_plugin_llm.quiet import quiet_progress_bars
from agilerl_plugin_llm.specs import LLMEnvSpec

#: Columns each objective reads (after ``columns`` remapping). SFT takes either form.
SFT_COLUMNS = ("prompt", "response")
SFT_CHAT_COLUMNS = ("messages",)
#: TRL's name of the response column (prompt-completion rows): read as ``response``.
COMPLETION_COLUMN = "completion"
PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")
#: Conversational pairs may leave the prompt implicit (TRL): the messages chosen and rejected share.
IMPLICIT_PREFERENCE_COLUMNS = ("chosen", "rejected")

_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


class DatasetError(AgileRLError):
    """The dataset env's rows are missing, malformed or unusable."""


# --------------------------------------------------------------------------------------------------
# Reading rows
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """Force Hugging Face libraries offline for the duration (never download at run time)."""
    import datasets.config as dconfig

    patches: list[tuple[Any, str, Any]] = [(dconfig, "HF_HUB_OFFLINE", True)]
    with contextlib.suppress(ImportError):
        import huggingface_hub.constants as hconst

        patches.append((hconst, "HF_HUB_OFFLINE", True))
    saved = [(obj, name, getattr(obj, name, None)) for obj, name, _ in patches]
    for obj, name, value in patches:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


def load_local_dataset(path: Path, what: str, *, recursive: bool = False) -> Any:
    """A local dataset: a data file, a folder of data files, or a ``save_to_disk`` directory."""
    import datasets

    quiet_progress_bars()

    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "state.json").exists():
            ds = datasets.load_from_disk(str(path))
            return ds["train"] if isinstance(ds, datasets.DatasetDict) else ds
        found = path.rglob("*") if recursive else path.iterdir()
        files = sorted(p for p in found if p.suffix.lower() in _FORMATS and p.is_file())
        if recursive:
            # A hub snapshot may hold several splits: read the training files when they are named.
            train = [p for p in files if "train" in p.relative_to(path).as_posix().lower()]
            files = train or files
        if not files:
            raise DatasetError(
                f"{what} {str(path)!r} is a directory without data files (.jsonl, .json, .csv, .parquet)"
            )
        kinds = {_FORMATS[p.suffix.lower()] for p in files}
        if len(kinds) > 1:
            raise DatasetError(f"{what} {str(path)!r} mixes file formats ({', '.join(sorted(kinds))})")
        return datasets.load_dataset(kinds.pop(), data_files=[str(p) for p in files], split="train")
    kind = _FORMATS.get(path.suffix.lower())
    if kind is None:
        raise DatasetError(
            f"{what} {str(path)!r}: unsupported file type {path.suffix!r}; use .json, .jsonl, .csv or .parquet"
        )
    try:
        return datasets.load_dataset(kind, data_files=str(path), split="train")
    except Exception as exc:
        raise DatasetError(f"cannot read {what} {str(path)!r} as {kind}: {type(exc).__name__}: {exc}") from exc


def load_rows(spec: LLMEnvSpec) -> list[dict[str, Any]]:
    """The spec's rows as a list of dicts (no remapping yet)."""
    if spec.dataset_path:
        path = Path(spec.dataset_path).expanduser()
        if not path.exists():
            raise DatasetError(
                f"environment.dataset_path {spec.dataset_path!r} does not exist (relative to {Path.cwd()})"
            )
        ds = load_local_dataset(path, "environment.dataset_path")
    else:
        name = spec.hf_dataset_id or spec.dataset
        field_name = "hf_dataset_id" if spec.hf_dataset_id else "dataset"
        assert name is not None
        local = Path(name).expanduser()
        if local.exists():
            ds = load_local_dataset(local, f"environment.{field_name}")
        else:
            ds = load_cached_dataset(name, f"environment.{field_name}", config=spec.hf_dataset_config)
    return _to_rows(ds, spec)


def load_cached_dataset(name: str, what: str, *, config: str | None = None) -> Any:
    """Dataset ``name``'s training split (of configuration ``config``) from the local Hugging Face caches
    only (never downloads).

    Tries ``datasets``' own cache with the hub forced offline, then a hub-cache snapshot (e.g. fetched
    with ``huggingface-cli download --repo-type dataset <id>``) read from its data files.
    """
    import datasets

    quiet_progress_bars()

    try:
        with _offline():
            return datasets.load_dataset(name, config, split="train")
    except Exception as exc:
        snapshot = _hub_snapshot(name)
        if snapshot is not None:
            return load_local_dataset(snapshot, what, recursive=True)
        raise DatasetError(
            f"{what} {name!r} is not a local path and could not be read from the local Hugging Face cache "
            f"({type(exc).__name__}: {str(exc)[:200]}). agilerl never downloads at run time: download it "
            "beforehand, or export it to a file and use environment.dataset_path."
        ) from exc


def _to_rows(ds: Any, spec: LLMEnvSpec) -> list[dict[str, Any]]:
    rows = ds.to_list() if hasattr(ds, "to_list") else list(ds)
    if not rows:
        raise DatasetError(f"the dataset {spec.label!r} has no rows")
    return rows


def _hub_snapshot(repo_id: str) -> Path | None:
    """The local hub-cache snapshot of dataset ``repo_id``, or None (never downloads)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, repo_type="dataset", local_files_only=True))
    except Exception:
        return None


def remap_columns(rows: list[dict[str, Any]], spec: LLMEnvSpec, expected: Sequence[str]) -> list[dict[str, Any]]:
    """Apply ``columns`` (``{expected: actual}``; ``{actual: expected}`` is accepted too)."""
    mapping = dict(spec.columns or {})
    if spec.response_column and "response" in expected:
        mapping.setdefault("response", spec.response_column)
    if not mapping:
        return rows
    present = set(rows[0])
    rename: dict[str, str] = {}  # actual -> expected
    for key, value in mapping.items():
        if key in expected and value in present:
            rename[value] = key
        elif value in expected and key in present:
            rename[key] = value
        elif key == value and key in present:
            continue
        else:
            raise DatasetError(
                f"environment.columns: cannot map {key!r} -> {value!r}: the dataset has columns "
                f"{sorted(present)} and this objective reads {list(expected)}; write {{expected: actual}}, "
                "e.g. {prompt: question}"
            )
    return [{rename.get(k, k): v for k, v in row.items()} for row in rows]


def _require(rows: list[dict[str, Any]], needed: Sequence[str], spec: LLMEnvSpec, objective: str) -> None:
    present = set(rows[0])
    missing = [c for c in needed if c not in present]
    if missing:
        hint = ", ".join(f"{c}: <your column>" for c in missing)
        raise DatasetError(
            f"the dataset {spec.label!r} has no column {', '.join(repr(c) for c in missing)}, which objective "
            f"{objective!r} needs (its columns: {sorted(present)}). Rename the column(s) or map them with "
            f"environment.columns: {{{hint}}}"
        )


def read_rows(spec: LLMEnvSpec, objective: str) -> list[dict[str, Any]]:
    """The rows for ``objective`` (sft or preference), columns remapped and checked to be there."""
    rows = load_rows(spec)
    if objective == "sft":
        first = set(remap_columns(rows[:1], spec, (*SFT_COLUMNS, *SFT_CHAT_COLUMNS))[0])
        if "response" not in first and COMPLETION_COLUMN in first and "prompt" in first:
            rows = [{("response" if k == COMPLETION_COLUMN else k): v for k, v in r.items()} for r in rows]
            first = set(rows[0])
        expected: tuple[str, ...] = SFT_CHAT_COLUMNS if "messages" in first and "response" not in first else SFT_COLUMNS
        rows = remap_columns(rows, spec, (*expected, *SFT_CHAT_COLUMNS))
    else:
        rows = remap_columns(rows, spec, PREFERENCE_COLUMNS)
        expected = PREFERENCE_COLUMNS if "prompt" in rows[0] else IMPLICIT_PREFERENCE_COLUMNS
    _require(rows, expected, spec, objective)
    return rows


def _as_messages(value: Any, role: str, where: str) -> list[dict[str, Any]]:
    value = plain(value)
    if isinstance(value, str):
        if looks_like_json_messages(value):
            raise DatasetError(
                f"{where} is text holding a JSON list of messages (a CSV cell cannot hold a list, and the text would "
                "be trained on as it stands); store conversational rows as .jsonl, .parquet or a save_to_disk directory"
            )
        return [{"role": role, "content": value}]
    if isinstance(value, Mapping) and "content" in value:
        return [{"role": str(value.get("role", role)), "content": value["content"]}]
    if isinstance(value, list):
        return check_conversation(value, where)
    raise DatasetError(f"{where}: expected text or a list of {{role, content}} messages, got {type(value).__name__}")


def conversation(parts: list[tuple[Any, str, str]], where: str, *, template: bool) -> list[dict[str, Any]]:
    """The chat made of ``(value, default role, column)`` parts, checked as one conversation. Message lists
    need the chat template: without it their roles would be dropped (invariant 14)."""
    messages: list[dict[str, Any]] = []
    for value, role, column in parts:
        if not template and is_conversational(value):
            raise DatasetError(
                f"{where} column {column!r} is a list of messages, which only a chat template can render; remove "
                "environment.apply_chat_template: false (or give the column as text)"
            )
        messages += _as_messages(value, role, f"{where} column {column!r}")
    return check_conversation(messages, where)


def split_implicit_prompt(chosen: Any, rejected: Any, where: str) -> tuple[list[Any], list[Any], list[Any]]:
    """TRL's implicit prompt: conversational ``chosen``/``rejected`` without a ``prompt`` column share their
    opening messages; those are the prompt and the rest are the answers."""
    if not (is_conversational(chosen) and is_conversational(rejected)):
        raise DatasetError(
            f"{where} has no 'prompt' column and its chosen/rejected are not message lists; give a prompt column "
            "(or map one with environment.columns: {prompt: <your column>}), or whole conversations as lists"
        )
    chosen, rejected = plain(chosen), plain(rejected)
    n = 0
    while n < min(len(chosen), len(rejected)) - 1 and chosen[n] == rejected[n]:
        n += 1
    if n == 0 or chosen[n].get("role") != "assistant" or rejected[n].get("role") != "assistant":
        raise DatasetError(
            f"{where}: chosen and rejected share no opening messages followed by an assistant answer, so the "
            "prompt cannot be told apart; add a 'prompt' column of the shared messages"
        )
    return chosen[:n], chosen[n:], rejected[n:]


def preference_parts(row: Mapping[str, Any], where: str) -> tuple[Any, tuple[Any, Any]]:
    """``(prompt, (chosen, rejected))`` of a preference row (the prompt implicit when the row has none)."""
    if "prompt" in row and row["prompt"] is not None:
        return row["prompt"], (row["chosen"], row["rejected"])
    prompt, chosen, rejected = split_implicit_prompt(row["chosen"], row["rejected"], where)
    return prompt, (chosen, rejected)


__all__ = [
    "COMPLETION_COLUMN",
    "DatasetError",
    "IMPLICIT_PREFERENCE_COLUMNS",
    "PREFERENCE_COLUMNS",
    "SFT_CHAT_COLUMNS",
    "SFT_COLUMNS",
    "conversation",
    "load_cached_dataset",
    "load_local_dataset",
    "load_rows",
    "preference_parts",
    "read_rows",
    "remap_columns",
    "split_implicit_prompt",
]
