"""The gym plugin's ``box2d`` and ``mujoco`` extras are installed by scripts/install.sh (issue 34,
point 8): a MuJoCo env and a Box2D env are made and stepped on a fresh machine."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
INSTALL_SH = Path(__file__).resolve().parents[3] / "scripts" / "install.sh"


def test_install_sh_installs_the_box2d_and_mujoco_extras() -> None:
    data = tomllib.loads(PYPROJECT.read_text())
    extras = data["tool"]["agilerl"]["install-extras"].split(",")
    assert {"box2d", "mujoco"} <= set(extras)
    assert {"box2d", "mujoco"} <= set(data["project"]["optional-dependencies"])
    # install.sh reads the line with this exact form (a sed pattern): keep them in step.
    assert re.search(r'^install-extras = "(.*)"', PYPROJECT.read_text(), re.M)
    assert "install-extras" in INSTALL_SH.read_text()


@pytest.mark.parametrize(("env_id", "module"), [("Hopper-v5", "mujoco"), ("LunarLander-v3", "Box2D")])
def test_env_is_made_and_stepped(env_id: str, module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} does not import here: install the gym plugin's extras (scripts/install.sh)")
    env = gym.make(env_id)
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        env.action_space.seed(0)
        obs, reward, *_ = env.step(env.action_space.sample())
        assert obs.shape == env.observation_space.shape and np.isfinite(reward)
    finally:
        env.close()
