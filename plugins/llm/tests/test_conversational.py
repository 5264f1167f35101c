"""Conversational datasets (TRL's message lists) in rollouts, SFT and DPO: rendered by the chat template,
never stringified; malformed conversations and missing templates are errors naming the row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl_plugin_llm.chat import ConversationError
from agilerl_plugin_llm.dataset.env import DatasetError, make_llm_env
from agilerl_plugin_llm.model import ChatTemplateError, load_tokenizer
from agilerl_plugin_llm.rollout.env import make_rollout_env_factory
from agilerl_plugin_llm.rollout.sources import RolloutSourceError
from agilerl_plugin_llm.specs import LLMEnvSpec

RUBRIC = Path(__file__).resolve().parents[3] / "examples" / "llm" / "say_word_rubric.py"


def _chat(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "be brief."}, {"role": "user", "content": f"what is {i} + 1?"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rollout(path: Path, **fields: Any) -> LLMEnvSpec:
    return LLMEnvSpec(env_type="rollout", dataset_path=str(path), rubric_file_path=str(RUBRIC), **fields)


def _prompt_text(tokenizer: Any, spec: LLMEnvSpec, seed: int = 0) -> tuple[str, list[int], Any]:
    factory, _ = make_rollout_env_factory(spec, tokenizer, seed=0)
    harness = factory()
    ids = harness.reset(seed=seed)
    return tokenizer.decode(ids), ids, harness


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "save_to_disk"])
def test_rollout_prompt_messages_are_rendered_by_the_chat_template(tokenizer: Any, tmp_path: Path, fmt: str) -> None:
    rows = [{"prompt": _chat(i), "answer": "eight"} for i in range(4)]
    if fmt == "jsonl":
        path = _jsonl(tmp_path / "rows.jsonl", rows)
    elif fmt == "parquet":
        import pandas as pd

        path = tmp_path / "rows.parquet"
        pd.DataFrame(rows).to_parquet(path)
    else:
        from datasets import Dataset

        path = tmp_path / "saved"
        Dataset.from_list(rows).save_to_disk(str(path))
    text, ids, harness = _prompt_text(tokenizer, _rollout(path, train_test_split=1.0))
    row = harness.env.row
    expected = tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    assert text == expected  # the system message kept, the generation prompt added, nothing stringified
    assert ids == tokenizer(expected, add_special_tokens=False)["input_ids"]
    assert "'role'" not in text and "be brief." in text and text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_standard_prompts_still_render_as_one_user_message(tokenizer: Any, tmp_path: Path, fmt: str) -> None:
    rows = [{"prompt": "say eight", "answer": "eight"}]
    if fmt == "jsonl":
        path = _jsonl(tmp_path / "rows.jsonl", rows)
    else:
        import pandas as pd

        path = tmp_path / "rows.csv"
        pd.DataFrame(rows).to_csv(path, index=False)
    text, _, harness = _prompt_text(tokenizer, _rollout(path))
    assert harness.env.row["answer"] == "eight"
    assert text == "<|im_start|>user\nsay eight<|im_end|>\n<|im_start|>assistant\n"


def test_a_list_of_plain_values_is_a_standard_column_a_prompt_template_formats(tokenizer: Any, tmp_path: Path) -> None:
    """Countdown's rows (AgileRL's grpo.yaml): ``question`` is a list of numbers, not a conversation."""
    path = _jsonl(tmp_path / "rows.jsonl", [{"question": [1, 2, 3], "answer": "6"}])
    text, _, _ = _prompt_text(tokenizer, _rollout(path, prompt_template={"user_0": "Use {question}"}))
    assert text == "<|im_start|>user\nUse [1, 2, 3]<|im_end|>\n<|im_start|>assistant\n"
    from agilerl_plugin_llm.check_data import chat_row_problem

    assert chat_row_problem({"question": [1, 2, 3], "answer": "6"}, "rollout") is None  # validation agrees
    assert "not a {role, content}" in str(chat_row_problem({"prompt": [{"content": "a"}]}, "rollout"))


@pytest.mark.parametrize(
    ("prompt", "needle"),
    [
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "messages 0 and 1 are both user"),
        ([{"role": "bot", "content": "a"}], "role 'bot'"),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], "system message after the start"),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "ends with a assistant"),
        ([{"content": "a"}], "not a {role, content}"),
    ],
)
def test_rollout_malformed_conversation_names_the_row(tokenizer: Any, tmp_path: Path, prompt: Any, needle: str) -> None:
    rows = [{"prompt": _chat(0), "answer": "x"}, {"prompt": prompt, "answer": "x"}]
    path = _jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(RolloutSourceError, match="row 1 column 'prompt'") as info:
        make_rollout_env_factory(_rollout(path), tokenizer, seed=0)
    assert needle in str(info.value)


def test_rollout_conversation_without_a_chat_template_is_an_error(tiny_model_factory: Any, tmp_path: Path) -> None:
    plain = load_tokenizer(tiny_model_factory("plain", chat_template=None))
    path = _jsonl(tmp_path / "rows.jsonl", [{"prompt": _chat(0), "answer": "x"}])
    with pytest.raises(Exception, match="no chat template"):
        make_rollout_env_factory(_rollout(path), plain, seed=0)
    with pytest.raises(RolloutSourceError, match="apply_chat_template: row 0's prompt is a list of messages"):
        make_rollout_env_factory(_rollout(path, apply_chat_template=False), plain, seed=0)
    with pytest.raises(RolloutSourceError, match="prompt_template"):
        make_rollout_env_factory(_rollout(path, prompt_template={"user_0": "{question}"}), plain, seed=0)


def test_csv_cell_holding_a_json_message_list_is_refused(tokenizer: Any, tmp_path: Path) -> None:
    import pandas as pd

    path = tmp_path / "rows.csv"
    pd.DataFrame([{"prompt": json.dumps(_chat(0)), "answer": "x"}]).to_csv(path, index=False)
    with pytest.raises(RolloutSourceError, match="text holding a JSON list of messages"):
        make_rollout_env_factory(_rollout(path), tokenizer, seed=0)


# --- SFT and DPO ---------------------------------------------------------------------------------


def _dataset(path: Path, **fields: Any) -> LLMEnvSpec:
    return LLMEnvSpec(env_type="dataset", dataset_path=str(path), train_test_split=1.0, **fields)


def _trained_text(tokenizer: Any, ids: torch.Tensor, mask: torch.Tensor) -> str:
    return str(tokenizer.decode(ids[mask.bool()]))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "save_to_disk"])
def test_sft_prompt_completion_message_lists_train_on_the_completion_only(
    tokenizer: Any, tmp_path: Path, fmt: str
) -> None:
    rows = [{"prompt": _chat(i), "completion": [{"role": "assistant", "content": f"{i + 1}."}]} for i in range(3)]
    if fmt == "jsonl":
        path = _jsonl(tmp_path / "rows.jsonl", rows)
    elif fmt == "parquet":
        import pandas as pd

        path = tmp_path / "rows.parquet"
        pd.DataFrame(rows).to_parquet(path)
    else:
        from datasets import Dataset

        path = tmp_path / "saved"
        Dataset.from_list(rows).save_to_disk(str(path))
    env = make_llm_env(_dataset(path), tokenizer, seed=0)
    batch = env.collate([r for r in env.train_rows if r.index == 2])
    full = tokenizer.apply_chat_template([*_chat(2), {"role": "assistant", "content": "3."}], tokenize=False)
    assert tokenizer.decode(batch["input_ids"][0]) == full
    assert _trained_text(tokenizer, batch["input_ids"][0], batch["loss_mask"][0]) == "3.<|im_end|>"


def test_dpo_message_lists_with_and_without_a_shared_prompt(tokenizer: Any, tmp_path: Path) -> None:
    def answer(text: str) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": text}]

    explicit = [{"prompt": _chat(i), "chosen": answer("yes."), "rejected": answer("no.")} for i in range(3)]
    implicit = [{"chosen": _chat(i) + answer("yes."), "rejected": _chat(i) + answer("no.")} for i in range(3)]
    batches = []
    for name, rows in (("explicit", explicit), ("implicit", implicit)):
        env = make_llm_env(_dataset(_jsonl(tmp_path / f"{name}.jsonl", rows), objective="preference"), tokenizer)
        batch = env.collate(sorted(env.train_rows, key=lambda r: r.index))
        ids, mask = batch["input_ids"][0], batch["loss_mask"][0]
        assert _trained_text(tokenizer, ids[0], mask[0]) == "yes.<|im_end|>"
        assert _trained_text(tokenizer, ids[1], mask[1]) == "no.<|im_end|>"
        assert "be brief." in tokenizer.decode(ids[0])
        batches.append(batch)
    assert torch.equal(batches[0]["input_ids"], batches[1]["input_ids"])  # the implicit prompt is the same prompt


def test_dataset_conversations_are_checked_and_never_flattened(tokenizer: Any, tiny_model_factory: Any,
                                                               tmp_path: Path) -> None:  # fmt: skip
    bad = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
           {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                         {"role": "assistant", "content": "c"}]}]  # fmt: skip
    with pytest.raises(ConversationError, match="row 1 column 'messages': messages 1 and 2 are both assistant"):
        make_llm_env(_dataset(_jsonl(tmp_path / "bad.jsonl", bad)), tokenizer)
    good = _jsonl(tmp_path / "good.jsonl", bad[:1])
    with pytest.raises(DatasetError, match="row 0 column 'messages' is a list of messages"):
        make_llm_env(_dataset(good, apply_chat_template=False), tokenizer)
    plain = load_tokenizer(tiny_model_factory("plain", chat_template=None))
    with pytest.raises(ChatTemplateError, match="no chat template"):
        make_llm_env(_dataset(good), plain)


def test_validation_names_the_line_of_a_malformed_conversation_and_the_missing_template(
    tiny_model_factory: Any, tmp_path: Path, write_manifest: Any, run_cli: Any
) -> None:
    rows = [{"prompt": _chat(0), "completion": [{"role": "assistant", "content": "1."}]},
            {"prompt": _chat(1), "completion": [{"role": "robot", "content": "2."}]}]  # fmt: skip
    data = _jsonl(tmp_path / "rows.jsonl", rows)
    manifest = {
        "apiVersion": "agilerl.com/v1",
        "algorithm": {"name": "SFT", "batch_size": 2},
        "network": {"pretrained_model_name_or_path": str(tiny_model_factory("plain", chat_template=None))},
        "environment": {"env_type": "dataset", "dataset_path": str(data)},
        "training": {"max_steps": 1, "run_dir": str(tmp_path / "run")},
    }
    code, out, err = run_cli("validate", write_manifest(manifest))
    text = out + err
    assert code != 0
    assert f"{data}:2: column 'completion': message 0 has role 'robot'" in text
    assert "environment.chat_template_path" in text and "no chat template to render them" in text


def test_build_tiny_model_cli_can_leave_the_chat_template_out(tmp_path: Path) -> None:
    from agilerl_plugin_llm.check_data import has_chat_template
    from agilerl_plugin_llm.testing import main

    assert main(["build-tiny-model", str(tmp_path / "plain"), "--no-chat-template"]) == 0
    assert main(["build-tiny-model", str(tmp_path / "chat")]) == 0
    assert not has_chat_template(tmp_path / "plain") and not load_tokenizer(tmp_path / "plain").chat_template
    assert has_chat_template(tmp_path / "chat") and load_tokenizer(tmp_path / "chat").chat_template
