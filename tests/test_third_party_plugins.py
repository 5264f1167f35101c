"""Plugins written outside the project, installed for real with pip (issue 30).

- A package whose ``specs.py`` imports ``agilerl.models`` at import time (the lazy seed names
  resolve through the registries, which load plugins: a re-entrant call) leaves every command
  working, its own algorithm included.
- A package that fails to import is isolated and named; the other plugins still work.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agilerl.testing import pip_install_into, plugin_package

TUTORIAL = Path(__file__).resolve().parents[1] / "examples/plugins/agilerl-tutorial-a2c"
AGILERL_CLI = [sys.executable, "-m", "agilerl.cli"]

# Its entry point sorts before every built-in ("aaa" < "bandit" < "gym"): the gym plugin, which
# provides the name it imports, is not loaded yet when its import asks for it.
REENTRANT = {
    "specs.py": """
        from typing import ClassVar

        from agilerl.models import DQNSpec, SingleAgentAlgorithmSpec  # at import time

        assert issubclass(DQNSpec, SingleAgentAlgorithmSpec)


        class ThirdDQNSpec(DQNSpec):
            default_evo_steps: ClassVar[int] = 500
    """,
    "hooks.py": """
        from agilerl import hookimpl
        from thirdparty_reentrant.specs import ThirdDQNSpec


        @hookimpl
        def agilerl_register_algorithms(register):
            # DQNSpec's space_rules come with the subclass.
            register(ThirdDQNSpec, name="ThirdDQN", algorithm="agilerl_plugin_gym.single_agent.dqn:DQN")
    """,
}

# A third party's A2C under the name the tutorial package once had: installed side by side now.
THIRD_A2C = {"hooks.py": "# registers nothing: what matters is that it and the tutorial are both installed\n"}

BROKEN = {"hooks.py": "raise ImportError('thirdparty_broken needs libfoo 2, found libfoo 1')\n"}


def _old_a2c() -> dict[str, str]:
    """The tutorial's A2C as a third party wrote it before ``rollout_layout``: the method removed."""
    src = TUTORIAL / "src" / "agilerl_tutorial_a2c"
    a2c = re.sub(r"\n    def rollout_layout\(self\).*?\n\n", "\n", (src / "a2c.py").read_text(), flags=re.S)
    a2c = re.sub(r"\n    protocol_version = 1\n", "\n", a2c)
    assert "rollout_layout(self)" not in a2c
    hooks = (src / "hooks.py").read_text().replace('"TutorialA2C"', '"OldA2C"')
    return {name: text.replace("agilerl_tutorial_a2c", "old_a2c") for name, text in
            {"a2c.py": a2c, "hooks.py": hooks, "specs.py": (src / "specs.py").read_text()}.items()}  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("third-party")
    pkgs = [
        plugin_package(
            root,
            "thirdparty-reentrant",
            "thirdparty_reentrant",
            REENTRANT,
            entry_point="aaa_reentrant",
            version="0.3.1",
        ),
        plugin_package(
            root, "thirdparty-broken", "thirdparty_broken", BROKEN, entry_point="aab_broken", version="0.3.1"
        ),
        plugin_package(root, "agilerl-plugin-a2c", "their_a2c", THIRD_A2C, entry_point="a2c", version="0.3.1"),
        plugin_package(root, "old-a2c", "old_a2c", _old_a2c(), version="0.3.1"),
    ]
    return pip_install_into(root / "site", *pkgs, TUTORIAL)


