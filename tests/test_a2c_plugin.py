"""The tutorial of docs/gym.md: a separate package (examples/plugins/agilerl-tutorial-a2c) adds an A2C,
registered as ``TutorialA2C`` (the gym plugin has a built-in ``A2C``), to the gym plugin's
``single_agent`` paradigm with public API only. scripts/install.sh does not install it: where it is
not installed, these tests register its hooks module in-process, as its entry point would.

It gets the rest for free: validation of the env and its spaces, the manifest schema, the CLI, the
on-policy strategy's loop (rollouts, GAE, autoreset), populations with mutation, checkpoints and
exact resume.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from agilerl.cli import main
from agilerl.plugins import register_plugin, unregister_plugin
from agilerl.registry import MANIFEST_REGISTRY
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.protocols import OnPolicyAlgorithm

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "examples/plugins/agilerl-tutorial-a2c/a2c_cartpole.yaml"


TUTORIAL_SRC = ROOT / "examples/plugins/agilerl-tutorial-a2c/src"


@pytest.fixture(autouse=True, scope="module")
def _tutorial() -> Iterator[None]:
    """The tutorial's hooks: from its entry point where it is installed, else registered here."""
    torch.set_num_threads(1)
    if "TutorialA2C" in MANIFEST_REGISTRY.names():  # installed (its entry point loaded)
        yield
        return
    sys.path.insert(0, str(TUTORIAL_SRC))
    name = register_plugin(importlib.import_module("agilerl_tutorial_a2c.hooks"), name="tutorial_a2c_inprocess")
    try:
        yield
    finally:
        unregister_plugin(name)
        sys.path.remove(str(TUTORIAL_SRC))


def _write(tmp: Path, data: dict[str, Any]) -> Path:
    path = tmp / "a2c.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
def test_a2c_learns_cartpole_from_its_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(MANIFEST.read_text())
    data["training"].update(max_steps=40_000)
    code = main(["train", str(_write(tmp_path, data)), "--run-dir", str(tmp_path / "run"), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["steps"] == 40_000
    # A random policy scores ~22 on CartPole; a learning A2C passes 100 within 40k steps.
    assert max(r["fitness"] for r in rows) >= 100, [r["fitness"] for r in rows]


def test_spec_inherits_env_and_space_checks_and_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(MANIFEST.read_text())
    assert main(["validate", str(_write(tmp_path, data))]) == 0
    capsys.readouterr()
    data["environment"]["name"] = "Pendulum-v1"  # Box actions: A2C declared DQN's rules (Discrete only)
    assert main(["validate", str(_write(tmp_path, data))]) == 1
    assert "TutorialA2C needs a Discrete action space" in capsys.readouterr().err
    data["environment"]["name"] = "CartPole-v1"
    data["algorithm"]["batch_size"] = 64  # a field A2C would not use is refused by name
    assert main(["validate", str(_write(tmp_path, data))]) == 1
    assert "batch_size" in capsys.readouterr().err
    assert main(["schema"]) == 0
    assert "TutorialA2C" in capsys.readouterr().out


def test_population_mutation_checkpoint_and_exact_resume(tmp_path: Path) -> None:
    data = yaml.safe_load(MANIFEST.read_text())
    data["mutation"] = {"probabilities": {"no_mut": 0.1, "arch_mut": 0.3, "new_layer": 0.5, "params_mut": 0.3,
                                          "rl_hp_mut": 0.3}, "rand_seed": 1}  # fmt: skip
    data["tournament_selection"] = {"tournament_size": 2, "elitism": True}
    data["training"].update(pop_size=2, max_steps=640, evo_steps=320, checkpoint_steps=320, eval_steps=50,
                            checkpoint_path=str(tmp_path / "ckpt"), progress=False, save_elite=False)  # fmt: skip
    full = LocalTrainer.from_manifest(data, run_dir=tmp_path / "full").train()
    assert [a.steps for a in full.population] == [640, 640]
    assert all(isinstance(a, OnPolicyAlgorithm) for a in full.population)  # the declared protocol
    assert any(r["mutation"] not in ("None", None) for r in full.history)
    resumed = LocalTrainer.from_manifest(
        data, run_dir=tmp_path / "resumed", resume_from=tmp_path / "ckpt_320.pt"
    ).train()
    assert resumed.fitnesses == full.fitnesses
    for a, b in zip(resumed.population, full.population, strict=True):
        for (name, x), (_, y) in zip(a.state_dict()["nets"].items(), b.state_dict()["nets"].items(), strict=True):
            for k in x:
                assert torch.equal(x[k], y[k]), (name, k)
