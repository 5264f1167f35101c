"""Exact resume for all nine gym algorithms, with evolutionary HPO on.

For each of PPO, DQN, DDPG, TD3, RainbowDQN, IPPO, MADDPG, MATD3 and CQN (offline, on a dataset
file), DQN with prioritized n-step replay, and the CNN, multi-input and SimBa encoders (with DDPG/TD3's
shared encoder): a population of 2 trains for two
generations with tournament selection and mutation (hyperparameters, parameter noise, and
architecture and activation) between them, writing a checkpoint after the first. A run
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
from gym_test_helpers import TINY_EVO, flat_state, tiny_manifest

from agilerl import checkpoint
from agilerl.training.trainer import LocalTrainer

HERE = Path(__file__).resolve().parent
EVO = TINY_EVO
ALGOS = ["PPO", "A2C", "DQN", "DDPG", "TD3", "SAC", "TQC", "RainbowDQN", "IPPO", "MADDPG", "MATD3", "CQN"]


def assert_same_state(a: Any, b: Any) -> None:
    fa, fb = flat_state(a), flat_state(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        x, y = fa[k], fb[k]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.shape == y.shape and torch.equal(x, y), k
        else:
            assert x == y, (k, x, y)


def _population(result: Any) -> list[dict[str, Any]]:
    return [a.state_dict() for a in sorted(result.population, key=lambda a: a.index)]


@pytest.mark.parametrize("algo", [*ALGOS, "DQN+PER+n-step", "IPPO+masking"])
def test_resumed_run_ends_exactly_like_the_uninterrupted_one(algo: str, tmp_path: Path) -> None:
    """RainbowDQN (and DQN with both replay options) also carry the sum tree and its max priority
    in the buffer's state; n-step windows end with each learn call, so none is open at a checkpoint.
    IPPO with action masking trains on a masked PettingZoo env (masked_pz_env.py)."""
    torch.set_num_threads(1)
    name, _, variant = algo.partition("+")
    m = tiny_manifest(name, tmp_path)
    if variant == "masking":
        m["algorithm"]["action_masking"] = True
        m["environment"] = {"name": "masked_choice", "entrypoint": "masked_pz_env:MaskedChoiceParallelEnv",
                            "path": str(HERE), "env_config": {"best_first": True}, "num_envs": 4, "sync": True}  # fmt: skip
    elif variant:
        m["replay_buffer"].update(per_buffer=True, n_step_buffer=True, n_step_buffer_args={"n_step": 3})
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


def test_recurrent_ppo_resumes_exactly_with_its_hidden_state(tmp_path: Path) -> None:
    """Recurrent PPO (LSTM encoder, architecture mutation of the LSTM on): the checkpoint holds each
    agent's hidden state, and the resumed run ends exactly like the uninterrupted one."""
    torch.set_num_threads(1)
    m = tiny_manifest("PPO", tmp_path)
    m["algorithm"].update(recurrent=True, max_seq_len=8, batch_size=4)
    m["network"] = {"latent_dim": 16, "encoder_config": {"hidden_state_size": 16, "max_hidden_state_size": 64}}
    full = LocalTrainer.from_manifest(m, run_dir=tmp_path / "full").train()
    ckpt = tmp_path / f"ckpt_{EVO}.pt"
    saved = checkpoint.load(ckpt)["agents"]
    assert all(a["extra"]["hidden_state"].shape[0] == m["environment"]["num_envs"] for a in saved)
    resumed = LocalTrainer.from_manifest(m, run_dir=tmp_path / "resumed", resume_from=ckpt).train()
    assert resumed.fitnesses == full.fitnesses
    assert_same_state(_population(resumed), _population(full))


