"""Rollout sources: exactly one per env, the plugin hook (a third-party source), and bad input
(rubric files, entrypoints, a missing OpenEnv plugin) reported clearly before training starts."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agilerl import hookimpl, plugins
from agilerl_plugin_llm.model import load_tokenizer
from agilerl_plugin_llm.rollout.env import make_rollout_env_factory
from agilerl_plugin_llm.rollout.sources import RolloutSourceError, build_source, rollout_sources, select_source
from agilerl_plugin_llm.specs import LLMEnvSpec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"
DATA = str(EXAMPLES / "say_eight.jsonl")
RUBRIC = str(EXAMPLES / "say_word_rubric.py")


def rollout_spec(**fields: Any) -> LLMEnvSpec:
    return LLMEnvSpec(env_type="rollout", **fields)


def test_builtin_sources_are_registered_through_the_plugin_hook() -> None:
    table = rollout_sources()
    assert {"dataset_path", "hf_dataset_id", "dataset", "entrypoint"} <= set(table)
    assert table["entrypoint"].provider == "llm"


def test_dataset_rows_and_rubric_make_single_turn_envs() -> None:
    make_env, turns, field = build_source(rollout_spec(dataset_path=DATA, rubric_file_path=RUBRIC), seed=0)
    assert (turns, field) == (1, "dataset_path")
    env = make_env()
    question, _info = env.reset(seed=5)
    assert "magic number" in question
    _, reward, terminated, _, _ = env.step("eight eight")
    assert reward == 1.0 and terminated
    assert env.step("cat")[1] == 0.0


def test_train_and_held_out_rows_do_not_overlap() -> None:
    spec = rollout_spec(dataset_path=DATA, rubric_file_path=RUBRIC, train_test_split=0.75)
    train = build_source(spec, seed=0, split="train")[0]()
    test = build_source(spec, seed=0, split="test")[0]()
    assert len(train.rows) == 36 and len(test.rows) == 12
    assert not {id(r) for r in train.rows} & {id(r) for r in test.rows}


def test_prompt_template_renders_system_and_user_messages(tiny_model_dir: Path) -> None:
    spec = rollout_spec(
        dataset_path=DATA,
        rubric_file_path=RUBRIC,
        prompt_template={"system_0": "Answer with {answer}.", "user_1": "Q: {question}", "assistant_2": "A:"},
    )
    factory, _ = make_rollout_env_factory(spec, load_tokenizer(tiny_model_dir), max_model_len=256)
    h = factory()
    text = h.tokenizer.decode(h.reset(seed=0))
    assert text.startswith("<|im_start|>system\nAnswer with eight.<|im_end|>\n<|im_start|>user\nQ: ")
    assert text.endswith("<|im_start|>assistant\nA:")


def test_exactly_one_source() -> None:
    with pytest.raises(RolloutSourceError, match="exactly one source; set one of"):
        select_source(rollout_spec())
    with pytest.raises(RolloutSourceError, match="exactly one source, got dataset_path, entrypoint"):
        select_source(rollout_spec(dataset_path=DATA, rubric_file_path=RUBRIC, entrypoint="x:Y"))


@pytest.fixture
def without_openenv(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AGILERL_DISABLE_PLUGINS", "openenv")
    plugins.reset()
    yield
    monkeypatch.delenv("AGILERL_DISABLE_PLUGINS")
    plugins.reset()


def test_env_url_without_the_openenv_plugin_says_what_to_install(without_openenv: None) -> None:
    with pytest.raises(RolloutSourceError, match="pip install agilerl-plugin-openenv"):
        select_source(rollout_spec(env_url="http://127.0.0.1:9/"))


class CountdownEnv:
    """A third-party text env: counts down from ``start``; reward 1 per reply containing the number."""

    def __init__(self, start: int) -> None:
        self.start = self.n = start

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.n = self.start
        return f"say {self.n}", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        reward = float(str(self.n) in action)
        self.n -= 1
        return f"say {self.n}", reward, self.n == 0, False, {}


class CountdownSourcePlugin:
    """A plugin adding a rollout source selected by the ``name`` field ("countdown-<n>")."""

    @staticmethod
    def build(spec: Any, *, seed: int | None = None) -> tuple[Callable[[], CountdownEnv], int]:
        start = int(spec.name.rsplit("-", 1)[1])
        return (lambda: CountdownEnv(start)), start

    @hookimpl
    def agilerl_llm_register_rollout_sources(self, register: Any) -> None:
        register("name", self.build)


def test_a_plugin_adds_a_rollout_source_through_the_hook(
    register_plugin: Callable[..., str], tiny_model_dir: Path
) -> None:
    register_plugin(CountdownSourcePlugin(), name="countdown")
    assert rollout_sources()["name"].provider == "countdown"
    factory, turns = make_rollout_env_factory(
        rollout_spec(name="countdown-3"), load_tokenizer(tiny_model_dir), max_output_tokens=4
    )
    assert turns == 3
    h1, h2 = factory(), factory()
    assert h1.env is not h2.env  # independent envs
    h1.reset()
    tok = h1.tokenizer
    rewards = [h1.step(tok(f" {n}", add_special_tokens=False)["input_ids"]) for n in (3, 9, 1)]
    assert rewards == [1.0, 0.0, 1.0] and h1.trajectory().terminated


@pytest.mark.parametrize("field", ["reward_model", "reward_funcs"])
def test_batched_reward_sources_are_refused_on_a_plugin_source_when_it_is_built(
    register_plugin: Callable[..., str], tiny_model_dir: Path, tmp_path: Path, field: str
) -> None:
    """A reward model or reward_funcs score dataset rows' completions; a plugin's env scores its own
    replies, so building it with either is an error naming the field (not a silently unused field)."""
    register_plugin(CountdownSourcePlugin(), name="countdown")
    value: Any = str(tmp_path) if field == "reward_model" else ["r.py:f"]
    with pytest.raises(RolloutSourceError, match=f"environment.{field}: scores dataset rows"):
        make_rollout_env_factory(rollout_spec(name="countdown-3", **{field: value}), load_tokenizer(tiny_model_dir))


# --- bad input through `agilerl train`: clear errors, before any training ---------------------------


def bad_manifest(model_dir: Path, run_dir: Path, **env: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "max_output_tokens": 4},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 64},
        "environment": {"env_type": "rollout", **env},
        "training": {"max_steps": 2, "progress": False, "run_dir": str(run_dir)},
    }


@pytest.mark.parametrize(
    ("rubric", "name", "expected"),
    [
        (
            "def score(completion, answer, question):\n    return 1.0\n",
            None,
            r"has no top-level 'reward_fn' \(it defines score\)",  # found at validation, by reading the file
        ),
        ("def reward_fn(completion, answer, question):\n    return 'good'\n", None, "must give a number.*str 'good'"),
        ("def reward_fn(completion, answer, question):\n    return None\n", None, "must give a number.*NoneType"),
        ("def reward_fn(completion):\n    return 1.0\n", None, r"reward_fn\(completion\) takes 1 argument"),
        ("reward_fn = 3\n", None, "reward_fn is bound to a constant value, not a function"),
        ("def reward_fn(c, a, q):\n    return 1.0\n", "rubric", "has no top-level 'rubric'"),
    ],
)
def test_bad_rubric_is_a_clear_error_before_training(
    rubric: str,
    name: str | None,
    expected: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any],
) -> None:
    (tmp_path / "rubric.py").write_text(rubric)
    env: dict[str, Any] = {"dataset_path": DATA, "rubric_file_path": str(tmp_path / "rubric.py")}
    if name:
        env["rubric_name"] = name
    code, _out, err = run_cli("train", write_manifest(bad_manifest(tiny_model_dir, tmp_path / "run", **env)))
    assert code == 1
    assert "environment.rubric_name" in err
    assert re.search(expected, err), err
    assert "Traceback" not in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"dataset_path": DATA, "rubric_file_path": "no/such/rubric.py"}, "rubric_file_path: no such file"),
        ({"dataset_path": DATA}, "rubric_file_path: required with dataset rows"),
        ({"dataset_path": "missing.jsonl", "rubric_file_path": RUBRIC}, "dataset_path: no such file"),
        (
            {"entrypoint": f"{EXAMPLES / 'two_turn_env.py'}:NoSuchEnv"},
            r"has no attribute 'NoSuchEnv' \(callables there: TwoTurnEnv\)",
        ),
        (
            {"entrypoint": "json:dumps", "env_config": {}},
            r"creating 'json:dumps' with env_config \{\} failed: TypeError",
        ),
        ({"entrypoint": "collections:OrderedDict"}, "which has no reset or step"),
        (
            {"dataset_path": DATA, "rubric_file_path": RUBRIC, "prompt_template": {"user_1": "{nope}"}},
            "no column 'nope'",
        ),
    ],
)
def test_bad_source_is_a_clear_error_before_training(
    env: dict[str, Any],
    expected: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any],
) -> None:
    code, out, err = run_cli("train", write_manifest(bad_manifest(tiny_model_dir, tmp_path / "run", **env)))
    assert code == 1, out + err
    assert re.search(expected, err), err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"dataset_path": DATA, "rubric_file_path": RUBRIC, "entrypoint": "a:B"},
            "exactly one source, got dataset_path, entrypoint",
        ),
        ({"name": "nothing"}, "needs exactly one source; set one of dataset, dataset_path, entrypoint, env_url"),
    ],
)
def test_agilerl_validate_reports_the_source_problem(
    env: dict[str, Any],
    expected: str,
    tiny_model_dir: Path,
    write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any],
) -> None:
    manifest = {
        "algorithm": {"name": "GRPO"},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir)},
        "environment": {"env_type": "rollout", **env},
    }
    code, out, err = run_cli("validate", write_manifest(manifest))
    assert code == 1
    assert expected in out + err


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"env_packages": {"pip": ["gem"]}},
            "environment.env_packages: installing packages at run time is not supported",
        ),
        ({"mcp_tool": "answer"}, "environment.mcp_tool: only applies to env_url (OpenEnv) sources"),
        ({"strict_chat_template_boundary": False}, "environment.strict_chat_template_boundary: turn boundaries"),
    ],
)
def test_fields_a_source_would_ignore_fail_validation(
    env: dict[str, Any],
    expected: str,
    tiny_model_dir: Path,
    write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any],
) -> None:
    manifest = {
        "algorithm": {"name": "LLMREINFORCE"},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir)},
        "environment": {"env_type": "rollout", "entrypoint": f"{EXAMPLES / 'two_turn_env.py'}:TwoTurnEnv", **env},
    }
    code, out, err = run_cli("validate", write_manifest(manifest))
    assert code == 1
    assert expected in out + err
    with pytest.raises(RolloutSourceError, match=expected.split(": ")[0]):
        build_source(rollout_spec(entrypoint=f"{EXAMPLES / 'two_turn_env.py'}:TwoTurnEnv", **env))


def _countdown_rows(tmp_path: Path) -> str:
    """AgileRL's countdown layout: the dataset's columns are ``nums`` and ``target``."""
    path = tmp_path / "countdown.jsonl"
    path.write_text('{"nums": "use 3 and 5", "target": "eight"}\n{"nums": "use 2 and 6", "target": "eight"}\n')
    return str(path)


@pytest.mark.parametrize(
    "columns", [{"nums": "question", "target": "answer"}, {"question": "nums", "answer": "target"}]
)
def test_columns_read_as_agilerl_writes_them_dataset_column_to_role(tmp_path: Path, columns: dict[str, str]) -> None:
    """AgileRL's ``{nums: question, target: answer}`` (dataset column: role); the reverse is accepted too."""
    spec = rollout_spec(dataset_path=_countdown_rows(tmp_path), rubric_file_path=RUBRIC, columns=columns)
    make_env, _, _ = build_source(spec, seed=0)
    env = make_env()
    question, _info = env.reset(seed=1)
    assert "use " in question and " and " in question  # the nums column is the question
    assert env.step("eight")[1] == 1.0  # and target is the answer the rubric gets


def test_a_columns_mapping_naming_no_dataset_column_is_refused(tmp_path: Path) -> None:
    spec = rollout_spec(
        dataset_path=_countdown_rows(tmp_path), rubric_file_path=RUBRIC, columns={"numbers": "question"}
    )
    with pytest.raises(RolloutSourceError, match=r"neither 'numbers' nor 'question' is a column.*\{nums: question"):
        build_source(spec, seed=0)[0]()
