"""Primitives every evolvable network here is made of: activations by AgileRL's names, input sizes
of observation spaces, initialisation and the weight-preserving resize of a linear layer."""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl_plugin_gym.space_kinds import is_channels_last

__all__ = [
    "ACTIVATIONS",
    "activation_layer",
    "image_chw",
    "init_linear",
    "load_overlapping",
    "obs_dim",
    "orthogonal_",
    "resized_linear",
    "spec_kwargs",
    "swap_activations",
]

# Activations by the names AgileRL manifests use.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "Tanh": nn.Tanh,
    "GELU": nn.GELU,
    "ReLU": nn.ReLU,
    "ELU": nn.ELU,
    "LeakyReLU": nn.LeakyReLU,
    "Sigmoid": nn.Sigmoid,
    "Softplus": nn.Softplus,
    "Softmax": nn.Softmax,
    "PReLU": nn.PReLU,
    "Identity": nn.Identity,
}


def activation_layer(name: str | None) -> nn.Module:
    """The torch module for an activation name (``None`` -> identity)."""
    if name is None:
        return nn.Identity()
    if name == "GumbelSoftmax":  # only meaningful as an output activation for sampling; softmax here
        return nn.Softmax(dim=-1)
    try:
        cls = ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose from {sorted(ACTIVATIONS)}") from None
    return cls(dim=-1) if cls is nn.Softmax else cls()


def spec_kwargs(spec: Any, **overrides: Any) -> dict[str, Any]:
    """A network's keyword arguments from its encoder spec (``MlpSpec``, ``CnnSpec``, ...): every
    field but ``arch`` (the network classes name their parameters as the spec's fields), then
    ``overrides``. What each ``from_spec`` builds its network from."""
    kwargs = {name: getattr(spec, name) for name in type(spec).model_fields if name != "arch"}
    kwargs.update(overrides)
    return kwargs


def obs_dim(space: spaces.Space[Any]) -> int:
    """Flat input size of a vector observation space (Discrete is one-hot encoded; MultiDiscrete and
    MultiBinary are read as raw numbers)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return int(np.prod(space.shape))
    raise TypeError(f"unsupported observation space {space}")


def image_chw(space: spaces.Space[Any]) -> tuple[int, int, int]:
    """``(C, H, W)`` of an image space given as H x W x C (last axis smaller than the first) or C x H x W."""
    shape = tuple(int(d) for d in space.shape or ())
    return (shape[2], shape[0], shape[1]) if is_channels_last(space) else (shape[0], shape[1], shape[2])


@torch.no_grad()
def orthogonal_(tensor: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
    """``torch.nn.init.orthogonal_``'s initialisation (same draws from torch's generator, same sign
    convention), with the QR factorisation done by numpy in float64.

    torch's QR is its LAPACK build: the first call maps ~8 MB of its code into the process, a tenth
    of a small run's memory above torch itself (``benchmarks/gym/bench_cartpole.py`` measures peak
    RSS); numpy's LAPACK is already loaded. In float64 the factor is at least as close to
    orthogonal as torch's float32 one.
    """
    if tensor.ndim < 2:
        raise ValueError("only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = tensor.new_empty((rows, cols)).normal_(0, 1)
    a = flat.double().cpu().numpy()
    if rows < cols:
        a = a.T
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    tensor.copy_(torch.from_numpy(np.ascontiguousarray(q)).view_as(tensor).to(tensor.dtype)).mul_(gain)
    return tensor


def init_linear(layer: nn.Linear, gain: float = math.sqrt(2)) -> None:
    orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)


def resized_linear(
    w: torch.Tensor, b: torch.Tensor, *, rows: int | None = None, cols: int | None = None, gain: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """A linear layer's ``(W, b)`` with ``rows`` outputs and ``cols`` inputs: the overlapping block
    is kept, new rows get orthogonal weights (``gain``) and zero bias, new columns zero weight."""
    rows = w.shape[0] if rows is None else int(rows)
    cols = w.shape[1] if cols is None else int(cols)
    new_w = torch.zeros(rows, cols, device=w.device, dtype=w.dtype)
    new_b = torch.zeros(rows, device=b.device, dtype=b.dtype)
    r, c = min(rows, w.shape[0]), min(cols, w.shape[1])
    if rows > w.shape[0]:
        fresh = torch.empty(rows - w.shape[0], cols, device=w.device, dtype=w.dtype)
        orthogonal_(fresh, gain)
        new_w[r:] = fresh
    new_w[:r, :c] = w[:r, :c]
    new_b[:r] = b[:r]
    return new_w, new_b


class _Activated(Protocol):
    """A network whose hidden activations :func:`swap_activations` can replace."""

    activation: str
    output_activation: str | None
    acts: nn.ModuleList
    output_act: nn.Module
    output: nn.Linear


def swap_activations(module: _Activated, name: str, output: bool, widths: list[int]) -> bool:
    """Replace ``module.acts`` (one per entry of ``widths``) and, with ``output``, ``module.output_act``
    by activation ``name``; weights are untouched (parametrised activations such as PReLU start fresh)."""
    new_out = name if output else module.output_activation
    if name == module.activation and new_out == module.output_activation:
        return False
    device = module.output.weight.device
    module.activation, module.output_activation = name, new_out
    module.acts = nn.ModuleList(activation_layer(name) for _ in widths).to(device)
    module.output_act = activation_layer(new_out).to(device)
    return True


def load_overlapping(module: nn.Module, old_state: dict[str, torch.Tensor]) -> None:
    """Copy into ``module`` the overlapping slice of each tensor of ``old_state`` with the same name
    and rank (how a resized network keeps the weights that survive the resize)."""
    with torch.no_grad():
        for name, new in module.state_dict().items():
            prev = old_state.get(name)
            if prev is None or prev.dim() != new.dim():
                continue
            region = tuple(slice(0, min(a, b)) for a, b in zip(prev.shape, new.shape, strict=True))
            new[region] = prev[region].to(new.device)
