"""AgileRL's named environments (``environment.name: gsm8k``): the catalog name stands for a dataset
(openai/gsm8k, config main), a rubric and a prompt template. Offline the dataset is a missing
resource that validation names, with where to put a local copy; with a local copy it trains."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_llm.rollout.catalog import CATALOG
from agilerl_plugin_llm.rollout.rubrics.gsm8k import gold_answer, reward_fn

ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
     "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"},
    {"question": "A box holds 12 eggs. How many eggs are in 2 boxes?", "answer": "2 * 12 = 24\n#### 24"},
    {"question": "Sam had 1,250 stamps and gave away 250. How many are left?", "answer": "1,000 left\n#### 1,000"},
    {"question": "What is 10 minus 3?", "answer": "10 - 3 = 7\n#### 7"},
]  # fmt: skip


@pytest.fixture(autouse=True)
def _empty_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever this machine has cached, the tests see an empty cache (nothing is ever downloaded).
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))  # read at import time
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)


def gsm8k_manifest(model_dir: Path, run_dir: Path, **environment: Any) -> dict[str, Any]:
    """AgileRL's docs/_static/examples/gsm8k_grpo.yaml at a CPU budget (a tiny model, 2 iterations)."""
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "lr": 0.01, "beta": 0.001,
                      "max_output_tokens": 8, "temperature": 0.9, "use_vllm": False,
                      "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 512},
        "environment": {"name": "gsm8k", **environment},
        "training": {"max_steps": 2, "evo_steps": 2, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }  # fmt: skip


def test_the_gsm8k_rubric_scores_the_number_and_the_format() -> None:
    assert gold_answer(ROWS[2]["answer"]) == "1000"
    assert reward_fn(" 3 + 4 is 7.</think>\n<answer>7</answer>", ROWS[0]["answer"], "") == 2.0
    assert reward_fn(" hm</think>\n<answer>8</answer>", ROWS[0]["answer"], "") == 1.0  # format only
    assert reward_fn("7", ROWS[0]["answer"], "") == 0.0
    assert reward_fn("</think><answer>1,000</answer>", ROWS[2]["answer"], "") == 2.0


def test_offline_the_catalog_dataset_is_a_missing_resource_named_with_both_fixes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifest(gsm8k_manifest(tiny_model_dir, tmp_path))
    (problem,) = info.value.problems
    assert problem.path == "environment.name"
    for needle in ("'openai/gsm8k'", "config 'main'", "HF_DATASETS_CACHE", "environment.dataset_path",
                   "load_dataset('openai/gsm8k', 'main')", "question, answer"):  # fmt: skip
        assert needle in problem.message, problem.message


def test_with_a_local_copy_the_catalog_rubric_and_template_apply_and_grpo_trains(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    local = tmp_path / "gsm8k.jsonl"
    local.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run = tmp_path / "run"
    manifest = gsm8k_manifest(tiny_model_dir, run, dataset_path=str(local), train_test_split=0.5)
    env = load_manifest(manifest).environment
    entry = CATALOG["gsm8k"]
    assert env.env_type == "rollout" and env.hf_dataset_id is None  # the local copy replaces the dataset
    assert env.rubric_file_path == entry.rubric_file_path and env.prompt_template == entry.prompt_template
    assert env.max_reward == 2.0
    from agilerl.strategies import select_strategy

    m = load_manifest(manifest)
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    prompt = envs.tokenizer.decode(envs.make_train().reset(seed=0))
    assert "inside <answer> </answer> tags" in prompt and prompt.rstrip().endswith("<think>")
    assert any(r["question"] in prompt for r in ROWS)
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "train/reward" in r]
    assert trained and all(0.0 <= r["train/reward"] <= 2.0 for r in trained), rows


def test_given_fields_win_over_the_catalog(tiny_model_dir: Path, tmp_path: Path) -> None:
    local = tmp_path / "gsm8k.jsonl"
    local.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    template = {"user_0": "Q: {question}"}
    env = load_manifest(
        gsm8k_manifest(tiny_model_dir, tmp_path, dataset_path=str(local), prompt_template=template, max_reward=1.0)
    ).environment
    assert env.prompt_template == template and env.max_reward == 1.0
    assert env.rubric_file_path == CATALOG["gsm8k"].rubric_file_path


def test_a_copy_in_the_local_hub_cache_is_read_without_a_dataset_path(tiny_model_dir: Path, tmp_path: Path) -> None:
    import pandas as pd

    # The layout `huggingface-cli download --repo-type dataset openai/gsm8k` leaves in the hub cache.
    repo = tmp_path / "hf" / "hub" / "datasets--openai--gsm8k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    data = repo / "snapshots" / ("0" * 40) / "main"
    data.mkdir(parents=True)
    pd.DataFrame(ROWS).to_parquet(data / "train-00000-of-00001.parquet")
    m = load_manifest(gsm8k_manifest(tiny_model_dir, tmp_path / "run"))
    assert m.environment.hf_dataset_id == "openai/gsm8k" and m.environment.hf_dataset_config == "main"
    from agilerl.strategies import select_strategy

    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    prompt = envs.tokenizer.decode(envs.make_train().reset(seed=0))
    assert any(r["question"] in prompt for r in ROWS)
