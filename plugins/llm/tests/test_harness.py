"""RolloutHarness: chat-template rendering, the provenance mask, the context limit, template errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agilerl_plugin_llm.model import load_tokenizer
from agilerl_plugin_llm.rollout.harness import ChatTemplateError, RolloutHarness


class Echo:
    """Two turns; the observation after turn 1 names the reply it got; reward = reply length."""

    system_prompt = "Be brief."

    def __init__(self, turns: int = 2) -> None:
        self.turns, self.turn = turns, 0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.turn = 0
        return f"first question {seed}", {"seed": seed}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        return "second question", float(len(action)), self.turn >= self.turns, False, {}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


def ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_single_turn_prompt_is_the_chat_template_and_only_the_reply_is_policy(tokenizer: Any) -> None:
    h = RolloutHarness(Echo(turns=1), tokenizer, max_turns=1, max_model_len=256, max_output_tokens=8)
    prompt = h.reset(seed=3)
    expected = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "first question 3"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert prompt == ids(tokenizer, expected)
    reply = [*ids(tokenizer, "the cat"), tokenizer.convert_tokens_to_ids("<|im_end|>")]
    reward = h.step(reply)
    traj = h.trajectory()
    assert h.done and traj.terminated and not traj.truncated
    assert reward == float(len("the cat")) and traj.rewards == [reward]
    assert traj.token_ids == prompt + reply
    assert traj.policy_mask == [0] * len(prompt) + [1] * len(reply)
    assert traj.turn_index == [-1] * len(prompt) + [0] * len(reply)


def test_two_turns_are_token_exact_and_mask_only_policy_tokens(tokenizer: Any) -> None:
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    h = RolloutHarness(Echo(turns=2), tokenizer, max_turns=2, max_model_len=256, max_output_tokens=16)
    h.reset(seed=1)
    first = [*ids(tokenizer, "one two"), im_end]
    second = [*ids(tokenizer, "three"), im_end]
    h.step(first)
    assert not h.done
    h.step(second)
    traj = h.trajectory()
    assert traj.terminated and traj.rewards == [7.0, 5.0]
    # The whole episode is exactly the chat template of the conversation, tokenised.
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first question 1"},
        {"role": "assistant", "content": "one two"},
        {"role": "user", "content": "second question"},
        {"role": "assistant", "content": "three"},
    ]
    full = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert traj.token_ids == ids(tokenizer, full.rstrip("\n"))
    # Policy tokens are exactly the two replies (with their end-of-turn marker), nothing else.
    policy = [t for t, m in zip(traj.token_ids, traj.policy_mask, strict=False) if m]
    assert policy == first + second
    assert [i for i, m in zip(traj.turn_index, traj.policy_mask, strict=False) if m] == [0] * len(first) + [1] * len(
        second
    )
    env_tokens = [t for t, m in zip(traj.token_ids, traj.policy_mask, strict=False) if not m]
    assert ids(tokenizer, "second question")[0] in env_tokens


def test_reply_cut_without_end_marker_gets_the_marker_as_env_token(tokenizer: Any) -> None:
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    h = RolloutHarness(Echo(turns=2), tokenizer, max_turns=2, max_model_len=256, max_output_tokens=4)
    prompt = h.reset(seed=0)
    reply = ids(tokenizer, "one two three four five")[:4]
    h.step(reply)
    after = h.context()[len(prompt) + len(reply) :]
    assert after[0] == im_end  # the template closes the turn; the policy did not write it
    assert h.policy_mask[len(prompt) + len(reply)] == 0


def test_context_limit_truncates_cleanly(tokenizer: Any) -> None:
    h = RolloutHarness(Echo(turns=5), tokenizer, max_turns=5, max_model_len=40, max_output_tokens=8)
    h.reset(seed=0)
    turns = 0
    while not h.done:
        budget = h.generation_budget()
        assert budget >= 1
        h.step(ids(tokenizer, "the cat the cat the cat the cat")[:budget])
        turns += 1
    traj = h.trajectory()
    assert traj.truncated and not traj.terminated
    assert len(traj.token_ids) <= 40
    assert turns < 5
    assert traj.policy_mask[-1] == 1  # no dangling env tokens after the last reply


def test_prompt_longer_than_context_is_truncated_before_generating(tokenizer: Any) -> None:
    h = RolloutHarness(Echo(), tokenizer, max_turns=2, max_model_len=5, max_output_tokens=8)
    h.reset(seed=0)
    assert h.done and h.truncated and h.generation_budget() == 0
    assert h.no_room  # collect() refuses a batch of such prompts, naming both numbers (issue 30)


def test_max_turns_truncates_a_longer_env(tokenizer: Any) -> None:
    h = RolloutHarness(Echo(turns=3), tokenizer, max_turns=1, max_model_len=256, max_output_tokens=8)
    h.reset()
    h.step(ids(tokenizer, "yes"))
    assert h.done and h.truncated and not h.terminated


def test_missing_chat_template_is_a_clear_error(tiny_model_factory: Any, tmp_path: Path) -> None:
    path = tiny_model_factory("no-template", chat_template=None)
    tok = load_tokenizer(path)
    with pytest.raises(ChatTemplateError, match="chat_template_path"):
        RolloutHarness(Echo(), tok)
    # Plain text works without a template ...
    h = RolloutHarness(Echo(turns=1), tok, apply_chat_template=False, max_model_len=64)
    prompt = h.reset(seed=2)
    assert tok.decode(prompt, skip_special_tokens=True) == "Be brief.\n\nfirst question 2"
    # ... and so does a template from a file.
    template = tmp_path / "t.jinja"
    template.write_text(
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    tok2 = load_tokenizer(path, chat_template_path=template)
    h2 = RolloutHarness(Echo(turns=1), tok2, max_model_len=64)
    assert tok2.decode(h2.reset(seed=2)).endswith("[user] first question 2\n[assistant] ")


def test_a_reply_cut_at_the_token_budget_marks_the_completion_cut_off(tokenizer: Any) -> None:
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    finished = RolloutHarness(Echo(turns=1), tokenizer, max_turns=1, max_model_len=256, max_output_tokens=8)
    finished.reset(seed=0)
    finished.step([*ids(tokenizer, "the cat"), end])
    cut = RolloutHarness(Echo(turns=1), tokenizer, max_turns=1, max_model_len=256, max_output_tokens=2)
    cut.reset(seed=0)
    cut.step(ids(tokenizer, "the cat sat on the mat")[:2])  # the budget ran out before a stop token
    a, b = finished.trajectory(), cut.trajectory()
    # A single-turn env terminates either way: the episode is never "truncated", the completion may be.
    assert (a.terminated, a.truncated, a.cut_off) == (True, False, False)
    assert (b.terminated, b.truncated, b.cut_off) == (True, False, True)


def test_train_truncated_counts_completions_cut_at_the_budget(tiny_model_dir: Path) -> None:
    from agilerl.models import load_manifest
    from agilerl.strategies import select_strategy
    from agilerl_plugin_llm.rollout.grpo import GRPO

    examples = Path(__file__).resolve().parents[3] / "examples" / "llm"
    m = load_manifest({
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "max_output_tokens": 3, "beta": 0.0,
                      "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "max_context_length": 128},
        "environment": {"env_type": "reasoning", "dataset_path": str(examples / "say_eight.jsonl"),
                        "rubric_file_path": str(examples / "say_word_rubric.py")},
    })  # fmt: skip
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = GRPO(m.algorithm, tokenizer=envs.tokenizer)
    trajs = agent.rollout(envs.make_train, [1, 1, 2, 2])
    stats = agent.learn_iteration(envs)
    expected = sum(t.cut_off for t in trajs) / len(trajs)
    assert 0.0 <= stats["truncated"] <= 1.0 and stats["episode_truncated"] == 0.0
    # An untrained tiny model rarely writes <|im_end|> within 3 tokens: most completions are cut.
    assert expected > 0.5 and stats["truncated"] > 0.5
