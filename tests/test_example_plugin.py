"""Invariant 2 of DESIGN.md: a third party adds a whole paradigm through entry points and hooks
alone, and it trains from a manifest with `agilerl train` (and gets HPO for free)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

AGILERL_CLI = [sys.executable, "-m", "agilerl.cli"]
MANIFEST = Path(__file__).resolve().parents[1] / "examples/plugins/agilerl-plugin-example/ucb1_karmed.yaml"


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(AGILERL_CLI + args, env=env, cwd=cwd, capture_output=True, text=True)


def test_discovered_through_its_entry_point(example_env: dict[str, str], tmp_path: Path) -> None:
    proc = run(["plugins", "--json"], example_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    example = next(p for p in json.loads(proc.stdout) if p["name"] == "example")
    assert example["distribution"] == "agilerl-plugin-example"
    assert example["error"] is None
    assert set(example["hooks"]) == {
        "agilerl_register_algorithms", "agilerl_register_env_types",
        "agilerl_register_builders", "agilerl_register_strategies",
    }  # fmt: skip
    # nothing registered it in-process: without the install, the name is unknown
    env = dict(os.environ, AGILERL_STRICT_PLUGINS="1")
    proc = subprocess.run([*AGILERL_CLI, "validate", str(MANIFEST)], env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "unknown algorithm 'UCB1'" in proc.stderr


def test_trains_from_yaml_with_agilerl_train_and_finds_the_best_arm(
    example_env: dict[str, str], tmp_path: Path
) -> None:
    proc = run(["train", str(MANIFEST), "--run-dir", "run", "--no-progress"], example_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "best agent 0 fitness 0.85" in proc.stdout  # 0.85 is the best arm's payout
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["steps"] == 1000


def test_gets_a_population_and_hyperparameter_mutation_for_free(example_env: dict[str, str], tmp_path: Path) -> None:
    data = yaml.safe_load(MANIFEST.read_text())
    data["training"].update(pop_size=4, max_steps=600, evo_steps=150)
    data["mutation"] = {"probabilities": {"no_mut": 0.25, "rl_hp_mut": 0.75}, "rand_seed": 3}
    data["tournament_selection"] = {"tournament_size": 2, "elitism": True}
    path = tmp_path / "pop.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = run(["train", str(path), "--run-dir", "run", "--no-progress"], example_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {r["generation"] for r in rows} == {0, 1, 2, 3}
    assert len({r["agent"] for r in rows}) > 4  # offspring with fresh indices
    cs = {r["hp/c"] for r in rows}
    assert len(cs) > 1 and all(0.05 <= c <= 4.0 for c in cs)  # c mutated within its field's Mutable range


def test_ctrl_c_mid_run_writes_a_checkpoint_and_resumes(example_env: dict[str, str], tmp_path: Path) -> None:
    data = yaml.safe_load(MANIFEST.read_text())
    data["training"].update(max_steps=50_000_000, evo_steps=20_000, checkpoint_path=str(tmp_path / "ck"))
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = subprocess.Popen(
        [*AGILERL_CLI, "train", str(path), "--run-dir", "run", "--no-progress"],
        env=example_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120  # a guard against hanging, not an assertion on speed
    while not (metrics.exists() and metrics.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    ckpt = tmp_path / "ck_interrupted.pt"
    assert f"Resume with: agilerl train --resume {ckpt}" in err and "Traceback" not in err
    import torch

    saved = torch.load(ckpt, weights_only=True)
    steps = saved["agents"][0]["steps"]
    assert steps >= 20_000
    # continue the same run with a finite budget: the step count carries on from the checkpoint
    data["training"]["max_steps"] = steps + 40_000
    path.write_text(yaml.safe_dump(data))
    resumed = run(["train", str(path), "--resume", str(ckpt), "--run-dir", "run2", "--no-progress"],
                  example_env, tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    rows = [json.loads(x) for x in (tmp_path / "run2" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["steps"] == steps + 40_000
