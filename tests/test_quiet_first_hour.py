"""A quieter, truer first hour (issue 38), seen as a user sees it: each command run in its own
process with stdout and stderr piped, as into a log.

- a float64 ``Box`` observation (every MuJoCo env has one) validates and trains without gymnasium's
  ``Box low's precision lowered by casting to float32`` from the float32 cast the gym plugin adds;
- ``agilerl eval --video`` prints no false ``XDG_RUNTIME_DIR`` error (pygame looking for a display
  the off-screen frames do not need);
- Ctrl-C is reported as the user's choice, with the resume command, never as ``error:``;
- the README's quick start writes the run where "After training" reads it.

(No Hugging Face progress bars in a pipe: ``plugins/llm/tests/test_quiet_output.py``.)
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GYM_TESTS = ROOT / "plugins" / "gym" / "tests"
AGILERL_CLI = [sys.executable, "-m", "agilerl.cli"]

FLOAT64_ENV = '''
import gymnasium as gym
import numpy as np


class Float64Reach(gym.Env):
    """A float64 Box observation whose bounds float32 cannot hold exactly (as MuJoCo's)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(np.full(3, -1.1), np.full(3, 1.1), dtype=np.float64)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3), {}

    def step(self, action):
        self.t += 1
        return self.np_random.uniform(-1, 1, 3), float(action), self.t >= 20, False, {}
'''


def _cli(args: list[str], cwd: Path, **env_vars: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    for key, value in env_vars.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(AGILERL_CLI + args, cwd=cwd, env=env, capture_output=True, text=True)


def _dqn(environment: dict[str, object]) -> dict[str, object]:
    return {
        "algorithm": {"name": "DQN", "batch_size": 16, "learn_step": 4},
        "environment": environment,
        "training": {"max_steps": 100, "evo_steps": 50, "eval_steps": 20, "learning_delay": 20, "seed": 0},
    }


def test_a_float64_box_env_validates_and_trains_without_the_precision_warning(tmp_path: Path) -> None:
    (tmp_path / "f64env.py").write_text(textwrap.dedent(FLOAT64_ENV))
    env = {"name": "Reach", "custom": True, "entrypoint": "f64env:Float64Reach", "path": str(tmp_path), "num_envs": 1}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_dqn(env)))
    for args in (["validate", str(path)], ["train", str(path), "--run-dir", "run"]):
        proc = _cli(args, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "precision lowered" not in proc.stderr and "WARN" not in proc.stderr, proc.stderr
    # the observations the agent saw were cast (the network is float32 throughout)
    from agilerl_plugin_gym.env_spec import GymEnvSpec
    from agilerl_plugin_gym.envs import make_single_env

    made = make_single_env(GymEnvSpec(**{k: v for k, v in env.items() if k != "num_envs"}))
    obs, _ = made.reset(seed=0)
    assert obs.dtype.name == "float32" and made.observation_space.dtype.name == "float32"
    assert float(made.observation_space.high[0]) == pytest.approx(1.1)


def test_eval_video_prints_no_false_display_error(tmp_path: Path) -> None:
    if importlib.util.find_spec("moviepy") is None:
        pytest.skip("agilerl eval --video needs moviepy (the core[video] extra)")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_dqn({"name": "CartPole-v1", "num_envs": 1})))
    assert _cli(["train", str(path), "--run-dir", "run"], tmp_path).returncode == 0
    proc = _cli(["eval", "run", "--episodes", "1", "--video", "cartpole.mp4"], tmp_path,
                XDG_RUNTIME_DIR=None, DISPLAY=None, WAYLAND_DISPLAY=None, SDL_VIDEODRIVER=None)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "XDG_RUNTIME_DIR" not in proc.stderr and "rror" not in proc.stderr, proc.stderr
    assert (tmp_path / "cartpole.mp4").stat().st_size > 0


def test_ctrl_c_is_the_users_choice_with_the_resume_command(tmp_path: Path) -> None:
    env = {"name": "CartPole-v1", "num_envs": 1, "path": str(GYM_TESTS),
           "env_wrappers": [["gym_test_wrappers.SigintAfter", {"steps": 70}]]}  # fmt: skip
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_dqn(env)))
    proc = _cli(["train", str(path), "--run-dir", "run"], tmp_path)  # a real SIGINT, as Ctrl-C sends
    assert proc.returncode == 130, proc.stderr
    assert "error" not in proc.stderr.lower() and "Traceback" not in proc.stderr, proc.stderr
    assert "stopped by Ctrl-C, as you asked; checkpoint written to run/checkpoint_interrupted.pt" in proc.stderr
    assert "Resume with: agilerl train" in proc.stderr and "--resume" in proc.stderr


def test_the_readme_quick_start_writes_where_after_training_reads() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    after = readme.split("## After training", 1)[1].split("\n## ", 1)[0]
    train = re.search(r"agilerl train examples/\S+\.yaml(.*)", quick)
    assert train is not None, quick
    run_dir = re.search(r"--run-dir (\S+)", train.group(1))
    assert run_dir is not None, "the quick start's train command names no --run-dir"
    reads = set(re.findall(r"^agilerl (?:eval|export-policy|plot) (\S+)", after, flags=re.M))
    assert reads == {run_dir.group(1)}, (run_dir.group(1), reads)
    # on a machine without a local torch wheel cache: how to get the CPU build
    assert "download.pytorch.org/whl/cpu" in readme and "not on PyPI yet" in readme
