"""One plugin can never break another (issue 38): a name two installed plugins register is ambiguous
alone; every other algorithm (a third plugin's included) still trains, and the manifest or the
environment picks the provider. And a name a known, uninstalled plugin provides is answered with
that plugin's install line, not a fuzzy match with an installed name.

The plugins are real packages, built and installed with pip into their own directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agilerl.testing import pip_install_into, plugin_package

AGILERL_CLI = [sys.executable, "-m", "agilerl.cli"]

HOOKS = """
from agilerl import hookimpl
from agilerl.models import DQNSpec


class {cls}(DQNSpec):
    \"\"\"{doc}\"\"\"


@hookimpl
def agilerl_register_algorithms(register):
    register({cls}, name={name!r}, algorithm="agilerl_plugin_gym.single_agent.dqn:DQN")
"""


def _package(root: Path, dist: str, module: str, name: str, cls: str) -> Path:
    return plugin_package(root, dist, module, {"hooks.py": HOOKS.format(cls=cls, name=name, doc=f"{dist}'s {name}")})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("clashing")
    pkgs = [
        _package(root, "twin-one", "twin_one", "Twin", "TwinOneSpec"),
        _package(root, "twin-two", "twin_two", "Twin", "TwinTwoSpec"),
        _package(root, "third-q", "third_q", "ThirdQ", "ThirdQSpec"),
    ]
    return pip_install_into(root / "site", *pkgs)


def _run(args: list[str], cwd: Path, site: Path | None = None, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["AGILERL_STRICT_PLUGINS"] = "1"  # a clash is no plugin failure: strict mode runs too
    env.update(env_vars)
    return subprocess.run(AGILERL_CLI + args, env=env, cwd=cwd, capture_output=True, text=True)


def _manifest(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name.replace(':', '_')}.yaml"
    path.write_text(
        yaml.safe_dump({
            "algorithm": {"name": name, "learn_step": 1, "batch_size": 16},
            "environment": {"name": "CartPole-v1", "num_envs": 1},
            "training": {"max_steps": 200, "evo_steps": 100, "eval_loop": 1, "eval_steps": 20, "learning_delay": 50},
        })
    )  # fmt: skip
    return path


def test_two_plugins_registering_one_name_break_only_that_name(site: Path, tmp_path: Path) -> None:
    # A third plugin's algorithm trains, beside the clash.
    proc = _run(["train", str(_manifest(tmp_path, "ThirdQ")), "--run-dir", "third", "--no-progress"], tmp_path, site)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "third" / "metrics.jsonl").read_text().splitlines()[-1])["steps"] == 200
    # The clashing name alone is refused at validation, naming both plugins and how to pick.
    twin = _manifest(tmp_path, "Twin")
    proc = _run(["validate", str(twin)], tmp_path, site)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert (
        "algorithm.name: algorithm 'Twin' is registered by 2 plugins: 'twin_one' (twin-one 1.0.0) and "
        "'twin_two' (twin-two 1.0.0)" in proc.stderr
    ), proc.stderr
    assert "name: twin_one:Twin" in proc.stderr and "AGILERL_PROVIDER_TWIN=twin_one" in proc.stderr
    # `agilerl plugins` shows the clash; `agilerl algorithms` lists each provider's name.
    proc = _run(["plugins"], tmp_path, site)
    assert proc.returncode == 0 and "clash: algorithm 'Twin' is registered by 'twin_one' and 'twin_two'" in proc.stdout
    proc = _run(["algorithms"], tmp_path, site)
    assert proc.returncode == 0 and "twin_one:Twin" in proc.stdout and "twin_two:Twin" in proc.stdout
    # Picked in the manifest (by distribution name), it trains; the pick is kept in the checkpoint.
    picked = _manifest(tmp_path, "twin-two:Twin")
    proc = _run(["train", str(picked), "--run-dir", "picked", "--no-progress"], tmp_path, site)
    assert proc.returncode == 0, proc.stderr
    from agilerl import checkpoint

    assert checkpoint.load(tmp_path / "picked" / "last.pt")["manifest"]["algorithm"]["name"] == "twin-two:Twin"
    # Picked in the environment.
    proc = _run(["validate", str(twin)], tmp_path, site, AGILERL_PROVIDER_TWIN="twin_one")
    assert proc.returncode == 0, proc.stderr
    proc = _run(["validate", str(twin)], tmp_path, site, AGILERL_PROVIDER_TWIN="twin-three")
    assert proc.returncode != 0 and "AGILERL_PROVIDER_TWIN=twin-three names none of them" in proc.stderr


@pytest.mark.parametrize("name", ["PPO", "IPPO"])
def test_a_name_an_uninstalled_plugin_provides_gets_its_install_line_first(name: str, tmp_path: Path) -> None:
    """Without the gym plugin (the llm plugin registers LLMPPO and CISPO), ``PPO`` and ``IPPO`` are
    answered with the gym plugin's install line, not "did you mean 'LLMPPO'"; a misspelling is
    matched among installed names and the names known plugins provide."""
    path = _manifest(tmp_path, name)
    proc = _run(["validate", str(path)], tmp_path, AGILERL_LOAD_PLUGINS="llm,bandit")
    assert proc.returncode != 0
    assert (
        f"algorithm.name: unknown algorithm {name!r}: it is provided by the plugin 'agilerl-plugin-gym', which is "
        "not installed (or not loaded): pip install agilerl-plugin-gym." in proc.stderr
    ), proc.stderr
    assert "Did you mean" not in proc.stderr
    path.write_text(path.read_text().replace(f"name: {name}", f"name: {name.lower()}x"))
    proc = _run(["validate", str(path)], tmp_path, AGILERL_LOAD_PLUGINS="llm,bandit")
    assert f"Did you mean {name!r}? It is provided by 'agilerl-plugin-gym'" in proc.stderr, proc.stderr
