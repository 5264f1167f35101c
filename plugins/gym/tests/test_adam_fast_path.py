"""The fused-Adam fast path of the single-agent algorithms is the same math as ``Optimizer.step``."""

from __future__ import annotations

import copy

import torch
from torch import nn

from agilerl_plugin_gym.single_agent.base import GymAlgorithm


def _train(net: nn.Module, opt: torch.optim.Optimizer, fast: bool, steps: int = 20) -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.randn(32, 4, generator=gen)
        for p in net.parameters():
            p.grad = None
        net(x).pow(2).mean().backward()
        if fast:
            GymAlgorithm._adam_step(opt)
        else:
            opt.step()


def test_fast_adam_step_matches_optimizer_step_and_survives_reload() -> None:
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    fast = copy.deepcopy(ref)
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2, fused=True)
    opt_fast = torch.optim.Adam(fast.parameters(), lr=1e-2, fused=True)
    _train(ref, opt_ref, fast=False)
    _train(fast, opt_fast, fast=True)
    assert getattr(opt_fast, "_agilerl_fast", (None, None))[1] is not None  # the fast path ran
    for a, b in zip(ref.parameters(), fast.parameters(), strict=True):
        assert torch.equal(a, b)
    sd_ref, sd_fast = opt_ref.state_dict(), opt_fast.state_dict()
    for i, st in sd_ref["state"].items():
        for k, v in st.items():
            assert torch.equal(v, sd_fast["state"][i][k]), k
    # A reloaded optimizer state (resume) replaces the state tensors: the cache must follow.
    opt_fast.load_state_dict(copy.deepcopy(sd_ref))
    _train(ref, opt_ref, fast=False)
    _train(fast, opt_fast, fast=True)
    for a, b in zip(ref.parameters(), fast.parameters(), strict=True):
        assert torch.equal(a, b)
