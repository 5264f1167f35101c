"""SimBa encoders (Lee et al. 2024, "SimBa: Simplicity Bias for Scaling Up Parameters in Deep RL").

``in_dim -> Linear(hidden_size) -> num_blocks x residual block -> LayerNorm -> Linear(out_dim)``, each
residual block being ``x + Linear(ReLU(Linear(LayerNorm(x))))`` with an inner width of
``hidden_size * scale_factor``. Built from AgileRL's ``encoder_config`` keys (``arch: simba`` or
``network.simba: true``): ``hidden_size`` (an int), ``num_blocks``, ``scale_factor``,
``min_blocks``/``max_blocks``, ``min_mlp_nodes``/``max_mlp_nodes``.

Architecture mutation, as AgileRL mutates SimBa: ``add_block`` / ``remove_block`` (layer level) and
``add_node`` / ``remove_node`` (the residual width ``hidden_size`` grows or shrinks by 16, 32 or 64).
A new block's output projection starts at zero, so adding a block preserves the function exactly;
the other mutations keep every surviving weight (the overlapping slice of each tensor).
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch
from torch import nn

from agilerl_plugin_gym.networks.layers import activation_layer, load_overlapping, orthogonal_, spec_kwargs
from agilerl_plugin_gym.sections import SimbaSpec

__all__ = ["EvolvableSimBa", "SimbaBlock"]


class SimbaBlock(nn.Module):
    """``x + fc2(relu(fc1(norm(x))))``; ``zero_out``: fc2 starts at zero (the block is the identity)."""

    def __init__(self, width: int, scale_factor: int, *, zero_out: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, width * scale_factor)
        self.fc2 = nn.Linear(width * scale_factor, width)
        nn.init.kaiming_uniform_(self.fc1.weight, nonlinearity="relu")
        nn.init.zeros_(self.fc1.bias)
        if zero_out:
            nn.init.zeros_(self.fc2.weight)
        else:
            nn.init.kaiming_uniform_(self.fc2.weight, nonlinearity="relu")
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class EvolvableSimBa(nn.Module):
    """A SimBa residual MLP from ``in_dim`` to ``out_dim`` (see the module docstring).

    :param output_activation: activation after the output layer (an encoder's latent is activated
        like a hidden layer: ReLU by default, as in AgileRL).
    """

    layer_methods = ("add_block", "remove_block")
    node_methods = ("add_node", "remove_node")

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden_size: int = 128,
        num_blocks: int = 1,
        *,
        scale_factor: int = 4,
        output_activation: str | None = "ReLU",
        min_blocks: int = 1,
        max_blocks: int = 4,
        min_mlp_nodes: int = 16,
        max_mlp_nodes: int = 500,
    ) -> None:
        super().__init__()
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.hidden_size, self.num_blocks = int(hidden_size), int(num_blocks)
        self.scale_factor = int(scale_factor)
        self.output_activation = output_activation
        self.min_blocks, self.max_blocks = int(min_blocks), int(max_blocks)
        self.min_mlp_nodes, self.max_mlp_nodes = int(min_mlp_nodes), int(max_mlp_nodes)
        self._build()

    @classmethod
    def from_spec(cls, spec: SimbaSpec, in_dim: int, out_dim: int, **overrides: Any) -> EvolvableSimBa:
        return cls(in_dim, out_dim, **spec_kwargs(spec, **overrides))

    def _build(self) -> None:
        h = self.hidden_size
        self.input = nn.Linear(self.in_dim, h)
        orthogonal_(self.input.weight)
        nn.init.zeros_(self.input.bias)
        self.blocks = nn.ModuleList(SimbaBlock(h, self.scale_factor) for _ in range(self.num_blocks))
        self.norm = nn.LayerNorm(h)
        self.output = nn.Linear(h, self.out_dim)
        orthogonal_(self.output.weight, math.sqrt(2))
        nn.init.zeros_(self.output.bias)
        self.output_act = activation_layer(self.output_activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input(x)
        for block in self.blocks:
            x = block(x)
        return self.output_act(self.output(self.norm(x)))

    def arch(self) -> dict[str, Any]:
        return {"hidden_size": self.hidden_size, "num_blocks": self.num_blocks}

    def set_arch(self, arch: dict[str, Any]) -> None:
        device = self.output.weight.device
        self.hidden_size, self.num_blocks = int(arch["hidden_size"]), int(arch["num_blocks"])
        self._build()
        self.to(device)

    # --- mutations -----------------------------------------------------------------------------
    def _rebuild_keeping_weights(self) -> None:
        """Rebuild at the current shape and copy the overlapping slice of every old tensor."""
        old = {k: v.detach().clone() for k, v in self.state_dict().items()}
        device = self.output.weight.device
        self._build()
        load_overlapping(self, old)
        self.to(device)

    def add_block(self) -> bool:
        """Append a residual block that starts as the identity (the function is unchanged)."""
        if self.num_blocks >= self.max_blocks:
            return False
        device = self.output.weight.device
        self.blocks.append(SimbaBlock(self.hidden_size, self.scale_factor, zero_out=True).to(device))
        self.num_blocks += 1
        return True

    def remove_block(self) -> bool:
        """Drop the last residual block."""
        if self.num_blocks <= max(self.min_blocks, 1):
            return False
        del self.blocks[-1]
        self.num_blocks -= 1
        return True

    def _node_count(self, numb_new_nodes: int | None, rng: random.Random | None) -> int:
        return numb_new_nodes if numb_new_nodes is not None else (rng or random.Random()).choice([16, 32, 64])

    def add_node(self, numb_new_nodes: int | None = None, *, rng: random.Random | None = None) -> bool:
        """Widen the residual stream by 16, 32 or 64 units (up to ``max_mlp_nodes``)."""
        n = min(self._node_count(numb_new_nodes, rng), self.max_mlp_nodes - self.hidden_size)
        if n <= 0:
            return False
        self.hidden_size += n
        self._rebuild_keeping_weights()
        return True

    def remove_node(self, numb_new_nodes: int | None = None, *, rng: random.Random | None = None) -> bool:
        """Narrow the residual stream by 16, 32 or 64 units (down to ``min_mlp_nodes``)."""
        n = min(self._node_count(numb_new_nodes, rng), self.hidden_size - self.min_mlp_nodes)
        if n <= 0:
            return False
        self.hidden_size -= n
        self._rebuild_keeping_weights()
        return True
