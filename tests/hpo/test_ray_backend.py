"""``training.backend: ray``: members train on Ray actors, with the same results as ``local``.

A population of 4 PPO agents on CartPole trains for two generations (tournament selection and
mutation in between) once in this process and once on a local Ray instance with 2 workers; the
fitness histories and every parameter of every member must be identical.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl import LocalTrainer
from agilerl.errors import ManifestError
from agilerl.models import load_manifest

PPO_CARTPOLE: dict[str, Any] = {
    "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32, "update_epochs": 2, "lr": 0.003},
    "environment": {"name": "CartPole-v1", "num_envs": 2},
    "network": {"latent_dim": 16, "arch": "mlp", "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}},
    "mutation": {
        "probabilities": {"no_mut": 0.4, "arch_mut": 0.2, "params_mut": 0.2, "rl_hp_mut": 0.2},
        "rl_hp_selection": {"lr": {"min": 0.0001, "max": 0.01}},
    },
    "tournament_selection": {"tournament_size": 2, "elitism": True},
    "training": {"pop_size": 4, "max_steps": 256, "evo_steps": 128, "eval_loop": 1, "eval_steps": 100,
                 "seed": 3, "progress": False, "save_elite": False},
}  # fmt: skip


def manifest(tmp: Path, name: str, **training: Any) -> dict[str, Any]:
    m = copy.deepcopy(PPO_CARTPOLE)
    m["training"].update({"run_dir": str(tmp / name), **training})
    return m


def params(agent: Any) -> dict[str, torch.Tensor]:
    return {f"{n}.{k}": v for n, net in agent.nets.items() for k, v in net.state_dict().items()}


def assert_same_population(a: list[Any], b: list[Any]) -> None:
    assert [x.index for x in a] == [x.index for x in b]
    assert [x.fitness for x in a] == [x.fitness for x in b]
    assert [x.steps for x in a] == [x.steps for x in b]
    for x, y in zip(a, b, strict=True):
        px, py = params(x), params(y)
        assert px.keys() == py.keys()
        for k in px:
            assert torch.equal(px[k], py[k]), f"agent {x.index}: {k} differs"


def test_ray_fields_need_the_ray_backend() -> None:
    m = copy.deepcopy(PPO_CARTPOLE)
    m["training"]["num_gpus_per_member"] = 1
    with pytest.raises(ManifestError, match="num_gpus_per_member only apply with backend: ray"):
        load_manifest(m)


def test_local_and_ray_give_identical_populations(tmp_path: Path, ray_local: Any) -> None:
    local = LocalTrainer.from_manifest(manifest(tmp_path, "local")).train()
    remote = LocalTrainer.from_manifest(manifest(tmp_path, "ray", backend="ray", ray_workers=2)).train()
    assert local.generations == remote.generations == 2
    assert remote.fitnesses == local.fitnesses
    assert_same_population(local.population, remote.population)
    # The workers' learn metrics reached the driver's metrics file, one row per member and generation.
    rows = [r for r in remote.history if "loss" in r or "train_return" in r]
    assert len(rows) == 8
    assert (tmp_path / "ray" / "metrics.jsonl").read_text().count("\n") == 8
