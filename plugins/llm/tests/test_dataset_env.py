"""The dataset env: file formats, column remapping, loss masks, the long-row rule, split, shards, order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl_plugin_llm.dataset.env import DatasetError, make_llm_env
from agilerl_plugin_llm.model import ChatTemplateError, load_tokenizer
from agilerl_plugin_llm.specs import LLMEnvSpec

ROWS = [{"question": f"what is {i} + 1?", "answer": f"{i} + 1 = {i + 1}."} for i in range(20)]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


def _spec(**fields: Any) -> LLMEnvSpec:
    return LLMEnvSpec(env_type="dataset", **fields)


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pandas as pd

    frame = pd.DataFrame(rows)
    if path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    return path


def _response_text(tokenizer: Any, batch: dict[str, torch.Tensor], row: int = 0) -> str:
    ids, mask = batch["input_ids"][row], batch["loss_mask"][row].bool()
    return tokenizer.decode(ids[mask])


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_formats_and_column_remap(tokenizer: Any, tmp_path: Path, suffix: str) -> None:
    path = _write(tmp_path / f"rows{suffix}", ROWS)
    env = make_llm_env(
        _spec(dataset_path=str(path), objective="sft", columns={"prompt": "question"}, response_column="answer",
              train_test_split=0.75),
        tokenizer, data_batch_size_per_gpu=4, seed=0,
    )  # fmt: skip
    assert (len(env.train_rows), len(env.test_rows)) == (15, 5)
    batch = env.next_batch()
    assert batch["input_ids"].shape[0] == 4 and batch["loss_mask"].shape == batch["input_ids"].shape
    # Loss on the response (and the end-of-turn marker), never on the prompt or padding.
    text = _response_text(tokenizer, batch)
    assert text.endswith("<|im_end|>") and "+ 1 =" in text and "what is" not in text
    assert not (batch["loss_mask"].bool() & ~batch["attention_mask"].bool()).any()


def test_hf_dataset_dir_and_chat_messages(tokenizer: Any, tmp_path: Path) -> None:
    from datasets import Dataset

    chats = [{"messages": [{"role": "system", "content": "be brief."}, {"role": "user", "content": r["question"]},
                           {"role": "assistant", "content": r["answer"]}]} for r in ROWS]  # fmt: skip
    Dataset.from_list(chats).save_to_disk(str(tmp_path / "saved"))
    env = make_llm_env(_spec(hf_dataset_id=str(tmp_path / "saved")), tokenizer, seed=1)
    batch = env.next_batch(2)
    text = _response_text(tokenizer, batch)
    assert "be brief" not in text and "what is" not in text and "= " in text


def test_plain_text_without_template(tokenizer: Any, tmp_path: Path) -> None:
    path = _write(tmp_path / "rows.jsonl", [{"prompt": "what is 1 + 1?", "response": " 2."}])
    env = make_llm_env(_spec(dataset_path=str(path), apply_chat_template=False, train_test_split=1.0), tokenizer)
    batch = env.next_batch(1)
    assert _response_text(tokenizer, batch) == " 2.</s>"
    assert "<|im_start|>" not in tokenizer.decode(batch["input_ids"][0])


def test_preference_batches_pair_chosen_and_rejected(tokenizer: Any, tmp_path: Path) -> None:
    rows = [{"prompt": f"say {i}", "chosen": f"{i}, thanks.", "rejected": "no."} for i in range(10)]
    env = make_llm_env(_spec(dataset_path=str(_write(tmp_path / "p.jsonl", rows)), objective="preference"),
                       tokenizer, data_batch_size_per_gpu=3, seed=0)  # fmt: skip
    batch = env.next_batch()
    assert batch["input_ids"].shape[:2] == (3, 2)
    chosen = tokenizer.decode(batch["input_ids"][0, 0][batch["loss_mask"][0, 0].bool()])
    rejected = tokenizer.decode(batch["input_ids"][0, 1][batch["loss_mask"][0, 1].bool()])
    assert "thanks" in chosen and rejected == "no.<|im_end|>"


def test_long_rows_dropped_and_all_too_long_is_an_error(tokenizer: Any, tmp_path: Path) -> None:
    rows = [{"prompt": "hi", "response": "yes."}, {"prompt": "hi " * 40, "response": "yes."}]
    path = str(_write(tmp_path / "rows.jsonl", rows))
    env = make_llm_env(_spec(dataset_path=path, train_test_split=1.0), tokenizer, max_context_length=32)
    assert len(env.train_rows) == 1 and env.stats.too_long == 1
    with pytest.raises(DatasetError, match="longer than max_context_length=4"):
        make_llm_env(_spec(dataset_path=path), tokenizer, max_context_length=4)


def test_seeded_split_order_and_shards(tokenizer: Any, tmp_path: Path) -> None:
    path = str(_write(tmp_path / "rows.jsonl", [{"prompt": r["question"], "response": r["answer"]} for r in ROWS]))

    def first_ids(seed: int, **kw: Any) -> list[list[int]]:
        env = make_llm_env(_spec(dataset_path=path, train_test_split=0.5), tokenizer, data_batch_size_per_gpu=5,
                           seed=seed, **kw)  # fmt: skip
        return [r.index for r in env.train_rows] + [env.next_batch()["input_ids"].sum().item()]

    assert first_ids(0) == first_ids(0)
    assert first_ids(0) != first_ids(1)
    shards = [make_llm_env(_spec(dataset_path=path, train_test_split=0.5), tokenizer, seed=0, rank=r, world_size=2)
              for r in range(2)]  # fmt: skip
    train = [{row.index for row in s.train_rows} for s in shards]
    test = [{row.index for row in s.test_rows} for s in shards]
    assert not train[0] & train[1] and len(train[0] | train[1]) == 10
    assert not test[0] & test[1] and len(test[0] | test[1]) == 10
    with pytest.raises(DatasetError, match="rank 5"):
        make_llm_env(_spec(dataset_path=path), tokenizer, rank=5, world_size=2)


def test_epochs_cover_every_row_and_resume_position(tokenizer: Any, tmp_path: Path) -> None:
    path = str(_write(tmp_path / "rows.jsonl", [{"prompt": r["question"], "response": r["answer"]} for r in ROWS]))
    env = make_llm_env(_spec(dataset_path=path, train_test_split=1.0), tokenizer, data_batch_size_per_gpu=4, seed=3)
    seen = [tuple(r) for _ in range(5) for r in env.next_batch()["input_ids"].tolist()]
    assert len(set(seen)) == 20  # one epoch (20 rows / 4) visits every row once
    state = env.state_dict()
    after = env.next_batch()
    twin = make_llm_env(_spec(dataset_path=path, train_test_split=1.0), tokenizer, data_batch_size_per_gpu=4, seed=3)
    twin.load_state_dict(state)
    assert torch.equal(twin.next_batch()["input_ids"], after["input_ids"])


def test_missing_chat_template_and_uncached_hub_id(tiny_model_factory: Any, tmp_path: Path) -> None:
    plain = load_tokenizer(tiny_model_factory("plain", chat_template=None))
    path = str(_write(tmp_path / "rows.jsonl", [{"prompt": "a", "response": "b"}]))
    with pytest.raises(ChatTemplateError, match="no chat template"):
        make_llm_env(_spec(dataset_path=path), plain)
    with pytest.raises(DatasetError, match="local Hugging Face cache"):
        make_llm_env(_spec(hf_dataset_id="agilerl-tests/no-such-dataset", apply_chat_template=False), plain)


def test_hf_dataset_id_from_the_local_hub_cache(
    tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset snapshot in the hub cache (as `huggingface-cli download --repo-type dataset` leaves it)."""
    import huggingface_hub.constants as hub

    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "datasets--agilerl-tests--tiny-sft"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(sha)
    snapshot = repo / "snapshots" / sha / "data"
    snapshot.mkdir(parents=True)
    _write(snapshot / "train.jsonl", [{"prompt": r["question"], "response": r["answer"]} for r in ROWS])
    _write(snapshot / "test.jsonl", [{"prompt": "held", "response": "out"}])
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    env = make_llm_env(_spec(hf_dataset_id="agilerl-tests/tiny-sft", train_test_split=1.0), tokenizer)
    assert len(env.train_rows) == len(ROWS)
