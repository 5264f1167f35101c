"""Exact resume for all seven gym algorithms, with evolutionary HPO on.

For each of PPO, DQN, DDPG, TD3, IPPO, MADDPG and MATD3: a population of 2 trains for two
generations with tournament selection and mutation (hyperparameters, parameter noise, and
architecture for the single-agent ones) between them, writing a checkpoint after the first. A run
resumed from that checkpoint must end with the very same parameters, optimizer state and evaluation
returns as the uninterrupted run, and no agent's step count may pass the budget. What makes it hold:
every counter and RNG lives in checkpointed state (network/optimizer state, ``vec_steps``, epsilon,
update counters, the replay buffer and its sampling RNG, the strategy's exploration RNG, the
torch/selection/mutation RNGs), each ``learn`` call resets the env with a seed derived from that
state, and evaluation resets its env with a fixed seed.

The SIGINT tests run ``agilerl train`` in a subprocess whose env sends the process a real SIGINT
mid-generation: the loop defers it to the end of the current agent's ``learn``, writes the
interrupted checkpoint, and the resumed run ends exactly where the uninterrupted one does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from agilerl import checkpoint
from agilerl.training.trainer import LocalTrainer

HERE = Path(__file__).resolve().parent
EVO = 128
NET = {"latent_dim": 16, "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False}}
MPE = {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 4, "sync": True, "env_config": {"max_cycles": 25}}
ENVS = {
    "PPO": {"name": "CartPole-v1", "num_envs": 4, "sync": True},
    "DQN": {"name": "CartPole-v1", "num_envs": 4, "sync": True},
    "DDPG": {"name": "Pendulum-v1", "num_envs": 4, "sync": True},
    "TD3": {"name": "Pendulum-v1", "num_envs": 4, "sync": True},
    "IPPO": MPE,
    "MADDPG": MPE,
    "MATD3": MPE,
}


def _manifest(algo: str, tmp: Path, max_steps: int = 2 * EVO) -> dict[str, Any]:
    single = algo in ("PPO", "DQN", "DDPG", "TD3")
    on_policy = algo in ("PPO", "IPPO")
    probabilities = {"no_mut": 0.1, "params_mut": 0.3, "rl_hp_mut": 0.3, "arch_mut": 0.3 if single else 0.0,
                     "new_layer": 0.5, "act_mut": 0.0}  # fmt: skip
    return {
        "algorithm": {"name": algo, "batch_size": 16, "learn_step": 64 if on_policy else 4},
        "environment": ENVS[algo],
        "network": NET,
        "replay_buffer": {"max_size": 1000},
        "mutation": {"probabilities": probabilities, "rand_seed": 3},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
        "training": {"pop_size": 2, "max_steps": max_steps, "evo_steps": EVO, "eval_steps": 30, "eval_loop": 1,
                     "learning_delay": 32, "seed": 7, "checkpoint_steps": EVO,
                     "checkpoint_path": str(tmp / "ckpt"), "progress": False, "save_elite": False},
    }  # fmt: skip


def _flat(state: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a (nested) state dict, keyed by its path."""
    if isinstance(state, dict):
        out: dict[str, Any] = {}
        for k, v in state.items():
            out.update(_flat(v, f"{prefix}/{k}"))
        return out
    if isinstance(state, (list, tuple)):
        out = {}
        for i, v in enumerate(state):
            out.update(_flat(v, f"{prefix}[{i}]"))
        return out
    return {prefix: state}


def assert_same_state(a: Any, b: Any) -> None:
    fa, fb = _flat(a), _flat(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        x, y = fa[k], fb[k]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.shape == y.shape and torch.equal(x, y), k
        else:
            assert x == y, (k, x, y)


def _population(result: Any) -> list[dict[str, Any]]:
    return [a.state_dict() for a in sorted(result.population, key=lambda a: a.index)]


@pytest.mark.parametrize("algo", list(ENVS))
def test_resumed_run_ends_exactly_like_the_uninterrupted_one(algo: str, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    m = _manifest(algo, tmp_path)
    full = LocalTrainer.from_manifest(m, run_dir=tmp_path / "full").train()
    assert all(a.steps == m["training"]["max_steps"] for a in full.population)
    assert full.generations == 2
    ckpt = tmp_path / f"ckpt_{EVO}.pt"
    assert ckpt.is_file()
    resumed = LocalTrainer.from_manifest(m, run_dir=tmp_path / "resumed", resume_from=ckpt).train()
    assert resumed.fitnesses == full.fitnesses
    assert [a.steps for a in resumed.population] == [a.steps for a in full.population]
    assert_same_state(_population(resumed), _population(full))
    # The evolution between the generations happened in both (and changed something).
    assert [r["fitness"] for r in resumed.history] == [r["fitness"] for r in full.history if r["generation"] == 1]


def _cli(manifest: dict[str, Any], tmp: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    code = "import sys; from agilerl.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    cmd = [sys.executable, "-c", code, "train", str(path), "--run-dir", str(tmp / name), "--no-progress", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=None)


@pytest.mark.parametrize("algo,after,learned", [("PPO", 10, [0]), ("DQN", 40, [0, 1])])
def test_sigint_mid_generation_resumes_exactly(algo: str, after: int, learned: list[int], tmp_path: Path) -> None:
    """A sub-env steps 32 times per learn call: the signal comes in agent 0's first learn (PPO:
    agent 1 has not learned yet) or agent 1's (DQN: neither is evaluated yet)."""
    m = _manifest(algo, tmp_path)
    m["training"]["checkpoint_steps"] = m["training"]["max_steps"]  # final checkpoint only
    done = _cli(m, tmp_path, "full")
    assert done.returncode == 0, done.stdout + done.stderr
    reference = checkpoint.load(tmp_path / f"ckpt_{m['training']['max_steps']}.pt")
    (tmp_path / f"ckpt_{m['training']['max_steps']}.pt").unlink()

    wrapped = {**m, "environment": {**m["environment"], "path": str(HERE),
                                    "env_wrappers": [["gym_test_wrappers.SigintAfter", {"steps": after}]]}}  # fmt: skip
    stopped = _cli(wrapped, tmp_path, "stopped")
    assert stopped.returncode == 130, stopped.stdout + stopped.stderr
    interrupted = tmp_path / "ckpt_interrupted.pt"
    payload = checkpoint.load(interrupted)
    assert payload["phase"] == "trained" and payload["generation"] == 0
    assert payload["learned"] == learned  # the agents that finished this generation's learn
    resumed = _cli(m, tmp_path, "resumed", "--resume", str(interrupted))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    final = checkpoint.load(tmp_path / f"ckpt_{m['training']['max_steps']}.pt")
    assert [a["steps"] for a in final["agents"]] == [m["training"]["max_steps"]] * 2
    assert_same_state(final["agents"], reference["agents"])
    assert_same_state(final["strategy"], reference["strategy"])
