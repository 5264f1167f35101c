"""Evaluation always ends and says how far it is (issue 30): with ``training.eval_steps`` unset,
an env that never ends an episode is stopped at a default cap that the log names, and a long
evaluation prints progress lines."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
import yaml

from agilerl.cli import main
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.engine import evaluation
from agilerl_plugin_gym.engine.evaluation import DEFAULT_EVAL_CAP, env_step_limit

HERE = Path(__file__).resolve().parent


def _manifest(eval_steps: int | None) -> dict[str, Any]:
    return {
        "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32},
        "environment": {"name": "never-ends", "custom": True, "path": str(HERE),
                        "entrypoint": "never_ending_env:NeverEndingEnv", "num_envs": 1},
        "training": {"max_steps": 64, "evo_steps": 64, "eval_steps": eval_steps, "seed": 0, "save_elite": False},
    }  # fmt: skip


def test_the_env_limit_is_read_from_the_eval_env() -> None:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    assert env_step_limit(env) == 500
    env.close()


def test_an_episode_that_never_ends_stops_at_the_default_cap_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    monkeypatch.setattr(evaluation, "PROGRESS_INTERVAL_S", 0.0)  # a progress line per step, not per 10 s
    with caplog.at_level(logging.INFO, logger="agilerl"):
        result = LocalTrainer.from_manifest(_manifest(None), run_dir=tmp_path / "run").train()
    assert result.population[0].steps == 64
    said = [r.getMessage() for r in caplog.records if r.name == "agilerl.gym.eval"]
    assert any(
        "never-ends declares no episode step limit and training.eval_steps is unset: evaluation episodes stop "
        f"after {DEFAULT_EVAL_CAP} steps" in m
        for m in said
    ), said
    progress = [m for m in said if m.startswith("evaluating member 0:")]
    assert progress and progress[-1] == f"evaluating member 0: {DEFAULT_EVAL_CAP} steps, 0/1 episodes finished"
    # the policy scores 1 per step it picks action 1: the return is bounded by the cap
    assert 0 <= result.fitnesses[0] <= DEFAULT_EVAL_CAP


def test_eval_steps_given_is_the_cap_and_nothing_is_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch.set_num_threads(1)
    with caplog.at_level(logging.INFO, logger="agilerl"):
        result = LocalTrainer.from_manifest(_manifest(50), run_dir=tmp_path / "run", progress=False).train()
    assert 0 <= result.fitnesses[0] <= 50
    assert not [r for r in caplog.records if r.name == "agilerl.gym.eval"]


# ``agilerl eval`` plays whole episodes with a trained agent: bounded the same way (the manifest's
# eval_steps, else the env's own limit, else the default cap, said in the log), with progress lines.


@pytest.fixture(scope="module")
def never_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    run_dir = tmp_path_factory.mktemp("never") / "run"
    manifest = _manifest(50)
    manifest["training"]["save_elite"] = True  # a checkpoint to evaluate
    LocalTrainer.from_manifest(manifest, run_dir=run_dir, progress=False).train()
    return run_dir


def _cli_eval(
    run_dir: Path, manifest: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, dict[str, Any], str]:
    """``agilerl eval RUN --manifest M --json ARGS`` -> (exit code, the JSON result, stderr)."""
    path = tmp_path / "never.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    code = main(["eval", str(run_dir), "--manifest", str(path), "--json", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


def test_agilerl_eval_stops_at_the_manifests_eval_steps_and_shows_progress(
    never_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evaluation, "PROGRESS_INTERVAL_S", 0.0)  # a progress line per step, not per 10 s
    code, result, err = _cli_eval(never_run, _manifest(30), tmp_path, capsys, "--episodes", "2", "--seed", "0")
    assert code == 0, err
    assert result["lengths"] == [30, 30]
    progress = [line for line in err.splitlines() if line.startswith("[agilerl] evaluating never-ends:")]
    assert progress[0] == "[agilerl] evaluating never-ends: 1 steps, 0/2 episodes finished"
    assert progress[-1] == "[agilerl] evaluating never-ends: 60 steps, 1/2 episodes finished"
    assert "declares no episode step limit" not in err  # eval_steps given: nothing to say


def test_agilerl_eval_without_eval_steps_stops_at_the_default_cap_and_says_so(
    never_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result, err = _cli_eval(never_run, _manifest(None), tmp_path, capsys, "--episodes", "1", "--seed", "0")
    assert code == 0, err
    assert result["lengths"] == [DEFAULT_EVAL_CAP]
    assert (
        "never-ends declares no episode step limit and training.eval_steps is unset: evaluation episodes stop "
        f"after {DEFAULT_EVAL_CAP} steps" in err
    ), err


def test_agilerl_eval_keeps_the_envs_own_limit(
    never_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _manifest(None)
    manifest["environment"]["env_wrappers"] = [["gymnasium.wrappers:TimeLimit", {"max_episode_steps": 40}]]
    code, result, err = _cli_eval(never_run, manifest, tmp_path, capsys, "--episodes", "1")
    assert code == 0, err
    assert result["lengths"] == [40]  # the env ends the episode; no default cap, nothing said
    assert "declares no episode step limit" not in err


def test_agilerl_eval_of_a_multi_agent_run_is_bounded_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def manifest(eval_steps: int | None) -> dict[str, Any]:
        return {
            "algorithm": {"name": "IPPO", "learn_step": 32, "batch_size": 16},
            "environment": {"name": "never-ends-pz", "custom": True, "path": str(HERE),
                            "entrypoint": "never_ending_env:NeverEndingParallelEnv", "num_envs": 1, "sync": True},
            "training": {"max_steps": 32, "evo_steps": 32, "eval_steps": eval_steps, "seed": 0, "save_elite": True},
        }  # fmt: skip

    LocalTrainer.from_manifest(manifest(20), run_dir=tmp_path / "run", progress=False).train()
    monkeypatch.setattr(evaluation, "PROGRESS_INTERVAL_S", 0.0)
    code, result, err = _cli_eval(tmp_path / "run", manifest(25), tmp_path, capsys, "--episodes", "2")
    assert code == 0, err
    assert result["lengths"] == [25, 25]
    assert "[agilerl] evaluating never-ends-pz: 50 steps, 1/2 episodes finished" in err.splitlines()
    monkeypatch.setattr(evaluation, "DEFAULT_EVAL_CAP", 70)  # the default cap, without 10k steps here
    code, result, err = _cli_eval(tmp_path / "run", manifest(None), tmp_path, capsys, "--episodes", "1")
    assert code == 0, err
    assert result["lengths"] == [70]
    assert "never-ends-pz declares no episode step limit" in err
