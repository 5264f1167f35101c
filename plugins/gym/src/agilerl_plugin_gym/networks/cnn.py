"""The evolvable convolutional encoder for image observations."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from agilerl_plugin_gym.networks.layers import (
    activation_layer,
    init_linear,
    orthogonal_,
    resized_linear,
    spec_kwargs,
    swap_activations,
)
from agilerl_plugin_gym.sections import CnnSpec

__all__ = ["EvolvableCNN"]


class EvolvableCNN(nn.Module):
    """Convolutional encoder for image observations: convs -> flatten -> linear to ``out_dim``.

    Input is ``(batch, C, H, W)`` float; :class:`EvolvableNetwork` converts H x W x C uint8 images.

    :param input_shape: ``(C, H, W)``.
    :param out_dim: output features (the latent size).
    :param channel_size, kernel_size, stride_size: one entry per conv layer.
    :param activation: activation after each conv and after the output layer.
    :param min_hidden_layers, max_hidden_layers, min_channel_size, max_channel_size: mutation bounds.
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        out_dim: int,
        channel_size: Sequence[int] = (16, 32),
        kernel_size: Sequence[int] = (8, 4),
        stride_size: Sequence[int] = (4, 2),
        *,
        activation: str = "ReLU",
        output_activation: str | None = "ReLU",
        layer_norm: bool = False,
        init_layers: bool = True,
        min_hidden_layers: int = 1,
        max_hidden_layers: int = 6,
        min_channel_size: int = 8,
        max_channel_size: int = 256,
    ) -> None:
        super().__init__()
        self.input_shape = tuple(int(s) for s in input_shape)
        self.out_dim = int(out_dim)
        self.channel_size = [int(c) for c in channel_size]
        self.kernel_size = [int(k) for k in kernel_size]
        self.stride_size = [int(s) for s in stride_size]
        self.activation = activation
        self.output_activation = output_activation
        self.layer_norm = layer_norm
        self.init_layers = init_layers
        self.min_hidden_layers, self.max_hidden_layers = min_hidden_layers, max_hidden_layers
        self.min_channel_size, self.max_channel_size = min_channel_size, max_channel_size
        self._build()

    @classmethod
    def from_spec(cls, spec: CnnSpec, input_shape: Sequence[int], out_dim: int) -> EvolvableCNN:
        return cls(input_shape, out_dim, **spec_kwargs(spec))

    def _build(self) -> None:
        c_in = self.input_shape[0]
        convs = []
        for c, k, s in zip(self.channel_size, self.kernel_size, self.stride_size, strict=True):
            # "same" padding for stride-1 layers keeps the spatial size (identity layers need it).
            convs.append(nn.Conv2d(c_in, c, k, s, padding=k // 2 if s == 1 else 0))
            c_in = c
        self.convs = nn.ModuleList(convs)
        self.acts = nn.ModuleList(activation_layer(self.activation) for _ in convs)
        with torch.no_grad():
            x = torch.zeros(1, *self.input_shape)
            for conv in self.convs:
                x = conv(x)
        self.flat_dim = int(x.numel())
        self.output = nn.Linear(self.flat_dim, self.out_dim)
        self.output_act = activation_layer(self.output_activation)
        if self.init_layers:
            for weight, bias in self._conv_params():
                orthogonal_(weight, math.sqrt(2))
                nn.init.zeros_(bias)
            init_linear(self.output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, act in zip(self.convs, self.acts, strict=True):
            x = act(conv(x))
        return self.output_act(self.output(x.flatten(1)))

    def arch(self) -> dict[str, Any]:
        return {
            "channel_size": list(self.channel_size),
            "kernel_size": list(self.kernel_size),
            "stride_size": list(self.stride_size),
            "activation": self.activation,
            "output_activation": self.output_activation,
            "out_dim": self.out_dim,
        }

    def set_arch(self, arch: dict[str, Any]) -> None:
        device = self.output.weight.device
        self.channel_size = [int(c) for c in arch["channel_size"]]
        self.kernel_size = [int(k) for k in arch["kernel_size"]]
        self.stride_size = [int(s) for s in arch["stride_size"]]
        self.activation = str(arch.get("activation", self.activation))
        self.output_activation = arch.get("output_activation", self.output_activation)
        self.out_dim = int(arch.get("out_dim", self.out_dim))
        self._build()
        self.to(device)

    def _conv_params(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(weight, bias)`` of each conv layer, in order."""
        params: list[tuple[torch.Tensor, torch.Tensor]] = []
        for conv in self.convs:
            # ``nn.ModuleList`` iterates as plain ``nn.Module``; ``_build`` only puts biased Conv2d in it.
            assert isinstance(conv, nn.Conv2d) and conv.bias is not None
            params.append((conv.weight, conv.bias))
        return params

    def _snapshot(self) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]:
        convs = [(w.detach().clone(), b.detach().clone()) for w, b in self._conv_params()]
        return convs, (self.output.weight.detach().clone(), self.output.bias.detach().clone())

    def _load(
        self, convs: list[tuple[torch.Tensor, torch.Tensor]], out: tuple[torch.Tensor, torch.Tensor] | None
    ) -> None:
        device = self.output.weight.device
        self._build()
        with torch.no_grad():
            for (weight, bias), (w, b) in zip(self._conv_params(), convs, strict=True):
                weight.copy_(w)
                bias.copy_(b)
            if out is not None and out[0].shape == self.output.weight.shape:
                self.output.weight.copy_(out[0])
                self.output.bias.copy_(out[1])
        self.to(device)

    def add_layer(self) -> bool:
        """Append a 3x3 stride-1 conv initialised to the identity (function-preserving for ReLU)."""
        if len(self.channel_size) >= self.max_hidden_layers:
            return False
        convs, out = self._snapshot()
        c = self.channel_size[-1]
        w = torch.zeros(c, c, 3, 3, device=out[0].device)
        w[range(c), range(c), 1, 1] = 1.0
        self.channel_size.append(c)
        self.kernel_size.append(3)
        self.stride_size.append(1)
        self._load([*convs, (w, torch.zeros(c, device=w.device))], out)
        return True

    def remove_layer(self) -> bool:
        """Remove the last conv (the output layer is re-initialised if its input size changed)."""
        if len(self.channel_size) <= max(self.min_hidden_layers, 1):
            return False
        convs, out = self._snapshot()
        for lst in (self.channel_size, self.kernel_size, self.stride_size):
            lst.pop()
        self._load(convs[:-1], out)
        return True

    def add_channel(
        self, hidden_layer: int | None = None, numb_new_channels: int | None = None, *, rng: random.Random | None = None
    ) -> bool:
        """Add output channels to a conv; the next layer reads them with zero weights."""
        rng = rng or random.Random()
        i = rng.randrange(len(self.channel_size)) if hidden_layer is None else hidden_layer
        n = numb_new_channels if numb_new_channels is not None else rng.choice([8, 16, 32])
        n = min(n, self.max_channel_size - self.channel_size[i])
        if n <= 0:
            return False
        convs, out = self._snapshot()
        w, b = convs[i]
        extra = torch.empty(n, *w.shape[1:], device=w.device)
        orthogonal_(extra, math.sqrt(2))
        convs[i] = (torch.cat([w, extra]), torch.cat([b, torch.zeros(n, device=b.device)]))
        if i + 1 < len(convs):
            wn, bn = convs[i + 1]
            convs[i + 1] = (torch.cat([wn, torch.zeros(wn.shape[0], n, *wn.shape[2:], device=wn.device)], dim=1), bn)
            new_out: tuple[torch.Tensor, torch.Tensor] | None = out
        else:
            # The flatten is channel-major: the new channels' features come after the old ones.
            spatial = self.flat_dim // self.channel_size[i]
            wo, bo = out
            new_out = (torch.cat([wo, torch.zeros(wo.shape[0], n * spatial, device=wo.device)], dim=1), bo)
        self.channel_size[i] += n
        self._load(convs, new_out)
        return True

    def remove_channel(
        self, hidden_layer: int | None = None, numb_new_channels: int | None = None, *, rng: random.Random | None = None
    ) -> bool:
        """Drop the last channels of a conv (approximate)."""
        rng = rng or random.Random()
        i = rng.randrange(len(self.channel_size)) if hidden_layer is None else hidden_layer
        n = numb_new_channels if numb_new_channels is not None else rng.choice([8, 16, 32])
        n = min(n, self.channel_size[i] - self.min_channel_size)
        if n <= 0:
            return False
        convs, out = self._snapshot()
        keep = self.channel_size[i] - n
        w, b = convs[i]
        convs[i] = (w[:keep], b[:keep])
        if i + 1 < len(convs):
            wn, bn = convs[i + 1]
            convs[i + 1] = (wn[:, :keep], bn)
            new_out: tuple[torch.Tensor, torch.Tensor] | None = out
        else:
            spatial = self.flat_dim // self.channel_size[i]
            new_out = (out[0][:, : keep * spatial], out[1])
        self.channel_size[i] = keep
        self._load(convs, new_out)
        return True

    # --- activation and latent-size mutation -----------------------------------------------------
    def set_activation(self, name: str, *, output: bool = False) -> bool:
        """Use ``name`` after every conv (and after the output layer with ``output``), keeping weights."""
        return swap_activations(self, name, output, list(self.channel_size))

    def resize_output(self, out_dim: int) -> bool:
        """Give the output layer ``out_dim`` units, keeping the weights of the units that remain."""
        if out_dim == self.out_dim:
            return False
        convs, out = self._snapshot()
        self.out_dim = int(out_dim)
        self._load(convs, resized_linear(*out, rows=out_dim, gain=math.sqrt(2)))
        return True
