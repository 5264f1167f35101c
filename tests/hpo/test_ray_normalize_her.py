"""The gym plugin's per-member normalisation statistics and HER replay buffer on the Ray backend.

A population trained on Ray must end exactly like the local run: the normaliser travels inside each
pickled member, the HER buffer (episodes, ring, sampling RNG) in the strategy state sent both ways.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from agilerl import LocalTrainer

HER_NORMALIZE: dict[str, Any] = {
    "algorithm": {"name": "DQN", "learn_step": 4, "batch_size": 16},
    "environment": {"name": "BitFlipping", "custom": True, "entrypoint": "agilerl_plugin_gym.goal_envs:BitFlippingEnv",
                    "env_config": {"n_bits": 4}, "num_envs": 2, "sync": True,
                    "normalize": {"obs": True, "reward": True}},
    "network": {"latent_dim": 16, "encoder_config": {"arch": "multiinput", "vector_space_mlp": True}},
    "replay_buffer": {"max_size": 1000, "her": True, "her_args": {"n_sampled_goal": 2}},
    "mutation": {"probabilities": {"no_mut": 0.5, "params_mut": 0.5}},
    "tournament_selection": {"tournament_size": 2, "elitism": True},
    "training": {"pop_size": 2, "max_steps": 200, "evo_steps": 100, "eval_steps": 20, "learning_delay": 20,
                 "seed": 5, "progress": False, "save_elite": False},
}  # fmt: skip


def _manifest(tmp: Path, run: str, **training: Any) -> dict[str, Any]:
    m = copy.deepcopy(HER_NORMALIZE)
    m["training"].update({"run_dir": str(tmp / run), **training})
    return m


def _tensors(state: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        return {k: v for key, value in state.items() for k, v in _tensors(value, f"{prefix}.{key}").items()}
    return {}


def test_normalised_her_population_trains_on_ray_like_local(tmp_path: Path, ray_local: Any) -> None:
    local = LocalTrainer.from_manifest(_manifest(tmp_path, "local")).train()
    remote = LocalTrainer.from_manifest(_manifest(tmp_path, "ray", backend="ray")).train()
    assert remote.fitnesses == local.fitnesses
    for a, b in zip(local.population, remote.population, strict=True):
        assert a.normalizer is not None and b.normalizer is not None
        ta, tb = _tensors(a.state_dict()), _tensors(b.state_dict())
        assert ta.keys() == tb.keys() and any(".normalizer." in k for k in ta)
        assert all(torch.equal(ta[k], tb[k]) for k in ta)
