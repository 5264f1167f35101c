"""Errors that help: other libraries' names get our name as the hint; what a run will read is checked
at validation, cheaply (no torch, no pandas)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agilerl.errors import ManifestError
from agilerl.models import validate_manifest


def _problems(manifest: dict[str, object]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate_manifest(manifest)
    return [str(p) for p in info.value.problems]


@pytest.mark.parametrize(
    ("algo", "key", "ours"),
    [
        ("PPO", "learning_rate", "lr"),
        ("PPO", "n_steps", "learn_step"),
        ("PPO", "n_epochs", "update_epochs"),
        ("PPO", "entropy_coef", "ent_coef"),
        ("PPO", "ent_coeff", "ent_coef"),
        ("PPO", "clip_range", "clip_coef"),
        ("PPO", "log_std_init", "action_std_init"),
        ("DQN", "buffer_size", "replay_buffer.max_size"),
        ("DQN", "learning_starts", "training.learning_delay"),
        ("TD3", "policy_delay", "policy_freq"),
        ("DDPG", "critic_lr", "lr_critic"),
        ("IPPO", "vf_coeff", "vf_coef"),
        ("NeuralUCB", "learning_rate", "lr"),
        ("GRPO", "max_completion_length", "max_output_tokens"),
        ("GRPO", "per_device_train_batch_size", "micro_batch_size_per_gpu"),
        ("GRPO", "gradient_accumulation_steps", "mini_batch_size"),
        ("GRPO", "epsilon", "clip_coef"),
    ],
)
def test_neighbours_vocabulary_gets_our_name(algo: str, key: str, ours: str) -> None:
    env = {"name": "CartPole-v1"} if algo in {"PPO", "DQN", "TD3", "DDPG"} else {"name": "x"}
    problems = _problems({"algorithm": {"name": algo, key: 1}, "environment": env})
    assert f"algorithm.{key}: unknown field; did you mean {ours!r}?" in "\n".join(problems)


@pytest.mark.parametrize(
    ("algo", "trl", "ours", "value"),
    [
        ("GRPO", "num_generations", "group_size", 3),
        ("RLOO", "num_generations", "group_size", 3),
        ("GRPO", "learning_rate", "lr", 2e-5),
        ("SFT", "learning_rate", "lr", 2e-5),
        ("DPO", "learning_rate", "lr", 2e-5),
        ("RewardModel", "learning_rate", "lr", 2e-5),
        ("GRPO", "num_iterations", "update_epochs", 2),
    ],
)
def test_trl_names_that_mean_the_same_are_our_fields(algo: str, trl: str, ours: str, value: object) -> None:
    from agilerl.registry import MANIFEST_REGISTRY

    spec = MANIFEST_REGISTRY.get(algo).model_validate({trl: value})
    assert getattr(spec, ours) == value and ours in spec.model_fields_set
    assert spec.model_dump()[ours] == value  # stored (checkpoints, --set) under our name
    both = _problems({"algorithm": {"name": algo, ours: value, trl: value}, "environment": {"name": "x"}})
    assert f"algorithm.{trl}: {trl} and {ours} name the same field; keep one of them" in both


def test_trl_names_that_differ_say_how() -> None:
    text = "\n".join(_problems({"algorithm": {"name": "GRPO", "max_completion_length": 8,
                                              "per_device_train_batch_size": 4}, "environment": {"name": "x"}}))  # fmt: skip
    assert "TRL's bounds the whole completion, tool turns included" in text
    assert "micro_batch_size_per_gpu is the rows of one forward pass" in text


def test_typos_and_section_vocabulary() -> None:
    problems = _problems({
        "algorithm": {"name": "PPO", "gama": 0.9},
        "environment": {"name": "CartPole-v1"},
        "training": {"total_timesteps": 10},
        "replay_buffer": {"buffer_size": 10},
    })  # fmt: skip
    text = "\n".join(problems)
    assert "algorithm.gama: unknown field; did you mean 'gamma'?" in text
    assert "training.total_timesteps: unknown field; did you mean 'max_steps'?" in text
    assert "replay_buffer.buffer_size: unknown field; did you mean 'max_size'?" in text


def test_a_synonym_whose_target_the_spec_lacks_is_not_suggested() -> None:
    # SFT has no group_size: TRL's num_generations must not point at it.
    problems = _problems({"algorithm": {"name": "SFT", "num_generations": 4}, "environment": {"name": "x"}})
    assert "group_size" not in "\n".join(problems)


def _bandit(tmp_path: Path, env: dict[str, object]) -> dict[str, object]:
    return {"algorithm": "NeuralUCB", "environment": {"env_type": "bandit", "path": str(tmp_path), **env}}


def test_bandit_tables_must_exist_and_be_files(tmp_path: Path) -> None:
    (tmp_path / "dir.csv").mkdir()
    problems = _problems(_bandit(tmp_path, {"features": "nope.csv", "targets": "dir.csv"}))
    assert problems[0].startswith(f"environment.features: file not found: {tmp_path / 'nope.csv'}")
    assert problems[1] == f"environment.targets: {tmp_path / 'dir.csv'} is a directory; give a .csv or .parquet file"


def test_bandit_columns_named_in_the_manifest_are_in_the_csv_header(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("a,b,label\n1,2,0\n3,4,1\n")  # two classes: a bandit needs two arms
    (tmp_path / "y.csv").write_text("t,u\n0,1\n")
    problems = _problems(_bandit(tmp_path, {"features": "x.csv", "env_config": {"target_column": "class",
                                                                                 "categorical": ["b", "zz"]}}))  # fmt: skip
    assert problems == [
        "environment.env_config.target_column: no column 'class' in the features table (columns: ['a', 'b', 'label'])",
        "environment.env_config.categorical: no such feature columns ['zz']",
    ]
    problems = _problems(_bandit(tmp_path, {"features": "x.csv", "targets": "y.csv"}))
    assert problems[0].startswith("environment.targets: the targets table must have exactly one column, got 2")
    ok = validate_manifest(_bandit(tmp_path, {"features": "x.csv", "env_config": {"target_column": "label"}}))
    assert ok.environment.features == "x.csv"  # type: ignore[attr-defined]