def _cli(manifest: dict[str, Any], tmp: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    code = "import sys; from agilerl.cli import main; sys.exit(main(sys.argv[1:]))"
    # The parent's PYTHONPATH after HERE: the subprocess imports the same sources as this process.
    pythonpath = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    cmd = [sys.executable, "-c", code, "train", str(path), "--run-dir", str(tmp / name), "--no-progress", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=None)


@pytest.mark.slow  # three `agilerl train` subprocesses each
@pytest.mark.parametrize(
    "algo,after,learned",
    [("PPO", 10, [0]), ("A2C", 10, [0]), ("DQN", 40, [0, 1]), ("TD3", 10, [0]), ("SAC", 40, [0, 1]), ("TQC", 10, [0]), ("DDPG", 40, [0, 1]),
     ("RainbowDQN", 40, [0, 1]), ("IPPO", 10, [0]), ("MADDPG", 40, [0, 1]), ("MATD3", 10, [0])],
)  # fmt: skip
def test_sigint_mid_generation_resumes_exactly(algo: str, after: int, learned: list[int], tmp_path: Path) -> None:
    """A sub-env steps 32 times per learn call: the signal comes in agent 0's first learn (after
    10 steps: agent 1 has not learned yet) or in agent 1's (after 40: neither is evaluated yet)."""
    m = tiny_manifest(algo, tmp_path)
    m["training"]["checkpoint_steps"] = m["training"]["max_steps"]  # final checkpoint only
    done = _cli(m, tmp_path, "full")
    assert done.returncode == 0, done.stdout + done.stderr
    reference = checkpoint.load(tmp_path / f"ckpt_{m['training']['max_steps']}.pt")
    (tmp_path / f"ckpt_{m['training']['max_steps']}.pt").unlink()

    single = algo not in ("IPPO", "MADDPG", "MATD3")  # gym wrappers: module.attr; PettingZoo: module:attr
    wrapper, sep = ("SigintAfter", ".") if single else ("SigintAfterParallel", ":")
    wrapped = {**m, "environment": {**m["environment"], "path": str(HERE),
                                    "env_wrappers": [[f"gym_test_wrappers{sep}{wrapper}", {"steps": after}]]}}  # fmt: skip
    stopped = _cli(wrapped, tmp_path, "stopped")
    assert stopped.returncode == 130, stopped.stdout + stopped.stderr
    interrupted = tmp_path / "ckpt_interrupted.pt"
    payload = checkpoint.load(interrupted)
    assert payload["phase"] == "trained" and payload["generation"] == 0
    assert payload["progress"]["done"] == learned  # the agents whose step of this generation is complete
    resumed = _cli(m, tmp_path, "resumed", "--resume", str(interrupted))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    final = checkpoint.load(tmp_path / f"ckpt_{m['training']['max_steps']}.pt")
    assert [a["steps"] for a in final["agents"]] == [m["training"]["max_steps"]] * 2
    assert_same_state(final["agents"], reference["agents"])
    assert_same_state(final["strategy"], reference["strategy"])


@pytest.mark.parametrize("algo", ["PPO", "IPPO", "DQN", "MADDPG"])
def test_step_budget_is_never_exceeded(algo: str, tmp_path: Path) -> None:
    """Budgets that are no multiple of the rollout length (64 env steps here): the last rollout of
    a ``learn`` call is shortened, so every agent ends exactly at ``max_steps``, generation by
    generation at multiples of ``evo_steps``."""
    m = tiny_manifest(algo, tmp_path, max_steps=200)
    m["training"].update(evo_steps=120, checkpoint_steps=None)
    result = LocalTrainer.from_manifest(m, run_dir=tmp_path / "run").train()
    assert [a.steps for a in result.population] == [200, 200]
    assert sorted({r["steps"] for r in result.history}) == [120, 200]


_TESTS = str(HERE)
#: Encoders the encoder work added, each in a run with architecture mutation between generations.
ENCODER_CASES = {
    "DQN-cnn": ("DQN", {"name": "Pixels", "custom": True, "entrypoint": "encoder_envs:PixelChase", "path": _TESTS,
                        "num_envs": 4, "sync": True},
                {"latent_dim": 16, "encoder_config": {"arch": "cnn", "channel_size": [8], "kernel_size": [3],
                                                      "stride_size": [1]}}),
    "TD3-multiinput-shared": ("TD3", {"name": "Reach", "custom": True, "entrypoint": "encoder_envs:DictReach",
                                      "path": _TESTS, "num_envs": 4, "sync": True},
                              {"latent_dim": 16, "encoder_config": {"latent_dim": 8, "vector_space_mlp": True,
                                                                    "mlp_config": {"hidden_size": [16]}}}),
    "SAC-multiinput": ("SAC", {"name": "Reach", "custom": True, "entrypoint": "encoder_envs:DictReach",
                               "path": _TESTS, "num_envs": 4, "sync": True},
                       {"latent_dim": 16, "encoder_config": {"latent_dim": 8, "vector_space_mlp": True,
                                                             "mlp_config": {"hidden_size": [16]}}}),
    "PPO-simba": ("PPO", {"name": "CartPole-v1", "num_envs": 4, "sync": True},
                  {"latent_dim": 16, "simba": True, "encoder_config": {"hidden_size": 16, "num_blocks": 1}}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(ENCODER_CASES))
def test_encoders_resume_exactly(case: str, tmp_path: Path) -> None:
    """CNN, multi-input (with DDPG/TD3's share_encoders) and SimBa encoders, mutated between
    generations (architecture mutation only, so the encoders' shapes change): the resumed run ends
    with the same parameters and returns."""
    torch.set_num_threads(1)
    algo, env, network = ENCODER_CASES[case]
    m = tiny_manifest(algo, tmp_path)
    m["environment"], m["network"] = env, network
    m["mutation"]["probabilities"] = {"no_mut": 0.0, "params_mut": 0.0, "rl_hp_mut": 0.0, "arch_mut": 1.0,
                                      "new_layer": 0.5, "act_mut": 0.0}  # fmt: skip
    if algo == "TD3":
        m["algorithm"]["share_encoders"] = True
    full = LocalTrainer.from_manifest(m, run_dir=tmp_path / "full").train()
    resumed = LocalTrainer.from_manifest(m, run_dir=tmp_path / "resumed", resume_from=tmp_path / f"ckpt_{EVO}.pt")
    out = resumed.train()
    assert out.fitnesses == full.fitnesses
    assert_same_state(_population(out), _population(full))
    assert any(str(r["mutation"]).startswith("arch:encoder.") for r in full.history)  # an encoder changed shape
