"""Every gym algorithm trains on the device it is given (``training.device``).

Each algorithm runs a tiny population (2 agents, mutation incl. architecture changes for the
single-agent ones, so rebuilt networks must land on the same device) on the CPU, and on CUDA when
this machine has it. All network weights must end on that device; host-side code converts with
``.cpu()`` before ``.numpy()``, so nothing breaks when tensors live on an accelerator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from gym_test_helpers import ENVS, flat_state, tiny_manifest

from agilerl.training.trainer import LocalTrainer

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")),
]


def _weights(agent: Any) -> dict[str, Any]:
    state = agent.state_dict()
    return flat_state(state.get("nets", state.get("modules")))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algo", list(ENVS))
def test_trains_on_the_given_device(algo: str, device: str, tmp_path: Path) -> None:
    m = tiny_manifest(algo, tmp_path, max_steps=128)
    m["training"].update(evo_steps=64, checkpoint_steps=None, device=device)
    result = LocalTrainer.from_manifest(m, run_dir=tmp_path / "run").train()
    assert all(a.steps == 128 for a in result.population)
    assert all(f == f for f in result.fitnesses)  # finite evaluations (no NaN)
    for agent in result.population:
        assert agent.device.type == device
        weights = _weights(agent)
        assert weights and all(t.device.type == device for t in weights.values() if isinstance(t, torch.Tensor))


@pytest.mark.parametrize("device", DEVICES)
def test_recurrent_ppo_trains_on_the_given_device(device: str, tmp_path: Path) -> None:
    """Recurrent PPO: the hidden state, the stored states and the BPTT sequences follow the device."""
    m = tiny_manifest("PPO", tmp_path, max_steps=128)
    m["algorithm"].update(recurrent=True, max_seq_len=8, batch_size=4)
    m["network"] = {"latent_dim": 16, "encoder_config": {"hidden_state_size": 16}}
    m["training"].update(evo_steps=64, checkpoint_steps=None, device=device)
    result = LocalTrainer.from_manifest(m, run_dir=tmp_path / "run").train()
    assert all(a.steps == 128 for a in result.population)
    assert all(f == f for f in result.fitnesses)
    for agent in result.population:
        assert agent.hidden_state.device.type == device
        assert all(v.device.type == device for v in _weights(agent).values() if isinstance(v, torch.Tensor))
