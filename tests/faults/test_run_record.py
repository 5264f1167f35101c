"""The run record stays true through kills and Ctrl-C (docs/reliability.md, "The run record").

Each case trains a tiny PPO population on CartPole for real. Kills are real SIGKILLs, sent by the
training process to itself at a chosen point (right after a given checkpoint is written, or right
after a given population row is logged), so the point is exact and the test is deterministic.

- A run killed after its last checkpoint, or one that finished, resumes as a no-op that says the
  run is complete: no record row, no checkpoint, no mutation; files already there are untouched.
- A run killed between checkpoints resumes with every record file (``metrics.jsonl``,
  ``metrics.csv``, ``population.jsonl``) cut back to the checkpoint it resumes from: each
  generation once, in order.
- ``--overwrite`` leaves none of the old run's records.
- Ctrl-C mid-generation, then resume: every metrics row (learn metrics of the member that finished
  its step before the interrupt included) is the uninterrupted run's.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from agilerl import LocalTrainer
from agilerl.errors import TrainingInterrupted

pytestmark = pytest.mark.slow  # real training subprocesses (about 2 minutes for the file on 2 cores)

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "agilerl.cli"]
#: Timing fields differ between any two runs; everything else in a row is the run's result.
TIMING = {"wall_s", "steps_per_s"}


def _manifest(run_dir: Path, checkpoint_steps: int = 128) -> dict[str, Any]:
    return {
        "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
        "network": {"encoder_config": {"arch": "mlp", "hidden_size": [16]}, "head_config": {"hidden_size": []}},
        "training": {"max_steps": 640, "evo_steps": 128, "checkpoint_steps": checkpoint_steps, "pop_size": 2,
                     "seed": 0, "progress": False, "run_dir": str(run_dir)},
        "mutation": {"probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5}, "rand_seed": 3,
                     "rl_hp_selection": {"lr": {"min": 1e-4, "max": 1e-2}}},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
    }  # fmt: skip


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("AGILERL_TRACEBACK", None)
    return env


#: Runs ``agilerl train`` in this process after arming one self-kill: ``KILL_AFTER_CHECKPOINT`` (a
#: checkpoint file name) or ``KILL_AFTER_POPULATION_ROW`` (a generation).
_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from agilerl import checkpoint
    from agilerl.training import metrics

    after_checkpoint = os.environ.get("KILL_AFTER_CHECKPOINT")
    after_row = os.environ.get("KILL_AFTER_POPULATION_ROW")
    save, log_population = checkpoint.save, metrics.MetricsLogger.log_population

    def save_then_die(path, payload):
        out = save(path, payload)
        if after_checkpoint and Path(path).name == after_checkpoint:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    def log_then_die(self, summary):
        log_population(self, summary)
        if after_row and summary["generation"] == int(after_row):
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint.save = save_then_die
    metrics.MetricsLogger.log_population = log_then_die
    from agilerl.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def _train_and_kill(tmp_path: Path, manifest: dict[str, Any], **kill: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(manifest))
    env = {**_env(), **kill}
    proc = subprocess.run([sys.executable, "-c", _KILLER, "train", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    return Path(manifest["training"]["run_dir"])


def _resume(run_dir: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*CLI, "train", "--resume", str(run_dir)], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the run directory (the lock aside): its bytes and modification time."""
    return {
        str(p.relative_to(run_dir)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != ".agilerl.lock"
    }


def _check_records(run_dir: Path, generations: int, pop_size: int = 2) -> None:
    population = _jsonl(run_dir / "population.jsonl")
    assert [r["generation"] for r in population] == list(range(generations))
    rows = _jsonl(run_dir / "metrics.jsonl")
    assert [r["generation"] for r in rows] == [g for g in range(generations) for _ in range(pop_size)]
    with (run_dir / "metrics.csv").open(newline="") as fh:
        assert [int(r["generation"]) for r in csv.DictReader(fh)] == [r["generation"] for r in rows]


def test_a_run_killed_after_its_last_checkpoint_resumes_as_a_no_op(tmp_path: Path) -> None:
    run_dir = _train_and_kill(tmp_path, _manifest(tmp_path / "run"), KILL_AFTER_CHECKPOINT="checkpoint_640.pt")
    assert not (run_dir / "last.pt").exists()  # killed before the final files
    before = _snapshot(run_dir)
    proc = _resume(run_dir)
    assert f"the run in {run_dir} is already complete (stopped by max_steps); nothing was trained" in proc.stdout
    after = _snapshot(run_dir)
    # Nothing logged or rewritten: only the final files the kill prevented are written now.
    assert {k: v for k, v in after.items() if k not in {"elite.pt", "last.pt"}} == before
    assert {"elite.pt", "last.pt"} <= after.keys()
    _check_records(run_dir, 5)
    # A second resume of the (now finished) run changes no file at all.
    _resume(run_dir)
    assert _snapshot(run_dir) == after


def test_a_run_killed_between_checkpoints_cuts_every_record_back(tmp_path: Path) -> None:
    # Checkpoints at 256 (generation 1) and 512 (generation 3) steps; killed after logging generation 2.
    run_dir = _train_and_kill(
        tmp_path, _manifest(tmp_path / "run", checkpoint_steps=256), KILL_AFTER_POPULATION_ROW="2"
    )
    assert [r["generation"] for r in _jsonl(run_dir / "population.jsonl")] == [0, 1, 2]
    proc = _resume(run_dir)
    assert f"resuming from {run_dir / 'checkpoint_256.pt'}" in proc.stderr
    _check_records(run_dir, 5)  # generation 2 logged once, not [0, 1, 2, 2, 3, 4]


def test_overwrite_leaves_none_of_the_old_records(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path / "run")
    LocalTrainer.from_manifest(manifest).train()
    manifest["training"]["max_steps"] = 256
    LocalTrainer.from_manifest(manifest, overwrite=True).train()
    _check_records(tmp_path / "run", 2)


def test_ctrl_c_then_resume_logs_the_uninterrupted_rows(tmp_path: Path) -> None:
    LocalTrainer.from_manifest(_manifest(tmp_path / "straight")).train()
    expected = _jsonl(tmp_path / "straight" / "metrics.jsonl")

    trainer = LocalTrainer.from_manifest(_manifest(tmp_path / "run"))
    learn = trainer.strategy.learn

    def ctrl_c_during_the_first_member_of_generation_2(agent: Any, run: Any, num_steps: int) -> dict[str, float]:
        if run.generation == 2 and agent is run.population[0]:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C: held until this member's step is done
        return learn(agent, run, num_steps)

    trainer.strategy.learn = ctrl_c_during_the_first_member_of_generation_2  # type: ignore[method-assign]
    with pytest.raises(TrainingInterrupted):
        trainer.train()
    LocalTrainer.from_manifest(_manifest(tmp_path / "run"), resume_from=tmp_path / "run").train()
    got = _jsonl(tmp_path / "run" / "metrics.jsonl")
    skipped = next(r for r in got if r["generation"] == 2)  # finished its step before the interrupt
    assert {"train_return", "policy_loss", "value_loss", "entropy", "approx_kl"} <= skipped.keys()
    # Same rows, same keys; float metrics to 1e-6 relative (1e-7 absolute, for losses near 0): a member that resumes from the checkpoint
    # rebuilds PPO's fused actor-critic pack, whose sums may round in another order (policy_loss
    # differed in its 9th digit). Steps, fitness and every other field must match exactly.
    rows = [{k: v for k, v in r.items() if k not in TIMING} for r in got]
    want = [{k: v for k, v in r.items() if k not in TIMING} for r in expected]
    assert [r.keys() for r in rows] == [r.keys() for r in want]
    for row, ref in zip(rows, want, strict=True):
        for key, value in ref.items():
            if isinstance(value, float) and key not in ("fitness", "steps"):
                assert row[key] == pytest.approx(value, rel=1e-6, abs=1e-7), (key, row, ref)
            else:
                assert row[key] == value, (key, row, ref)
