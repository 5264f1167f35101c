"""Tiny manifests and state comparison shared by the exact-resume and device tests; the record of
the ``envs_made`` fixture (conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TINY_EVO = 128
NET = {"latent_dim": 16, "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False}}
MPE = {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 4, "sync": True, "env_config": {"max_cycles": 25}}
ENVS = {
    "PPO": {"name": "CartPole-v1", "num_envs": 4, "sync": True},
    "A2C": {"name": "CartPole-v1", "num_envs": 4, "sync": True},
    "DQN": {"name": "CartPole-v1", "num_envs": 4, "sync": True},
    "RainbowDQN": {"name": "CartPole-v1", "num_envs": 4, "sync": True},
    "DDPG": {"name": "Pendulum-v1", "num_envs": 4, "sync": True},
    "TD3": {"name": "Pendulum-v1", "num_envs": 4, "sync": True},
    "SAC": {"name": "Pendulum-v1", "num_envs": 4, "sync": True},
    "TQC": {"name": "Pendulum-v1", "num_envs": 4, "sync": True},
    "IPPO": MPE,
    "MADDPG": MPE,
    "MATD3": MPE,
}


def tiny_manifest(algo: str, tmp: Path, max_steps: int = 2 * TINY_EVO) -> dict[str, Any]:
    env = ENVS.get(algo)
    if algo == "CQN":  # offline: trains on a small random-policy dataset recorded into tmp
        from offline_test_helpers import record_episodes, write_hdf5

        h5 = write_hdf5(tmp / "cqn.h5", record_episodes(None, 400, seed=0))
        env = {"name": "CartPole-v1", "num_envs": 4, "sync": True, "dataset_path": str(h5)}
    on_policy = algo in ("PPO", "IPPO", "A2C")
    # Every operator, so exact resume covers networks mutated in shape and activation.
    probabilities = {"no_mut": 0.1, "params_mut": 0.3, "rl_hp_mut": 0.3, "arch_mut": 0.3,
                     "new_layer": 0.5, "act_mut": 0.2}  # fmt: skip
    return {
        "algorithm": {"name": algo, "learn_step": 64 if on_policy else 4, **({} if algo == "A2C" else {"batch_size": 16})},
        "environment": env,
        "network": NET,
        "replay_buffer": {"max_size": 1000},
        "mutation": {"probabilities": probabilities, "rand_seed": 3},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
        "training": {"pop_size": 2, "max_steps": max_steps, "evo_steps": TINY_EVO, "eval_steps": 30, "eval_loop": 1,
                     **({} if on_policy else {"learning_delay": 32}), "seed": 7, "checkpoint_steps": TINY_EVO,
                     "checkpoint_path": str(tmp / "ckpt"), "progress": False, "save_elite": False},
    }  # fmt: skip


def flat_state(state: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a (nested) state dict, keyed by its path."""
    if isinstance(state, dict):
        out: dict[str, Any] = {}
        for k, v in state.items():
            out.update(flat_state(v, f"{prefix}/{k}"))
        return out
    if isinstance(state, (list, tuple)):
        out = {}
        for i, v in enumerate(state):
            out.update(flat_state(v, f"{prefix}[{i}]"))
        return out
    return {prefix: state}


@dataclass
class EnvsMade:
    """The envs validation built through ``agilerl_plugin_gym.envs.make_single_env`` and those it closed."""

    made: list[Any] = field(default_factory=list)
    closed: list[Any] = field(default_factory=list)

    def clear(self) -> None:
        self.made.clear()
        self.closed.clear()
