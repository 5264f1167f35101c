"""Batched reward functions the TRL way (environment.reward_funcs): how they are called, what reaches
them, bad input named by function and row, validation, and a GRPO run scored by them."""

from __future__ import annotations

import json
import math
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agilerl.models import load_manifest
from agilerl_plugin_llm.rollout.reward_funcs import (
    RewardFunc,
    RewardFunctionError,
    call_reward_funcs,
    load_reward_funcs,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"
DATA = str(EXAMPLES / "say_eight.jsonl")

REWARDS = """
import math

SEEN = {}

def says_answer(prompts, completions, completion_ids, answer, **kwargs):
    SEEN.update(prompts=prompts, completions=completions, completion_ids=completion_ids, answer=answer, **kwargs)
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]

def short(completions, **kwargs):
    return [None if len(c) > 3 else 0.5 for c in completions]

async def async_len(completions, **kwargs):
    return [float(len(c)) for c in completions]

def none_at_all(completions, **kwargs):
    return [None] * len(completions)

def strings(completions, **kwargs):
    return ["1.0"] * len(completions)

def too_few(completions, **kwargs):
    return [1.0]

def nan_second(completions, **kwargs):
    return [0.0, math.nan][: len(completions)] + [0.0] * (len(completions) - 2)

def boom(completions, **kwargs):
    raise KeyError("answer")

def no_completions(prompts):
    return [0.0] * len(prompts)

CALLS = [0]

def flaky(completions, **kwargs):
    CALLS[0] += 1
    if CALLS[0] == 3:
        raise RuntimeError("the grader is down")
    return [0.0] * len(completions)

def eight(completions, **kwargs):
    return [float(c.count("eight")) / max(len(c.split()), 1) for c in completions]
"""


@pytest.fixture
def rewards_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module of reward functions in the working directory, importable as ``my_rewards``."""
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(REWARDS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_rewards"
    sys.modules.pop("my_rewards", None)


def kwargs(**extra: Any) -> dict[str, Any]:
    return {"prompts": ["p0", "p1"], "completions": ["eight", "a long reply"], "completion_ids": [[1], [2, 3]],
            "answer": ["eight", "nine"], **extra}  # fmt: skip


def test_functions_are_called_batched_with_every_column_and_weighted(rewards_module: str) -> None:
    funcs = load_reward_funcs([f"{rewards_module}:says_answer", f"{rewards_module}:short",
                               f"{rewards_module}:async_len"], [2.0, 1.0, 0.1])  # fmt: skip
    rewards, parts = call_reward_funcs(funcs, kwargs(level=["easy", "hard"]))
    seen = sys.modules[rewards_module].SEEN
    assert seen["level"] == ["easy", "hard"] and seen["completion_ids"] == [[1], [2, 3]]
    # short() says None (not applicable) to both: row 0 is 2*1 + 0.1*5, row 1 is 2*0 + 0.1*12
    assert rewards == pytest.approx([2.5, 1.2])
    assert parts[1] == {"says_answer": 0.0, "short": None, "async_len": 12.0}


def test_a_row_every_function_skips_scores_zero_as_trl(rewards_module: str, caplog: pytest.LogCaptureFixture) -> None:
    funcs = load_reward_funcs([f"{rewards_module}:none_at_all"])
    rewards, _ = call_reward_funcs(funcs, kwargs())
    assert rewards == [0.0, 0.0]
    assert "every reward function returned None for 2 of 2" in caplog.text


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("strings", "reward function strings returned '1.0' (str) for row 0 (prompt 'p0'); rewards are numbers"),
        ("too_few", "reward function too_few returned 1 values for 2 completions"),
        ("nan_second", "reward function nan_second returned nan for row 1 (prompt 'p1'); rewards must be finite"),
        ("boom", "reward function boom raised KeyError: 'answer'"),
    ],
)
def test_a_bad_call_names_the_function_and_the_row(rewards_module: str, name: str, message: str) -> None:
    funcs = load_reward_funcs([f"{rewards_module}:{name}"])
    with pytest.raises(RewardFunctionError) as exc:
        call_reward_funcs(funcs, kwargs())
    assert message in str(exc.value)


def test_loading_refuses_what_cannot_be_imported_or_called(rewards_module: str) -> None:
    with pytest.raises(RewardFunctionError, match=r"reward_funcs\[0\]: cannot import module 'nope'"):
        load_reward_funcs(["nope:f"])
    with pytest.raises(RewardFunctionError, match=r"missing"):
        load_reward_funcs([f"{rewards_module}:missing"])
    with pytest.raises(RewardFunctionError, match="takes no 'completions' argument"):
        load_reward_funcs([f"{rewards_module}:no_completions"])


def test_a_module_in_the_working_directory_imports_without_being_on_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `python -m` would: the working directory is searched first, though nothing put it on sys.path."""
    (tmp_path / "cwd_rewards.py").write_text("def ones(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_rewards", raising=False)
    try:
        (func,) = load_reward_funcs(["cwd_rewards:ones"])
        assert func.name == "ones" and call_reward_funcs([func], kwargs())[0] == [1.0, 1.0]
    finally:
        sys.modules.pop("cwd_rewards", None)


def test_a_function_without_kwargs_gets_only_what_it_names() -> None:
    def exact(completions: list[str], answer: list[str]) -> list[float]:
        return [float(c == a) for c, a in zip(completions, answer, strict=True)]

    rewards, _ = call_reward_funcs([RewardFunc("exact", 1.0, exact)], kwargs())
    assert rewards == [1.0, 0.0]


def manifest(model_dir: Path, run_dir: Path, env: dict[str, Any], **algo: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "lr": 0.01, "beta": 0.0,
                      "max_output_tokens": 6, "temperature": 1.0, "gradient_checkpointing": False, **algo},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
        "environment": {"env_type": "rollout", "dataset_path": DATA, **env},
        "training": {"max_steps": 2, "evo_steps": 2, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }  # fmt: skip


def _problems(data: dict[str, Any]) -> list[str]:
    from agilerl.errors import ManifestError
    from agilerl.models import validate_manifest

    try:
        validate_manifest(data)
    except ManifestError as exc:
        return [str(p) for p in exc.problems]
    return []


def test_validation_checks_the_functions_import_and_can_be_called(
    rewards_module: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    bad = manifest(tiny_model_dir, tmp_path / "run", {"reward_funcs": ["nope:f", f"{rewards_module}:no_completions"]})
    text = "\n".join(_problems(bad))
    assert "environment.reward_funcs[0]: cannot import module 'nope'" in text
    assert "environment.reward_funcs[1]: no_completions(prompts) takes no 'completions' argument" in text
    weights = manifest(tiny_model_dir, tmp_path / "run", {"reward_funcs": [f"{rewards_module}:eight"],
                                                           "reward_weights": [1.0, 2.0]})  # fmt: skip
    assert "reward_weights has 2 weights for 1 reward function(s) in reward_funcs" in "\n".join(_problems(weights))
    both = manifest(
        tiny_model_dir,
        tmp_path / "run",
        {"reward_funcs": [f"{rewards_module}:eight"], "rubric_file_path": str(EXAMPLES / "say_word_rubric.py")},
    )
    assert "keep one way of scoring" in "\n".join(_problems(both))
    good = manifest(tiny_model_dir, tmp_path / "run", {"reward_funcs": [f"{rewards_module}:eight"]})
    assert _problems(good) == []


def test_grpo_trains_on_reward_funcs_and_logs_each_functions_value(
    rewards_module: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from agilerl.training.trainer import LocalTrainer

    env = {"reward_funcs": [f"{rewards_module}:eight", f"{rewards_module}:async_len", f"{rewards_module}:says_answer"],
           "reward_weights": [1.0, 0.0, 0.0]}  # fmt: skip
    m = load_manifest(manifest(tiny_model_dir, tmp_path / "run", env, log_completions_steps=1))
    LocalTrainer(m).train()
    seen = sys.modules[rewards_module].SEEN  # the last batch says_answer scored (the final evaluation's)
    n = len(seen["completions"])
    assert n >= 2 and len(seen["answer"]) == len(seen["question"]) == len(seen["completion_ids"]) == n
    assert seen["prompts"] == seen["question"]  # no prompt column: the user message (the question)
    rows = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows} == {0, 1} and len(rows) == 8  # every iteration, the whole batch of 4
    for r in rows:
        assert set(r["rewards"]) == {"eight", "async_len", "says_answer"}
        assert r["rewards"]["async_len"] == float(len(r["completion"]))  # the completion the function saw
        assert r["reward"] == pytest.approx(r["rewards"]["eight"])  # async_len weighs 0
        assert math.isfinite(r["advantage"])
        assert "<|im_start|>user" in r["prompt"]  # as the policy saw it: rendered by the chat template


def test_reward_funcs_are_code_under_the_trust_rule() -> None:
    from agilerl.trust import untrusted_references

    mine = {"environment": {"env_type": "rollout", "reward_funcs": ["my_rewards:eight"]}}
    assert untrusted_references(mine) == [("environment.reward_funcs", ["my_rewards:eight"])]
    shipped = {"environment": {"env_type": "rollout", "reward_funcs": ["agilerl_plugin_llm.rollout.rubrics.gsm8k:x"]}}
    assert untrusted_references(shipped) == []  # a loaded plugin's own module is registered code


def test_a_catalog_env_scored_by_reward_funcs_takes_no_rubric(rewards_module: str) -> None:
    from agilerl_plugin_llm.specs import LLMEnvSpec

    spec = LLMEnvSpec(env_type="rollout", name="gsm8k", reward_funcs=[f"{rewards_module}:eight"])
    assert spec.rubric_file_path is None and spec.prompt_template  # the catalog's rows and template stay


def test_a_reward_function_failing_mid_run_loses_nothing(
    rewards_module: str, tiny_model_dir: Path, tmp_path: Path, write_manifest: Any, run_cli: Any
) -> None:
    data = manifest(tiny_model_dir, tmp_path / "run", {"reward_funcs": [f"{rewards_module}:flaky"]})
    data["training"].update(max_steps=4, evo_steps=2)
    # calls: the step-0 evaluation, iteration 0, then iteration 1 fails
    code, out, err = run_cli("train", write_manifest(data))
    text = out + err
    assert code != 0 and "Traceback" not in text
    assert "reward function flaky raised RuntimeError: the grader is down" in text
    assert "checkpoint written to" in text and "Resume with:" in text
    code, out, err = run_cli("train", write_manifest(data), "--resume", str(tmp_path / "run"))
    assert code == 0, out + err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["steps"] for r in rows) == 4


def test_a_rubric_of_several_functions_logs_each_ones_value(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agilerl.training.trainer import LocalTrainer

    rubric = tmp_path / "rubric.py"
    rubric.write_text("def length(c, a, q):\n    return float(len(c))\n\ndef one(c, a, q):\n    return 1.0\n")
    env = {"rubric_file_path": str(rubric), "rubric_name": ["length", "one"], "reward_weights": [0.5, 2.0]}
    data = manifest(tiny_model_dir, tmp_path / "run", env)
    data["training"].update(max_steps=1, evo_steps=1)
    LocalTrainer(load_manifest(data)).train()
    rows = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    for r in rows:
        assert r["rewards"] == {"length": float(len(r["completion"])), "one": 1.0}
        assert r["reward"] == pytest.approx(0.5 * len(r["completion"]) + 2.0)


def test_a_conversational_prompt_gets_its_completions_as_messages_as_trl() -> None:
    from agilerl_plugin_llm.rollout.harness import Trajectory
    from agilerl_plugin_llm.rollout.reward_funcs import BatchReward

    seen: dict[str, Any] = {}

    def grade(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        seen.update(prompts=prompts, completions=completions, **kwargs)
        return [float(len(c[0]["content"])) for c in completions]

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say eight."}]
    row = {"prompt": messages, "completion": "eight", "columns": {"answer": "eight", "level": 2}}
    traj = Trajectory([5, 6, 7, 8], [0, 0, 1, 1], [-1, -1, 0, 0], [0.0], 2, True, False, info={"reward_row": row})
    BatchReward([RewardFunc("grade", 1.0, grade)], max_reward=5.0).score([traj])
    assert seen["prompts"] == [messages]
    assert seen["completions"] == [[{"role": "assistant", "content": "eight"}]]
    assert seen["completion_ids"] == [[7, 8]] and seen["answer"] == ["eight"] and seen["level"] == [2]
    assert traj.rewards == [5.0] and traj.info["rewards"] == {"grade": 5.0} and traj.info["success"] is True


def test_agilerl_completions_selects_the_last_steps_and_a_reward_floor(tmp_path: Path, run_cli: Any) -> None:
    rows = [{"step": s, "agent": 0, "prompt": f"p{s}", "completion": f"c{s}{i}", "reward": float(i), "advantage": 0.0}
            for s in (0, 10, 20) for i in range(2)]  # fmt: skip
    (tmp_path / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = run_cli("completions", str(tmp_path), "--last", "2", "--min-reward", "1")
    assert code == 0
    assert [line.split(" | ")[0] for line in out.splitlines() if line.startswith("===")] == [
        "=== step 10",
        "=== step 20",
    ]
    assert "c101" in out and "c201" in out and "c100" not in out


def test_a_step_logged_again_after_a_resume_shows_once() -> None:
    from agilerl_plugin_llm.rollout.completions_log import select

    first = [{"step": 0, "agent": 0, "completion": "a", "logged_at": 1.0},
             {"step": 1, "agent": 0, "completion": "b", "logged_at": 2.0}]  # fmt: skip
    again = [{"step": 1, "agent": 0, "completion": "b2", "logged_at": 3.0},
             {"step": 1, "agent": 0, "completion": "b3", "logged_at": 3.0}]  # fmt: skip
    assert [r["completion"] for r in select([*first, *again])] == ["a", "b2", "b3"]
