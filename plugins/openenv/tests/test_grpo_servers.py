"""GRPO through ``env_url`` on the three servers written with openenv-core's ``create_app``.

Each run starts from the LLM plugin's tiny random model, which at first mostly replies with text the
server cannot take as an action (not an integer, not one of the moves, a tool call the tool refuses).
Those replies get ``invalid_action_reward`` and a feedback observation, are counted in the
``train/invalid_actions`` metric, and the run goes on; the mean reward rises as the policy learns the
format and the task. The integer server allows 4 sessions for 16 concurrent trajectories, so those
episodes are queued in waves instead of failing with ``CAPACITY_REACHED``.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

import pytest

from agilerl_plugin_openenv.server import serve_in_thread

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agilerl_plugin_llm.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("openenv-servers") / "model")


#: server -> (environment fields, max_concurrent_envs, iterations)
CASES: dict[str, tuple[dict[str, Any], int, int]] = {
    "mcp": ({"mcp_tool": "submit"}, 16, 30),
    "integer": ({}, 4, 30),
    "multi_field": ({}, 16, 30),
}


def _manifest(model: Path, url: str, run_dir: Path, env: dict[str, Any], steps: int) -> dict[str, Any]:
    return {
        "algorithm": {
            "name": "GRPO", "group_size": 4, "batch_size": 4, "lr": 0.005, "beta": 0.04, "temperature": 1.0,
            "max_output_tokens": 6, "gradient_checkpointing": False, "use_liger_loss": False,
        },
        "network": {"pretrained_model_name_or_path": str(model), "max_context_length": 512},
        "environment": {
            "env_type": "rollout", "env_url": url, "max_turns": 1, "request_timeout_s": 10,
            "invalid_action_reward": -0.5, **env,
        },
        "training": {
            "max_steps": steps, "evo_steps": 10, "eval_loop": 1, "seed": 0, "run_dir": str(run_dir),
            "checkpoint_steps": steps, "checkpoint_path": str(run_dir / "checkpoint"),
        },
    }  # fmt: skip


def _rows(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "metrics.csv").open(newline="") as fh:
        rows = [{k: float(v) for k, v in row.items() if v not in ("", "None")} for row in csv.DictReader(fh)]
    # Training rows only: the held-out evaluation before training is logged as generation -1.
    return [r for r in rows if r.get("generation", 0) >= 0 and "fitness" in r]


@pytest.mark.parametrize("name", list(CASES))
def test_grpo_reward_rises_through_env_url_with_invalid_actions_survived(  # type: ignore[no-untyped-def]
    name, native, tiny_model, write_manifest, run_cli, tmp_path, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="agilerl_plugin_openenv")
    env, sessions, steps = CASES[name]
    with serve_in_thread(native.server_app(name, sessions)) as served:
        run_dir = tmp_path / "run"
        path = write_manifest(_manifest(tiny_model, served.url, run_dir, env, steps))
        code, out, err = run_cli("train", path, "--no-progress")
    assert code == 0, err
    assert "stopped by max_steps" in out
    rows = _rows(run_dir)
    first, last = rows[0], rows[-1]
    assert first["train/invalid_actions"] > 0, rows  # the model's invalid replies were there ...
    assert last["train/reward"] >= first["train/reward"] + 0.15, rows  # ... survived, and it learned
    assert last["train/invalid_actions"] < first["train/invalid_actions"], rows
    if sessions < 16:  # 16 trajectories per iteration on a 4-session server: queued, with one warning
        assert caplog.text.count("accepts 4 concurrent session(s)") == 1


def test_episodes_cut_short_by_the_context_free_their_sessions_for_the_next_wave(  # type: ignore[no-untyped-def]
    native, tiny_model, write_manifest, run_cli, tmp_path
) -> None:
    """Multi-turn grid episodes on a 4-session server, with a context so short that the harness ends
    most of them after one turn while the server's episode goes on: the next wave still gets sessions."""
    with serve_in_thread(native.server_app("multi_field", 4)) as served:
        run_dir = tmp_path / "run"
        spec = _manifest(tiny_model, served.url, run_dir, {}, 2)
        spec["environment"]["max_turns"] = 3
        spec["network"]["max_context_length"] = 200  # the prompt is ~135 tokens, a turn boundary ~100
        spec["training"]["evo_steps"] = 1
        code, _out, err = run_cli("train", write_manifest(spec), "--no-progress")
    assert code == 0, err
    assert all(row["train/episode_truncated"] > 0 for row in _rows(run_dir))  # the harness did cut episodes short
