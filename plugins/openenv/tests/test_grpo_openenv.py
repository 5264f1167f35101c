"""GRPO from a YAML manifest whose ``environment.env_url`` points at ``agilerl serve-env`` servers.

The policy is the LLM plugin's tiny test model; the env is ``examples/openenv/word_game.py`` served
in a child process (a real OpenEnv server on 127.0.0.1), so these are the production code paths end
to end: manifest validation, the ``env_url`` rollout source, WebSocket sessions, GRPO updates,
evaluation and checkpoints.
"""

from __future__ import annotations

import csv
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from agilerl_plugin_openenv.server import serve_in_thread

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agilerl_plugin_llm.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("openenv-grpo") / "model")


def manifest(model: Path, env_url: Any, run_dir: Path, *, max_steps: int) -> dict[str, Any]:
    return {
        "algorithm": {
            "name": "GRPO",
            "group_size": 4,
            "batch_size": 4,
            "lr": 0.005,
            "beta": 0.04,
            "temperature": 1.0,
            "max_output_tokens": 8,
            "gradient_checkpointing": False,
            "use_liger_loss": False,
        },
        "network": {"pretrained_model_name_or_path": str(model), "max_context_length": 128},
        "environment": {"env_type": "rollout", "env_url": env_url, "max_turns": 1, "request_timeout_s": 2},
        "training": {
            "max_steps": max_steps,
            "evo_steps": 10,
            "eval_loop": 8,
            "seed": 0,
            "run_dir": str(run_dir),
            "checkpoint_steps": 10,
            "checkpoint_path": str(run_dir / "checkpoint"),
        },
    }


def metrics(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "metrics.csv").open(newline="") as fh:
        rows = [{k: float(v) for k, v in row.items() if v not in ("", "None")} for row in csv.DictReader(fh)]
    # Training rows only: the held-out evaluation before training is logged as generation -1.
    return [r for r in rows if r.get("generation", 0) >= 0 and "fitness" in r]


