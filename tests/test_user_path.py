"""The user's path after `agilerl train`, in the README's own words (section "After training").

Every command below is checked to appear verbatim in README.md, then run (the training budget is
cut with ``--set`` so the test stays small): train PPO on CartPole, ``agilerl eval`` it,
``agilerl.load`` + ``predict`` on a plain gymnasium env, export ONNX and compare its actions with
the agent's (in a process where torch cannot be imported), plot, and compare two runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agilerl.cli import main

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
#: Two generations of 10,240 steps: CartPole PPO gets far past a random policy (about 22).
BUDGET = ("--set", "training.max_steps=20480", "--no-progress")


def readme_command(line: str, cwd: Path, *extra: str) -> int:
    """Run an ``agilerl ...`` line of the README (in-process), after checking the README has it."""
    assert line in README, f"README.md no longer says {line!r}"
    args = line.split()[1:]
    old = Path.cwd()
    os.chdir(cwd)
    try:
        code = main([*args, *extra])
    finally:
        os.chdir(old)
    return code


@pytest.mark.slow
def test_after_training_as_the_readme_says(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnxruntime")
    (tmp_path / "examples").symlink_to(REPO / "examples")

    code = readme_command("agilerl train examples/ppo_cartpole.yaml --run-dir runs/ppo", tmp_path, *BUDGET)
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "runs" / "ppo"
    assert {"best.pt", "last.pt", "elite.pt", "metrics.jsonl", "population.jsonl"} <= {p.name for p in run.iterdir()}
    capsys.readouterr()

    # agilerl eval: mean/std return and episode lengths
    code = readme_command("agilerl eval runs/ppo --episodes 10", tmp_path, "--json", "--seed", "0")
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(out)
    assert report["episodes"] == 10 and report["checkpoint"].endswith("best.pt")
    assert report["mean_return"] > 100, report  # a random policy averages about 22
    assert report["lengths"] == [int(r) for r in report["returns"]]

    # agilerl.load + predict on a plain gymnasium env (the README's Python block)
    import agilerl

    agent = agilerl.load(str(run))
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    action, _ = agent.predict(obs)
    assert env.action_space.contains(action)
    observations, actions, total, done = [obs], [int(action)], 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
        action, _ = agent.predict(obs)
        observations.append(obs)
        actions.append(int(action))
    assert total > 100

    # export ONNX and compare its actions with the agent's on the states it visited
    code = readme_command("agilerl export-policy runs/ppo --format onnx", tmp_path)
    assert code == 0 and (run / "policy.onnx").is_file()
    np.save(tmp_path / "obs.npy", np.stack(observations).astype(np.float32))
    script = (
        "import sys; sys.modules['torch'] = None\n"  # the deployed policy needs no torch
        "import numpy as np, onnxruntime as ort\n"
        "session = ort.InferenceSession(sys.argv[1])\n"
        "obs = np.load(sys.argv[2])\n"
        "batch = session.run(['action'], {'observation': obs})[0]\n"
        "one = [int(session.run(['action'], {'observation': o[None]})[0][0]) for o in obs]\n"
        "print(' '.join(map(str, batch.tolist())), '|', ' '.join(map(str, one)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(run / "policy.onnx"), str(tmp_path / "obs.npy")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    batch_text, one_text = proc.stdout.split("|")
    assert [int(a) for a in batch_text.split()] == actions
    assert [int(a) for a in one_text.split()] == actions

    # plot, and compare with a second run
    code = readme_command("agilerl plot runs/ppo", tmp_path)
    assert code == 0 and (run / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    second = ("--run-dir", "runs/ppo2", "--set", "training.seed=2", "--set", "training.max_steps=10240")
    code = readme_command("agilerl train examples/ppo_cartpole.yaml --run-dir runs/ppo", tmp_path, *BUDGET, *second)
    assert code == 0
    code = readme_command("agilerl compare runs/ppo runs/ppo2 -o compare.png", tmp_path)
    assert code == 0 and (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"
