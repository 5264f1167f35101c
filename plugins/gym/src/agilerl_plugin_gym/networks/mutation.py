"""The network-level mutation operators: parameter noise and the activation draw."""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["add_parameter_noise", "pick_activation"]


def pick_activation(current: str | None, choices: Sequence[str], rng: random.Random) -> str:
    """Activation mutation's draw (AgileRL's rule): uniform over ``choices`` without the current
    activation (unless it is the only choice)."""
    options = [c for c in choices if c != current] or list(choices)
    return rng.choice(options)


def add_parameter_noise(
    module: nn.Module, sd: float, rng: random.Random | None = None, *, fraction: float = 0.1
) -> int:
    """Parameter mutation: perturb a random ``fraction`` of the entries of each 2-D+ weight.

    Of the chosen entries 95% get Gaussian noise with std ``sd * |w|`` and 5% are reset to N(0, sd)
    (AgileRL's scheme). Norm layers and biases are left alone. Returns the number of entries changed.
    """
    rng = rng or random.Random()
    gen = torch.Generator().manual_seed(rng.getrandbits(63))
    changed = 0
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() < 2 or "norm" in name:
                continue
            flat = p.data.view(-1)
            k = max(1, int(flat.numel() * fraction))
            idx = torch.randperm(flat.numel(), generator=gen)[:k].to(p.device)
            reset = torch.rand(k, generator=gen).to(p.device) < 0.05
            noise = torch.randn(k, generator=gen).to(p.device)
            vals = flat[idx]
            new = torch.where(reset, noise * sd, vals + noise * sd * vals.abs())
            flat[idx] = new.clamp(-1e6, 1e6)
            changed += k
    return changed