def test_grpo_learns_the_word_game_through_serve_env(server_process, tiny_model, run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The shipped example manifest, pointed at a fresh server and model: mean reward rises."""
    server = server_process("--max-concurrent-envs", "32")
    run_dir = tmp_path / "run"
    example = Path(__file__).resolve().parents[3] / "examples" / "openenv" / "grpo_word_game.yaml"
    code, _out, err = run_cli(
        "train", example, "--no-progress",
        "--set", f"environment.env_url={server.url}",
        "--set", f"network.pretrained_model_name_or_path={tiny_model}",
        "--set", f"training.run_dir={run_dir}",
        "--set", f"training.checkpoint_path={run_dir / 'checkpoint'}",
    )  # fmt: skip
    assert code == 0, err
    rows = metrics(run_dir)
    assert len(rows) == 4
    first, last = rows[0], rows[-1]
    # Mean training reward rises by a clear margin (0.11 -> 0.40 with this seed when measured).
    assert last["train/reward"] >= first["train/reward"] + 0.15, rows
    assert last["fitness"] > first["fitness"], rows


#: Env steps before the kill. Generation 1 plays 10 iterations x 4 prompts x group 4 one-turn
#: episodes (160 steps), then evaluates on eval_loop 8 x batch 4 episodes (32 steps) and writes
#: checkpoint_10.pt; step 194 is the second episode of generation 2's first batch.
#: The held-out evaluation before training (eval_loop 8 x batch 4 episodes) comes first: 32 steps more.
KILL_AT_STEP = 8 * 4 + 10 * 4 * 4 + 8 * 4 + 2


def _kill_mid_rollout(monkeypatch: pytest.MonkeyPatch, kill: Any) -> list[int]:
    """Fault injection: kill the server in the middle of a rollout batch of generation 2."""
    from agilerl_plugin_openenv.client import OpenEnvTextEnv

    original = OpenEnvTextEnv.astep  # what the rollout's batched calls (run_batch) run
    calls: list[int] = []
    killed: list[int] = []
    lock = threading.Lock()

    async def astep(self: OpenEnvTextEnv, action: str) -> Any:
        with lock:
            calls.append(1)
            if len(calls) == KILL_AT_STEP:
                kill()
                killed.append(len(calls))
        return await original(self, action)

    monkeypatch.setattr(OpenEnvTextEnv, "astep", astep)
    return killed


def test_replica_killed_mid_run_training_finishes_on_the_survivor(  # type: ignore[no-untyped-def]
    server_process, game, tiny_model, write_manifest, run_cli, tmp_path, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="agilerl_plugin_openenv")
    victim = server_process("--max-concurrent-envs", "32")
    killed = _kill_mid_rollout(monkeypatch, victim.kill)
    with serve_in_thread(game, max_concurrent_envs=32) as survivor:
        run_dir = tmp_path / "run"
        path = write_manifest(manifest(tiny_model, [victim.url, survivor.url], run_dir, max_steps=20))
        code, out, err = run_cli("train", path, "--no-progress")
    assert killed == [KILL_AT_STEP]
    assert code == 0, err
    assert "stopped by max_steps" in out
    assert f"OpenEnv replica {victim.url} failed" in caplog.text
    # The trajectories cut by the kill were kept as truncated episodes, and training went on.
    rows = metrics(run_dir)
    assert rows[0]["train/episode_truncated"] == 0 and rows[1]["train/episode_truncated"] > 0, rows
    from agilerl import checkpoint

    for steps in (10, 20):
        assert checkpoint.load(run_dir / f"checkpoint_{steps}.pt")["agents"]


def test_only_server_killed_mid_run_stops_clearly_and_keeps_a_resumable_checkpoint(  # type: ignore[no-untyped-def]
    server_process, tiny_model, write_manifest, run_cli, tmp_path, monkeypatch
) -> None:
    server = server_process("--max-concurrent-envs", "32")
    killed = _kill_mid_rollout(monkeypatch, server.kill)
    run_dir = tmp_path / "run"
    path = write_manifest(manifest(tiny_model, server.url, run_dir, max_steps=30))
    code, _out, err = run_cli("train", path, "--no-progress")
    assert killed == [KILL_AT_STEP]
    assert code == 1 and "no OpenEnv replica answered" in err and server.url in err, err
    assert "Traceback" not in err
    from agilerl import checkpoint

    saved = checkpoint.load(run_dir / "checkpoint_10.pt")
    assert saved["agents"] and saved["generation"] >= 0
    # The checkpoint resumes the run once a server is back (here on a new address).
    again = server_process("--max-concurrent-envs", "32")
    code, out, err = run_cli(
        "train", path, "--no-progress", "--resume", str(run_dir / "checkpoint_10.pt"),
        "--set", f"environment.env_url={again.url}",
    )  # fmt: skip
    assert code == 0 and "stopped by max_steps" in out, err
    assert checkpoint.load(run_dir / "checkpoint_30.pt")["agents"]


def test_credentials_never_reach_the_run_directory(
    native, game, tiny_model, write_manifest, run_cli, tmp_path, monkeypatch, caplog
) -> None:  # type: ignore[no-untyped-def]
    """A run against a server that wants a token: the token comes from the environment and is found
    nowhere in what the run writes (manifest copy, metrics, logs, checkpoints, elite)."""
    from agilerl_plugin_openenv.server import ServedEnv, make_app

    token = "tok-s3cret-98765"
    monkeypatch.setenv("W19_RUN_TOKEN", token)
    monkeypatch.setenv("W19_RUN_AUTH", f"Bearer {token}")
    caplog.set_level(logging.DEBUG, logger="agilerl_plugin_openenv")
    served = ServedEnv(native.RequireAuth(make_app(game, max_concurrent_envs=32), token)).start()
    try:
        run_dir = tmp_path / "run"
        spec = manifest(tiny_model, served.url + "/?token=${W19_RUN_TOKEN}", run_dir, max_steps=10)
        spec["environment"]["env_url_headers_from_env"] = {"Authorization": "W19_RUN_AUTH"}
        code, out, err = run_cli("train", write_manifest(spec), "--no-progress")
    finally:
        served.stop()
    assert code == 0, err
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".pt" for p in written) and any(p.name == "metrics.csv" for p in written)
    for path in written:
        assert token.encode() not in path.read_bytes(), path
    assert token not in out + err + caplog.text
