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

from agilerl_plugin_llm.hf_cache import dataset_cached
from agilerl_plugin_llm.rollout.reward_funcs import REWARD_SOURCES

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

    scored = any(data.get(f) for f in ("rubric_file_path", "reward_file_path", *REWARD_SOURCES))
    if not scored:  # the catalog's rubric, unless the manifest scores the rows itself (reward_funcs, ...)
        data["rubric_file_path"] = entry.rubric_file_path
        data.setdefault("rubric_name", entry.rubric_name)
    data.setdefault("prompt_template", dict(entry.prompt_template))
    data.setdefault("max_reward", entry.max_reward)
    return data


def cached_locally(dataset_id: str, config: str | None = None) -> bool:
    """Whether a Hugging Face dataset is in either local cache (``datasets``' or the hub's), read as
    the run reads them (:func:`agilerl_plugin_llm.hf_cache.dataset_cached`)."""
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


__all__ = ["CATALOG", "CatalogEnv", "apply_catalog", "cached_locally", "missing_dataset"]