def _run(args: list[str], site: Path, cwd: Path, *, strict: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("AGILERL_STRICT_PLUGINS", None)
    if strict:
        env["AGILERL_STRICT_PLUGINS"] = "1"
    return subprocess.run(AGILERL_CLI + args, env=env, cwd=cwd, capture_output=True, text=True)


def _manifest(tmp_path: Path) -> Path:
    path = tmp_path / "third.yaml"
    path.write_text(
        yaml.safe_dump({
            "algorithm": {"name": "ThirdDQN", "learn_step": 1, "batch_size": 32},
            "environment": {"name": "CartPole-v1", "num_envs": 1},
            "training": {"max_steps": 600, "evo_steps": 300, "eval_loop": 1, "eval_steps": 50, "learning_delay": 100},
        })
    )  # fmt: skip
    return path


def test_a_plugin_importing_agilerl_models_at_import_leaves_every_command_working(site: Path, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    # strict: nothing may fail, except the broken package, which is left out of this run
    proc = _run(["plugins", "--json"], site, tmp_path, strict=False)
    assert proc.returncode == 0, proc.stderr
    infos = {p["name"]: p for p in json.loads(proc.stdout)}
    assert infos["aaa_reentrant"]["error"] is None and infos["aaa_reentrant"]["hooks"] == [
        "agilerl_register_algorithms"
    ]
    assert all(infos[n]["error"] is None for n in ("gym", "llm", "bandit", "openenv")), infos
    for args in (["algorithms"], ["envs"], ["validate", str(manifest)], ["plugins"], ["schema"]):
        proc = _run(args, site, tmp_path, strict=False)
        assert proc.returncode == 0, (args, proc.stderr)
        assert "already registered" not in proc.stderr, proc.stderr
    algos = _run(["algorithms", "--json"], site, tmp_path, strict=False)
    rows = {r["name"]: r for r in json.loads(algos.stdout)}
    assert rows["ThirdDQN"]["provider"] == "aaa_reentrant" and "PPO" in rows and "GRPO" in rows
    proc = _run(["train", str(manifest), "--run-dir", "run", "--no-progress"], site, tmp_path, strict=False)
    assert proc.returncode == 0, proc.stderr
    rows_ = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows_[-1]["steps"] == 600
    proc = _run(["eval", "run", "--episodes", "2"], site, tmp_path, strict=False)
    assert proc.returncode == 0 and "2 episode(s): return" in proc.stdout, proc.stderr


def test_a_plugin_that_fails_to_import_is_named_and_the_rest_still_work(site: Path, tmp_path: Path) -> None:
    proc = _run(["plugins"], site, tmp_path, strict=False)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("aab_broken"))
    assert "thirdparty-broken 0.3.1" in line and "FAILED: ImportError: thirdparty_broken needs libfoo 2" in line
    assert "'aab_broken' (thirdparty-broken 0.3.1) failed to load" in proc.stderr
    proc = _run(["validate", str(_manifest(tmp_path))], site, tmp_path, strict=False)
    assert proc.returncode == 0 and "valid" in proc.stdout, proc.stderr
    assert "aab_broken" in proc.stderr  # named on every command, so the user knows what is missing
    # strict mode (tests, CI) stops at it instead
    proc = _run(["algorithms"], site, tmp_path, strict=True)
    assert proc.returncode != 0 and "thirdparty-broken 0.3.1" in proc.stderr


def test_a_third_party_agilerl_plugin_a2c_does_not_replace_the_tutorial(site: Path, tmp_path: Path) -> None:
    proc = _run(["plugins", "--json"], site, tmp_path, strict=False)
    infos = {p["name"]: p for p in json.loads(proc.stdout)}
    assert infos["a2c"]["distribution"] == "agilerl-plugin-a2c" and infos["a2c"]["error"] is None
    assert infos["tutorial_a2c"]["distribution"] == "agilerl-tutorial-a2c" and infos["tutorial_a2c"]["error"] is None


def test_an_out_of_date_plugin_algorithm_is_named_with_what_it_lacks(site: Path, tmp_path: Path) -> None:
    data = yaml.safe_load((TUTORIAL / "a2c_cartpole.yaml").read_text())
    data["algorithm"]["name"] = "OldA2C"
    data["training"].update(max_steps=400, evo_steps=200)
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    expected = (
        "OldA2C (old_a2c.a2c.A2C) does not implement the single_agent on-policy protocol, version 1 "
        "(agilerl_plugin_gym.protocols.OnPolicyAlgorithm): it lacks rollout_layout()."
    )
    proc = _run(["validate", str(path)], site, tmp_path, strict=False)
    assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
    assert 'docs/gym.md, "Protocol versions"' in proc.stderr
    proc = _run(["train", str(path), "--run-dir", "run", "--no-progress"], site, tmp_path, strict=False)
    assert proc.returncode == 2 and expected in proc.stderr and "AttributeError" not in proc.stderr, proc.stderr
    # the tutorial's A2C, which declares the version it implements, passes the same check
    data["algorithm"]["name"] = "TutorialA2C"
    path.write_text(yaml.safe_dump(data))
    proc = _run(["validate", str(path)], site, tmp_path, strict=False)
    assert proc.returncode == 0, proc.stderr
