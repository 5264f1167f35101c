"""Kill real ``agilerl train`` processes at random points and resume them as docs/reliability.md says.

Each case trains a tiny population (2 agents, tournament selection and mutation) of one paradigm
in a subprocess, kills it with SIGKILL at a seeded random point after its first checkpoint, then
resumes with the documented command ``agilerl train --resume RUN_DIR``. Checked every time:

- every checkpoint file left behind loads (a kill never leaves a partial checkpoint);
- the checkpoint resumed from is at most one ``checkpoint_steps`` interval behind the last
  logged evaluation (at most one interval of training is lost);
- the resumed run exits 0, and every agent of its last generation has exactly ``max_steps``
  steps; metrics hold each (generation, agent) once, generations contiguous.

SIGINT: once writes a checkpoint and prints a resume command that works exactly as printed;
twice stops at once and leaves every checkpoint loadable.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agilerl import checkpoint

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "agilerl.cli"]
EVOLVE = {
    # lr only: a mutated learn_step makes a rollout longer than evo_steps (a different fault budget)
    "mutation": {
        "probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5},
        "rand_seed": 3,
        "rl_hp_selection": {"lr": {"min": 1e-4, "max": 1e-2}},
    },
    "tournament_selection": {"tournament_size": 2, "elitism": True},
}


def _training(max_steps: int, interval: int, **extra: Any) -> dict[str, Any]:
    return {"max_steps": max_steps, "evo_steps": interval, "checkpoint_steps": interval, "pop_size": 2,
            "seed": 0, "progress": False, **extra}  # fmt: skip


MANIFESTS: dict[str, dict[str, Any]] = {
    "ppo": {  # on-policy
        "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
        "network": {"encoder_config": {"arch": "mlp", "hidden_size": [16]}, "head_config": {"hidden_size": []}},
        "training": _training(640, 128),
    },
    "dqn": {  # off-policy
        "algorithm": {"name": "DQN", "batch_size": 16, "learn_step": 2},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
        "network": {"encoder_config": {"arch": "mlp", "hidden_size": [16]}, "head_config": {"hidden_size": []}},
        "replay_buffer": {"max_size": 2000},
        "training": _training(640, 128, learning_delay=32),
    },
    "ippo": {  # multi-agent
        "algorithm": {"name": "IPPO", "learn_step": 50, "batch_size": 25},
        "environment": {
            "name": "mpe2.simple_speaker_listener_v4",
            "num_envs": 1,
            "sync": True,
            "env_config": {"max_cycles": 25},
        },
        "network": {"encoder_config": {"arch": "mlp", "hidden_size": [16]}, "head_config": {"hidden_size": []}},
        "training": _training(500, 100),
    },
    "bandit": {
        "algorithm": {"name": "NeuralUCB", "batch_size": 8, "learn_step": 2},
        "environment": {"env_type": "bandit", "name": "iris"},
        "network": {"encoder_config": {"arch": "mlp", "hidden_size": [16]}},
        "training": _training(400, 80),
    },
}
#: (paradigm, seed of the kill point): 12 kills over five paradigms (the LLM case adds two more).
KILLS = [("ppo", 1), ("ppo", 2), ("ppo", 3), ("dqn", 1), ("dqn", 2), ("dqn", 3),
         ("ippo", 1), ("ippo", 2), ("bandit", 1), ("bandit", 2), ("bandit", 3)]  # fmt: skip


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("AGILERL_TRACEBACK", None)
    return env


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # the last line of a killed run may be cut short
            pass
    return out


def _start(manifest: Path, run_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:
        return subprocess.Popen([*CLI, "train", str(manifest), "--run-dir", str(run_dir)],
                                cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=_env())  # fmt: skip


def _launch(tmp_path: Path, manifest: dict[str, Any]) -> tuple[Path, Path, Path, subprocess.Popen[bytes]]:
    """Write ``manifest`` and start training it into ``tmp_path/run``: (manifest, run dir, log, process)."""
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(manifest))
    run_dir, log = tmp_path / "run", tmp_path / "log.txt"
    return path, run_dir, log, _start(path, run_dir, log)


def _wait_for(proc: subprocess.Popen[bytes], ready: Any) -> bool:
    """Poll until ``ready()`` or the process exits; True if ready while it still runs."""
    while proc.poll() is None:
        if ready():
            return True
        time.sleep(0.01)
    return False


def _checkpoints(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("checkpoint*.pt"))


def _check_finished(run_dir: Path, manifest: dict[str, Any]) -> None:
    rows = _rows(run_dir)
    keys = [(r["generation"], r["agent"]) for r in rows]
    assert len(keys) == len(set(keys)), "duplicate metric rows"
    gens = sorted({g for g, _ in keys if g >= 0})  # (the LLM loop logs a generation -1 baseline)
    assert gens == list(range(len(gens))), gens
    last = [r for r in rows if r["generation"] == gens[-1]]
    t = manifest["training"]
    assert len(last) == t["pop_size"]
    assert all(r["steps"] == t["max_steps"] for r in last), last  # exactly the step budget
    for r in (r for r in rows if r["generation"] >= 0):  # no generation trained an agent beyond evo_steps
        assert r["steps"] == min((r["generation"] + 1) * t["evo_steps"], t["max_steps"]), r


def _kill_and_resume(tmp_path: Path, manifest: dict[str, Any], seed: int) -> None:
    rng = random.Random(seed)
    interval = manifest["training"]["checkpoint_steps"]
    generations = manifest["training"]["max_steps"] // interval
    _, run_dir, log, proc = _launch(tmp_path, manifest)
    # a random point after the first checkpoint: after a random number of logged rows, plus jitter
    rows_wanted = rng.randrange(2, 2 * (generations - 1))
    ready = _wait_for(proc, lambda: bool(_checkpoints(run_dir)) and len(_rows(run_dir)) >= rows_wanted)
    assert ready, log.read_text()
    time.sleep(rng.uniform(0, 0.1))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, log.read_text()  # killed mid-run, not finished
    logged = max((r["steps"] for r in _rows(run_dir)), default=0)
    saved = [checkpoint.load(p) for p in _checkpoints(run_dir)]  # never a partial checkpoint
    newest = max(min(a["steps"] for a in s["agents"]) for s in saved)
    assert logged - newest <= interval, (logged, newest)  # at most one interval lost
    # the documented resume command
    proc = subprocess.run([*CLI, "train", "--resume", str(run_dir)], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    _check_finished(run_dir, manifest)


@pytest.mark.parametrize(("paradigm", "seed"), KILLS, ids=[f"{p}-{s}" for p, s in KILLS])
def test_sigkill_then_resume(tmp_path: Path, paradigm: str, seed: int) -> None:
    _kill_and_resume(tmp_path, {**MANIFESTS[paradigm], **EVOLVE}, seed)


def _llm_manifest(model_dir: Path) -> dict[str, Any]:
    return {
        "algorithm": {"name": "SFT", "lr": 1e-3, "batch_size": 4, "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 64,
                    "lora_config": {"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0}},
        "environment": {"env_type": "dataset", "dataset_path": str(ROOT / "examples/data/llm/sft_tiny.jsonl")},
        "training": _training(20, 4),
        "mutation": {"probabilities": {"no_mut": 0.5, "arch_mut": 0, "new_layer": 0, "params_mut": 0,
                                       "rl_hp_mut": 0.5}, "rand_seed": 3},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
    }  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_then_resume_llm(tmp_path: Path, tiny_model_dir: Path, seed: int) -> None:
    _kill_and_resume(tmp_path, _llm_manifest(tiny_model_dir), seed)


def _resume_command(output: str) -> list[str]:
    line = next(ln for ln in output.splitlines() if "Resume with: " in ln)
    words = shlex.split(line.split("Resume with: ", 1)[1])
    assert words[:2] == ["agilerl", "train"], words
    return [*CLI, *words[1:]]


def test_sigint_once_checkpoints_and_prints_a_command_that_resumes(tmp_path: Path) -> None:
    manifest = {**MANIFESTS["ppo"], **EVOLVE}
    _, run_dir, log, proc = _launch(tmp_path, manifest)
    assert _wait_for(proc, lambda: len(_rows(run_dir)) >= 3), log.read_text()
    proc.send_signal(signal.SIGINT)
    proc.wait()
    out = log.read_text()
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    checkpoint.load(run_dir / "checkpoint_interrupted.pt")
    resumed = subprocess.run(_resume_command(out), cwd=ROOT, env=_env(), capture_output=True, text=True, check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _check_finished(run_dir, manifest)


def test_sigint_twice_stops_at_once_and_keeps_every_checkpoint(tmp_path: Path) -> None:
    manifest = {**MANIFESTS["dqn"], **EVOLVE}
    _, run_dir, log, proc = _launch(tmp_path, manifest)
    assert _wait_for(proc, lambda: bool(_checkpoints(run_dir)) and len(_rows(run_dir)) >= 3), log.read_text()
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    proc.wait()
    out = log.read_text()
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    for p in _checkpoints(run_dir):  # the checkpoint being written is complete or absent, never partial
        checkpoint.load(p)
    resumed = subprocess.run([*CLI, "train", "--resume", str(run_dir)], cwd=ROOT, env=_env(),
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _check_finished(run_dir, manifest)


def test_a_second_run_into_a_busy_run_dir_is_refused(tmp_path: Path) -> None:
    manifest = {**MANIFESTS["ppo"], **EVOLVE}
    manifest["training"] = {**manifest["training"], "max_steps": 1_000_000}  # still running when refused
    path, run_dir, log, proc = _launch(tmp_path, manifest)
    try:
        assert _wait_for(proc, lambda: len(_rows(run_dir)) >= 1), log.read_text()
        for extra in ([], ["--resume", str(run_dir)], ["--overwrite"]):
            second = subprocess.run([*CLI, "train", str(path), "--run-dir", str(run_dir), *extra], cwd=ROOT,
                                    env=_env(), capture_output=True, text=True, check=False)  # fmt: skip
            assert proc.poll() is None, log.read_text()
            assert second.returncode == 2, second.stderr
            assert f"run directory {run_dir} is in use by another run (pid {proc.pid})" in second.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait()
    keys = [(r["generation"], r["agent"]) for r in _rows(run_dir)]
    assert keys and len(keys) == len(set(keys))  # one run's rows only
