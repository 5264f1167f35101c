"""PettingZoo env names as AgileRL's users write them: the old ``pettingzoo.mpe.*`` names train on
PyPI ``mpe2`` (the same envs), a moved package that is missing says what to install, and a
turn-based (AEC-only) game is refused at validation, not at ``train``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.multi_agent.vec_env import make_single_pz_env


def _problems(env: dict[str, object]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_manifest({"algorithm": {"name": "IPPO"}, "environment": env, "training": {"max_steps": 100}})
    return [str(p) for p in info.value.problems]


def test_old_mpe_name_is_the_mpe2_env_with_the_same_spaces() -> None:
    import mpe2.simple_spread_v3

    manifest = load_manifest(
        {"algorithm": {"name": "IPPO"}, "environment": {"name": "pettingzoo.mpe.simple_spread_v3"}}
    )
    ours = make_single_pz_env(manifest.environment)
    theirs = mpe2.simple_spread_v3.parallel_env()
    assert ours.possible_agents == theirs.possible_agents
    for agent in theirs.possible_agents:
        assert ours.observation_space(agent) == theirs.observation_space(agent)
        assert ours.action_space(agent) == theirs.action_space(agent)
    assert type(ours.unwrapped).__module__.startswith("mpe2.")


def test_old_mpe_name_trains_with_ippo(tmp_path: Path) -> None:
    manifest = {
        "algorithm": {"name": "IPPO", "learn_step": 64, "batch_size": 64},
        "environment": {"name": "pettingzoo.mpe.simple_speaker_listener_v4", "num_envs": 2, "sync": True},
        "training": {"max_steps": 256, "evo_steps": 128, "run_dir": str(tmp_path / "run"), "progress": False},
    }
    LocalTrainer.from_manifest(manifest).train()
    rows = (tmp_path / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 2


def test_old_mpe_name_without_mpe2_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mpe2", None)  # what Python sees when mpe2 is not installed
    (problem,) = _problems({"name": "pettingzoo.mpe.simple_spread_v3"})
    assert problem.startswith("environment.name:")
    assert "pip install mpe2" in problem and "'mpe2.simple_spread_v3'" in problem
    assert "MPE has been moved" not in problem  # not PettingZoo's message repeated


def test_turn_based_pettingzoo_game_is_refused_at_validation() -> None:
    (problem,) = _problems({"name": "pettingzoo.classic.tictactoe_v3"})
    assert problem.startswith("environment.name:") and "turn-based" in problem and "is_parallelizable" in problem
