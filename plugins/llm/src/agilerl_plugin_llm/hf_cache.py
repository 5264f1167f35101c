"""The local Hugging Face caches, read from their layout with the standard library (validation
imports neither ``huggingface_hub``, ``datasets`` nor ``transformers``).

Where they are is resolved from the environment as those libraries resolve it in a fresh process:

* the hub cache: ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``;
* ``datasets``' cache: ``HF_DATASETS_CACHE``, else ``$HF_HOME/datasets``;
* ``HF_HOME``: else ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``.

What a run finds there (it never downloads): a model or dataset id's hub snapshot is the folder
``snapshot_download(id, local_files_only=True)`` returns, ``<hub>/models--ORG--NAME/snapshots/<commit>``
with ``<commit>`` read from ``refs/main``; a dataset may also be in ``datasets``' own cache,
``<datasets>/ORG___name/<config>/<version>/<hash>/``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["dataset_cached", "datasets_cache", "hf_home", "hub_cache", "hub_snapshot", "not_cached_advice"]

_REPO_ID = re.compile(r"^(?:[\w.-]+/)?[\w.-]+$")


def _path(value: str) -> Path:
    return Path(os.path.expandvars(value)).expanduser()


def hf_home() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return _path(os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface"))


def hub_cache() -> Path:
    """The hub cache (``huggingface-cli download`` writes there)."""
    value = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return _path(value) if value else hf_home() / "hub"


def datasets_cache() -> Path:
    """``datasets``' own cache (``datasets.load_dataset`` writes there)."""
    value = os.environ.get("HF_DATASETS_CACHE")
    return _path(value) if value else hf_home() / "datasets"


def hub_snapshot(repo_id: str, repo_type: str = "model") -> Path | None:
    """The hub-cache snapshot of ``repo_id`` a run would read (``refs/main``'s commit), or None."""
    if not _REPO_ID.match(repo_id) or ".." in repo_id:
        return None
    storage = hub_cache() / f"{repo_type}s--{repo_id.replace('/', '--')}"
    try:
        commit = (storage / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    snapshot = storage / "snapshots" / commit
    return snapshot if commit and snapshot.is_dir() else None


def _snake(name: str) -> str:
    """``datasets.naming.camelcase_to_snakecase``: the name part of a dataset's cache folder."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z\d])([A-Z])", r"\1_\2", name).lower()


def dataset_cached(repo_id: str, config: str | None = None) -> bool:
    """Whether a run can read dataset ``repo_id`` (configuration ``config``) from a local cache."""
    if not _REPO_ID.match(repo_id) or ".." in repo_id:
        return False
    parts = repo_id.split("/")
    parts[-1] = _snake(parts[-1])
    root = datasets_cache() / "___".join(parts)
    if root.is_dir() and any(p.is_dir() for p in root.glob(f"{config or '*'}/*/*")):
        return True
    return hub_snapshot(repo_id, "dataset") is not None


def not_cached_advice(repo_id: str, *, dataset: bool = False, config: str | None = None) -> str:
    """Why a Hub id cannot be read here and the two fixes: cache it beforehand, or use a local copy."""
    if dataset:
        where = f"{hub_cache()} (hub) and {datasets_cache()} (datasets)"
        fetch = f"huggingface-cli download --repo-type dataset {repo_id}" + (
            f" (or python -c \"import datasets; datasets.load_dataset('{repo_id}', '{config}')\")" if config else ""
        )
        local = "or export its rows to a file and give it as environment.dataset_path (.jsonl, .json, .csv or .parquet)"
    else:
        where = str(hub_cache())
        fetch = f"huggingface-cli download {repo_id}"
        local = (
            "or give the directory of a local copy written with save_pretrained "
            "(e.g. python -m agilerl_plugin_llm.testing build-tiny-model DIR)"
        )
    return (
        f"{repo_id!r} is not a local path (relative to {Path.cwd()}) and not in the local Hugging Face cache "
        f"(looked in {where}; set HF_HOME or HF_HUB_CACHE if yours is elsewhere). agilerl never downloads at run "
        f"time: cache it beforehand on a machine with internet ({fetch}) and copy the cache here, {local}"
    )
