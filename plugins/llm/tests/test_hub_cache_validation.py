"""A Hub id (model or dataset) is validated against the local Hugging Face cache, read from its
layout (no huggingface_hub/datasets import): cached, it validates and is the folder the run
loads; not cached, validation refuses it with where to cache it or put a local copy, because the
run never downloads. The cache location follows HF_HUB_CACHE, HF_HOME and XDG_CACHE_HOME."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_llm.hf_cache import dataset_cached, hub_cache, hub_snapshot

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def _empty_hf_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # ~/.cache/huggingface: empty


def grpo(model: str, **environment: Any) -> dict[str, Any]:
    env = {"env_type": "rollout", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
           "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"), **environment}  # fmt: skip
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2},
        "network": {"pretrained_model_name_or_path": model, "max_context_length": 128},
        "environment": env,
        "training": {"max_steps": 2, "progress": False},
    }


def cache_model(hub: Path, repo_id: str, model_dir: Path, *, ref: bool = True) -> Path:
    """The layout ``huggingface-cli download REPO_ID`` leaves in the hub cache."""
    storage = hub / f"models--{repo_id.replace('/', '--')}"
    snapshot = storage / "snapshots" / SHA
    shutil.copytree(model_dir, snapshot)
    if ref:
        (storage / "refs").mkdir(parents=True)
        (storage / "refs" / "main").write_text(SHA)
    return snapshot


def refusal(manifest: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest)
    (problem,) = info.value.problems
    return problem.path, problem.message


def test_a_model_id_not_cached_is_refused_with_where_to_put_it() -> None:
    path, message = refusal(grpo("agilerl-tests/not-cached"))
    assert path == "network.pretrained_model_name_or_path"
    home_hub = Path.home() / ".cache" / "huggingface" / "hub"
    for needle in ("'agilerl-tests/not-cached' is not a local path", f"looked in {home_hub}", "HF_HOME",
                   "never downloads", "huggingface-cli download agilerl-tests/not-cached", "save_pretrained"):  # fmt: skip
        assert needle in message, message


def test_a_cached_model_id_validates_and_is_the_folder_the_run_loads(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    from agilerl_plugin_llm.model import resolve_model_path

    hub = tmp_path / "hub"
    snapshot = cache_model(hub, "agilerl-tests/tiny", tiny_model_dir)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))  # the run's library read it at import
    load_manifest(grpo("agilerl-tests/tiny"))  # validates
    assert hub_snapshot("agilerl-tests/tiny") == snapshot == resolve_model_path("agilerl-tests/tiny")
    # A cached snapshot is checked like a directory: a broken copy in the cache is named
    (snapshot / "config.json").write_text("{")
    assert "config.json does not parse as JSON" in refusal(grpo("agilerl-tests/tiny"))[1]


def test_a_snapshot_without_refs_main_is_refused_as_the_run_refuses_it(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    from agilerl_plugin_llm.model import ModelLoadError, resolve_model_path

    hub = tmp_path / "hub"
    cache_model(hub, "agilerl-tests/tiny", tiny_model_dir, ref=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    assert "not in the local Hugging Face cache" in refusal(grpo("agilerl-tests/tiny"))[1]
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache"):
        resolve_model_path("agilerl-tests/tiny")


def test_the_cache_location_follows_hf_home_and_xdg_cache_home(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache() == tmp_path / "xdg" / "huggingface" / "hub"
    cache_model(tmp_path / "xdg" / "huggingface" / "hub", "agilerl-tests/tiny", tiny_model_dir)
    load_manifest(grpo("agilerl-tests/tiny"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # HF_HOME wins over XDG_CACHE_HOME
    assert hub_cache() == tmp_path / "hf-home" / "hub"
    assert "not in the local Hugging Face cache" in refusal(grpo("agilerl-tests/tiny"))[1]
    cache_model(tmp_path / "hf-home" / "hub", "agilerl-tests/tiny", tiny_model_dir)
    load_manifest(grpo("agilerl-tests/tiny"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))  # and HF_HUB_CACHE over HF_HOME
    assert "not in the local Hugging Face cache" in refusal(grpo("agilerl-tests/tiny"))[1]


def test_a_dataset_id_is_refused_unless_one_of_the_two_caches_holds_it(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    manifest = grpo(str(tiny_model_dir), dataset_path=None, hf_dataset_id="agilerl-tests/SayWords")
    path, message = refusal(manifest)
    assert path == "environment.hf_dataset_id"
    for needle in ("'agilerl-tests/SayWords' is not a local path", "never downloads",
                   "huggingface-cli download --repo-type dataset agilerl-tests/SayWords", "environment.dataset_path"):  # fmt: skip
        assert needle in message, message
    # datasets' own cache: ORG___snake_name/<config>/<version>/<hash>/ (what load_dataset leaves)
    built = tmp_path / "hf" / "datasets" / "agilerl-tests___say_words" / "default" / "0.0.0" / "abc"
    built.mkdir(parents=True)
    assert dataset_cached("agilerl-tests/SayWords") and dataset_cached("agilerl-tests/SayWords", "default")
    assert not dataset_cached("agilerl-tests/SayWords", "main")  # the config the run asks for must be there
    load_manifest(manifest)
    shutil.rmtree(tmp_path / "hf" / "datasets")
    # the hub cache: datasets--ORG--NAME/refs/main -> snapshots/<commit> (huggingface-cli download)
    storage = tmp_path / "hf" / "hub" / "datasets--agilerl-tests--SayWords"
    (storage / "snapshots" / SHA).mkdir(parents=True)
    (storage / "snapshots" / SHA / "train.jsonl").write_text(json.dumps({"question": "say eight"}) + "\n")
    assert not dataset_cached("agilerl-tests/SayWords")  # no refs/main: snapshot_download would not find it
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(SHA)
    load_manifest(manifest)


def test_a_dataset_name_written_as_a_path_that_does_not_exist_is_no_such_file(tiny_model_dir: Path) -> None:
    path, message = refusal(grpo(str(tiny_model_dir), dataset_path=None, dataset="./rows/missing.jsonl"))
    assert path == "environment.dataset" and message.startswith("no such file: ./rows/missing.jsonl"), message
