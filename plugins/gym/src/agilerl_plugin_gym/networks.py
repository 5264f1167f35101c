"""Evolvable networks built from the manifest's ``network`` section (public API, shared by plugins).

A network is an *encoder* (MLP for vector observations, CNN for H x W x C images) that maps an
observation to a ``latent_dim`` vector, followed by a *head* (an MLP) that maps the latent vector to
the outputs an algorithm needs (action logits, Q-values, a value, ...)::

    from agilerl.models import NetworkSpec
    from agilerl_plugin_gym.networks import EvolvableNetwork

    net = EvolvableNetwork.from_spec(NetworkSpec(latent_dim=64), observation_space, out_dim=2)
    q = net(obs_tensor)                            # (batch, 2)

Every module here is *evolvable*: it can grow or shrink without being rebuilt by hand, which is what
architecture mutation (evolutionary HPO) needs. Growth is function-preserving where the maths allows:

* :meth:`EvolvableMLP.add_layer` inserts a hidden layer initialised to the identity, so with a
  ReLU-family activation and no layer norm the network computes exactly the same function;
* :meth:`EvolvableMLP.add_node` adds units whose outgoing weights are zero: the output is unchanged;
* :meth:`EvolvableCNN.add_channel` / :meth:`EvolvableCNN.add_layer` do the same for convolutions;
* removals cannot preserve the function; they keep the surviving weights (removing the last hidden
  layer folds it linearly into the next one) so the network starts close to where it was.

The encoder's output size (``latent_dim``) never changes under encoder mutations, so heads stay
valid and a shared encoder can be mutated once for every head that reads it. Only the
``latent.add_node`` / ``latent.remove_node`` mutations (offered when the manifest gives
``min_latent_dim``/``max_latent_dim``) resize it, encoder output and head input together
(:meth:`EvolvableNetwork.set_latent_dim`). Activation mutation swaps the hidden activations and
keeps every weight (:meth:`EvolvableNetwork.set_activation`): any encoder or head with
``activation`` and ``set_activation(name, *, output)`` takes part.

:meth:`EvolvableNetwork.mutation_methods` lists the mutations a network supports as strings such as
``"encoder.add_layer"``; :meth:`EvolvableNetwork.apply_mutation` applies one.
:func:`add_parameter_noise` is the "parameter mutation" operator (Gaussian noise on weights).
:meth:`EvolvableNetwork.arch` / :meth:`EvolvableNetwork.set_arch` save and restore the current shape
so a mutated network can be rebuilt before ``load_state_dict`` (checkpoint resume).
"""

from __future__ import annotations

import inspect
import itertools
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.models import CnnSpec, LstmSpec, MlpSpec, NetworkSpec
from agilerl.models.sections import MultiInputSpec, SimbaSpec
from agilerl_plugin_gym.encoder_rules import (
    EncoderSpaceError,
    check_network_for_space,
    encoder_kind,
    is_channels_last,
)
from agilerl_plugin_gym.networks_lstm import EvolvableLSTM
from agilerl_plugin_gym.networks_simba import EvolvableSimBa
from agilerl_plugin_gym.single_agent.spaces import is_image_space

__all__ = [
    "ENCODER_BUILDERS",
    "EvolvableCNN",
    "EvolvableMLP",
    "EvolvableNetwork",
    "EvolvableSimBa",
    "activation_layer",
    "latent_range",
    "add_parameter_noise",
    "default_network_spec",
    "image_chw",
    "is_image_space",
    "obs_dim",
    "pick_activation",
]

# Activations by the names AgileRL manifests use.
_ACTIVATIONS: dict[str, type[nn.Module]] = {
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
        cls = _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose from {sorted(_ACTIVATIONS)}") from None
    return cls(dim=-1) if cls is nn.Softmax else cls()


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


def _init_linear(layer: nn.Linear, gain: float = math.sqrt(2)) -> None:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)


def _resized_linear(
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
        nn.init.orthogonal_(fresh, gain)
        new_w[r:] = fresh
    new_w[:r, :c] = w[:r, :c]
    new_b[:r] = b[:r]
    return new_w, new_b


def _swap_activations(module: EvolvableMLP | EvolvableCNN, name: str, output: bool, widths: list[int]) -> bool:
    """Replace ``module.acts`` (one per entry of ``widths``) and, with ``output``, ``module.output_act``
    by activation ``name``; weights are untouched (parametrised activations such as PReLU start fresh)."""
    new_out = name if output else module.output_activation
    if name == module.activation and new_out == module.output_activation:
        return False
    device = module.output.weight.device
    module.activation, module.output_activation = name, new_out
    module.acts = nn.ModuleList(activation_layer(name) for _ in widths).to(device)
    module.output_act = activation_layer(new_out).to(device)
    refresh = getattr(module, "_refresh_forward", None)
    if refresh is not None:
        refresh()
    return True


# --------------------------------------------------------------------------------------------------
# MLP
# --------------------------------------------------------------------------------------------------


class EvolvableMLP(nn.Module):
    """``in_dim -> hidden_size[0] -> ... -> hidden_size[-1] -> out_dim``.

    :param in_dim: input features.
    :param out_dim: output features.
    :param hidden_size: widths of the hidden layers (may be empty: a single linear layer).
    :param activation: activation after every hidden layer.
    :param output_activation: activation after the output layer (None: linear output).
    :param layer_norm: LayerNorm after each hidden linear layer (before the activation).
    :param init_layers: orthogonal initialisation (gain sqrt(2)) instead of torch's default.
    :param output_vanish: scale the output layer's initial weights by 0.1 (small initial outputs).
    :param min_hidden_layers, max_hidden_layers, min_mlp_nodes, max_mlp_nodes: mutation bounds.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden_size: Sequence[int] = (64,),
        *,
        activation: str = "ReLU",
        output_activation: str | None = None,
        layer_norm: bool = False,
        init_layers: bool = True,
        output_vanish: bool = False,
        min_hidden_layers: int = 1,
        max_hidden_layers: int = 6,
        min_mlp_nodes: int = 8,
        max_mlp_nodes: int = 256,
    ) -> None:
        super().__init__()
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.hidden_size = [int(h) for h in hidden_size]
        self.activation = activation
        self.output_activation = output_activation
        self.layer_norm = layer_norm
        self.init_layers = init_layers
        self.output_vanish = output_vanish
        self.min_hidden_layers, self.max_hidden_layers = min_hidden_layers, max_hidden_layers
        self.min_mlp_nodes, self.max_mlp_nodes = min_mlp_nodes, max_mlp_nodes
        self._build()

    @classmethod
    def from_spec(cls, spec: MlpSpec, in_dim: int, out_dim: int, **overrides: Any) -> EvolvableMLP:
        kwargs: dict[str, Any] = {
            "hidden_size": spec.hidden_size,
            "activation": spec.activation,
            "output_activation": spec.output_activation,
            "layer_norm": spec.layer_norm,
            "init_layers": spec.init_layers,
            "output_vanish": spec.output_vanish,
            "min_hidden_layers": spec.min_hidden_layers,
            "max_hidden_layers": spec.max_hidden_layers,
            "min_mlp_nodes": spec.min_mlp_nodes,
            "max_mlp_nodes": spec.max_mlp_nodes,
        }
        kwargs.update(overrides)
        return cls(in_dim, out_dim, **kwargs)

    # --- structure -----------------------------------------------------------------------------
    def _build(self) -> None:
        dims = [self.in_dim, *self.hidden_size]
        linears = [nn.Linear(a, b) for a, b in itertools.pairwise(dims)]
        self.linears = nn.ModuleList(linears)
        self.norms = nn.ModuleList(nn.LayerNorm(h) if self.layer_norm else nn.Identity() for h in self.hidden_size)
        self.acts = nn.ModuleList(activation_layer(self.activation) for _ in self.hidden_size)
        self.output = nn.Linear(dims[-1], self.out_dim)
        self.output_act = activation_layer(self.output_activation)
        if self.init_layers:
            for lin in linears:
                _init_linear(lin)
            _init_linear(self.output, 0.01 if self.output_vanish else 1.0)
        elif self.output_vanish:
            with torch.no_grad():
                self.output.weight.mul_(0.1)
                self.output.bias.mul_(0.1)
        self._refresh_forward()

    def _refresh_forward(self) -> None:
        # The forward pass walks a flat list without the Identity placeholders: per-module call
        # overhead is a large part of a small MLP's forward time.
        chain: list[nn.Module] = []
        for lin, norm, act in zip(self.linears, self.norms, self.acts, strict=True):
            chain += [m for m in (lin, norm, act) if not isinstance(m, nn.Identity)]
        chain += [m for m in (self.output, self.output_act) if not isinstance(m, nn.Identity)]
        self._chain = chain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # ``module.forward`` directly: the hook machinery of ``module(x)`` costs more than a small
        # layer's matmul (these inner modules never carry hooks).
        for module in self._chain:
            x = module.forward(x)
        return x

    def arch(self) -> dict[str, Any]:
        """The mutable shape (enough to rebuild before loading weights)."""
        return {"hidden_size": list(self.hidden_size), "activation": self.activation,
                "output_activation": self.output_activation, "in_dim": self.in_dim, "out_dim": self.out_dim}  # fmt: skip

    def set_arch(self, arch: dict[str, Any]) -> None:
        """Rebuild with the given shape (weights are re-initialised; load them afterwards)."""
        self.hidden_size = [int(h) for h in arch["hidden_size"]]
        self.activation = str(arch.get("activation", self.activation))
        self.output_activation = arch.get("output_activation", self.output_activation)
        self.in_dim, self.out_dim = int(arch.get("in_dim", self.in_dim)), int(arch.get("out_dim", self.out_dim))
        device = self.output.weight.device
        self._build()
        self.to(device)

    # --- mutations -----------------------------------------------------------------------------
    def _layers(self) -> list[nn.Linear]:
        return [*self.linears, self.output]

    def _replace(self, hidden: list[int], weights: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Rebuild with ``hidden`` widths and copy in ``weights`` (one (W, b) per linear layer)."""
        device = self.output.weight.device
        norms_old = list(self.norms)
        self.hidden_size = hidden
        self._build()
        with torch.no_grad():
            for layer, (w, b) in zip(self._layers(), weights, strict=True):
                layer.weight.copy_(w)
                layer.bias.copy_(b)
            # Keep LayerNorm affine parameters where the layer survived with the same width.
            for new, old in zip(self.norms, norms_old, strict=False):
                if (
                    isinstance(new, nn.LayerNorm)
                    and isinstance(old, nn.LayerNorm)
                    and new.weight.shape == old.weight.shape
                ):
                    new.load_state_dict(old.state_dict())
        self.to(device)

    def _weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(lin.weight.detach().clone(), lin.bias.detach().clone()) for lin in self._layers()]

    def add_layer(self) -> bool:
        """Append a hidden layer as wide as the last one, initialised to the identity.

        With a ReLU-family activation and no layer norm this preserves the function exactly
        (``relu(I @ relu(h)) == relu(h)``). Returns False when at ``max_hidden_layers``.
        """
        if len(self.hidden_size) >= self.max_hidden_layers:
            return False
        width = self.hidden_size[-1] if self.hidden_size else self.in_dim
        w = self._weights()
        eye = torch.eye(width, device=w[0][0].device)
        zero = torch.zeros(width, device=w[0][0].device)
        self._replace([*self.hidden_size, width], [*w[:-1], (eye, zero), w[-1]])
        return True

    def remove_layer(self) -> bool:
        """Remove the last hidden layer, folding it linearly into the next one (approximate)."""
        if len(self.hidden_size) <= max(self.min_hidden_layers, 1):
            return False
        w = self._weights()
        (w_last, b_last), (w_out, b_out) = w[-2], w[-1]
        folded = (w_out @ w_last, w_out @ b_last + b_out)
        self._replace(self.hidden_size[:-1], [*w[:-2], folded])
        return True

    def _pick_nodes(
        self, hidden_layer: int | None, numb_new_nodes: int | None, rng: random.Random | None
    ) -> tuple[int, int]:
        """(hidden layer, node count) of a node mutation: the given ones, else sampled from ``rng``."""
        rng = rng or random.Random()
        i = rng.randrange(len(self.hidden_size)) if hidden_layer is None else hidden_layer
        n = numb_new_nodes if numb_new_nodes is not None else rng.choice([16, 32, 64])
        return i, n

    def add_node(
        self, hidden_layer: int | None = None, numb_new_nodes: int | None = None, *, rng: random.Random | None = None
    ) -> bool:
        """Widen a hidden layer. New units have zero outgoing weights: the output is unchanged."""
        if not self.hidden_size:
            return False
        i, n = self._pick_nodes(hidden_layer, numb_new_nodes, rng)
        n = min(n, self.max_mlp_nodes - self.hidden_size[i])
        if n <= 0:
            return False
        w = self._weights()
        w_in, b_in = w[i]
        new_rows = torch.empty(n, w_in.shape[1], device=w_in.device)
        nn.init.orthogonal_(new_rows, math.sqrt(2))
        w[i] = (torch.cat([w_in, new_rows]), torch.cat([b_in, torch.zeros(n, device=b_in.device)]))
        w_next, b_next = w[i + 1]
        w[i + 1] = (torch.cat([w_next, torch.zeros(w_next.shape[0], n, device=w_next.device)], dim=1), b_next)
        hidden = list(self.hidden_size)
        hidden[i] += n
        self._replace(hidden, w)
        return True

    def remove_node(
        self, hidden_layer: int | None = None, numb_new_nodes: int | None = None, *, rng: random.Random | None = None
    ) -> bool:
        """Narrow a hidden layer by dropping its units with the smallest outgoing weights."""
        if not self.hidden_size:
            return False
        i, n = self._pick_nodes(hidden_layer, numb_new_nodes, rng)
        n = min(n, self.hidden_size[i] - self.min_mlp_nodes)
        if n <= 0:
            return False
        w = self._weights()
        w_next, b_next = w[i + 1]
        # Dropping the units the next layer listens to least changes the function least.
        keep = torch.argsort(w_next.abs().sum(0), descending=True)[: self.hidden_size[i] - n].sort().values
        w_in, b_in = w[i]
        w[i] = (w_in[keep], b_in[keep])
        w[i + 1] = (w_next[:, keep], b_next)
        hidden = list(self.hidden_size)
        hidden[i] -= n
        self._replace(hidden, w)
        return True

    # --- activation and latent-size mutation (act_mut; latent.* of EvolvableNetwork) ---------------
    def set_activation(self, name: str, *, output: bool = False) -> bool:
        """Use ``name`` after every hidden layer (and after the output layer with ``output``),
        keeping every weight. Returns whether anything changed."""
        return _swap_activations(self, name, output, list(self.hidden_size))

    def resize_output(self, out_dim: int) -> bool:
        """Give the output layer ``out_dim`` units: the kept units keep their weights, new ones are
        initialised as the layer was. Returns whether the size changed."""
        if out_dim == self.out_dim:
            return False
        w = self._weights()
        gain = 0.01 if self.output_vanish else 1.0
        w[-1] = _resized_linear(*w[-1], rows=out_dim, gain=gain)
        self.out_dim = int(out_dim)
        self._replace(list(self.hidden_size), w)
        return True

    def resize_input(self, in_dim: int, keep_tail: int = 0) -> bool:
        """Read ``in_dim`` inputs: kept inputs keep their weights, new ones start at zero weight (so
        added inputs do not change the output). The last ``keep_tail`` inputs (features appended after
        the resized ones) stay last with their weights. Returns whether the size changed."""
        if in_dim == self.in_dim:
            return False
        w = self._weights()
        weight, bias = w[0]
        if keep_tail:
            head_w, _ = _resized_linear(weight[:, :-keep_tail], bias, cols=in_dim - keep_tail)
            w[0] = (torch.cat([head_w, weight[:, -keep_tail:]], dim=1), bias)
        else:
            w[0] = _resized_linear(weight, bias, cols=in_dim)
        self.in_dim = int(in_dim)
        self._replace(list(self.hidden_size), w)
        return True


# --------------------------------------------------------------------------------------------------
# CNN
# --------------------------------------------------------------------------------------------------


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
        return cls(
            input_shape,
            out_dim,
            spec.channel_size,
            spec.kernel_size,
            spec.stride_size,
            activation=spec.activation,
            layer_norm=spec.layer_norm,
            init_layers=spec.init_layers,
            min_hidden_layers=spec.min_hidden_layers,
            max_hidden_layers=spec.max_hidden_layers,
            min_channel_size=spec.min_channel_size,
            max_channel_size=spec.max_channel_size,
        )

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
                nn.init.orthogonal_(weight, math.sqrt(2))
                nn.init.zeros_(bias)
            _init_linear(self.output)

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
        nn.init.orthogonal_(extra, math.sqrt(2))
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
        return _swap_activations(self, name, output, list(self.channel_size))

    def resize_output(self, out_dim: int) -> bool:
        """Give the output layer ``out_dim`` units, keeping the weights of the units that remain."""
        if out_dim == self.out_dim:
            return False
        convs, out = self._snapshot()
        self.out_dim = int(out_dim)
        self._load(convs, _resized_linear(*out, rows=out_dim, gain=math.sqrt(2)))
        return True


# --------------------------------------------------------------------------------------------------
# Encoder + head
# --------------------------------------------------------------------------------------------------

_ENCODER_METHODS = {
    "mlp": ("add_layer", "remove_layer", "add_node", "remove_node"),
    "cnn": ("add_layer", "remove_layer", "add_channel", "remove_channel"),
    "simba": ("add_block", "remove_block", "add_node", "remove_node"),
    "lstm": ("add_layer", "remove_layer", "add_node", "remove_node"),
}
_HEAD_METHODS = ("add_layer", "remove_layer", "add_node", "remove_node")
_LAYER_METHODS = {"add_layer", "remove_layer", "add_block", "remove_block"}


#: Units a ``latent.add_node`` / ``latent.remove_node`` mutation moves the latent size by (AgileRL's).
LATENT_STEPS = (8, 16, 32)


def latent_range(spec: NetworkSpec) -> tuple[int, int] | None:
    """The ``(min, max)`` latent size mutation keeps to: None (fixed) unless the manifest gives
    ``min_latent_dim`` or ``max_latent_dim``; a missing bound is AgileRL's default (8, 128),
    widened to include ``latent_dim``."""
    lo, hi = spec.min_latent_dim, spec.max_latent_dim
    if lo is None and hi is None:
        return None
    return (min(8, spec.latent_dim) if lo is None else lo, max(128, spec.latent_dim) if hi is None else hi)


def default_network_spec(latent_dim: int = 64, hidden: Sequence[int] = (64,), head: Sequence[int] = ()) -> NetworkSpec:
    """A small MLP network: ``obs -> 64 -> latent 64 -> out`` unless told otherwise.

    Layer norm is off in the default: these nets are tiny and LayerNorm costs more than it gives.
    """
    return NetworkSpec(
        latent_dim=latent_dim,
        encoder_config=MlpSpec(hidden_size=list(hidden), layer_norm=False),
        head_config=MlpSpec(hidden_size=list(head), layer_norm=False, min_hidden_layers=1),
    )


# --------------------------------------------------------------------------------------------------
# Encoder dispatch: the observation space picks the kind (encoder_rules.encoder_kind), a builder
# per kind makes it. Another kind (e.g. an LSTM) is one more entry in ENCODER_BUILDERS.
# --------------------------------------------------------------------------------------------------

#: ``builder(encoder_config or None, observation_space, latent_dim, normalize_images) -> encoder``.
EncoderBuilder = Callable[[Any, spaces.Space[Any], int, bool], nn.Module]


def _build_mlp(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    mlp = cfg if isinstance(cfg, MlpSpec) else MlpSpec(layer_norm=False)
    # The encoder's output is a hidden representation: activate it like a hidden layer.
    return EvolvableMLP.from_spec(mlp, obs_dim(space), latent, output_activation=mlp.activation, output_vanish=False)


def _build_cnn(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    return EvolvableCNN.from_spec(cfg if isinstance(cfg, CnnSpec) else CnnSpec(), image_chw(space), latent)


def _build_simba(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    return EvolvableSimBa.from_spec(cfg if isinstance(cfg, SimbaSpec) else SimbaSpec(), obs_dim(space), latent)


def _build_lstm(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    # Recurrent policies (networks_lstm): an image space is refused before this (no CNN-LSTM yet).
    return EvolvableLSTM.from_spec(cfg if isinstance(cfg, LstmSpec) else LstmSpec(), obs_dim(space), latent)


def _build_multi_input(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    from agilerl_plugin_gym.networks_multi import EvolvableMultiInput

    assert isinstance(space, (spaces.Dict, spaces.Tuple))
    spec = cfg if isinstance(cfg, MultiInputSpec) else None
    return EvolvableMultiInput(space, latent, spec, normalize_images=normalize_images)


#: Encoder kind (``encoder_config.arch``) -> its builder.
ENCODER_BUILDERS: dict[str, EncoderBuilder] = {
    "mlp": _build_mlp,
    "cnn": _build_cnn,
    "simba": _build_simba,
    "lstm": _build_lstm,
    "multiinput": _build_multi_input,
}


def build_encoder(
    spec: NetworkSpec | None, observation_space: spaces.Space[Any], *, normalize_images: bool = True
) -> tuple[str, nn.Module]:
    """``(kind, encoder)`` for ``observation_space`` from a ``network`` section (``None``: defaults).

    Raises :class:`~agilerl_plugin_gym.encoder_rules.EncoderSpaceError` when the section asks for
    an encoder the space cannot take.
    """
    check_network_for_space(spec, observation_space)
    kind = encoder_kind(spec, observation_space)
    builder = ENCODER_BUILDERS.get(kind)
    if builder is None:
        raise EncoderSpaceError(f"network.encoder_config: no {kind!r} encoder here ({', '.join(ENCODER_BUILDERS)})")
    net = spec or default_network_spec()
    cfg = spec.encoder_config if spec is not None else net.encoder_config
    if cfg is None and kind == "simba" and spec is not None and spec.simba:
        cfg = SimbaSpec()
    return kind, builder(cfg, observation_space, net.latent_dim, normalize_images)


class EvolvableNetwork(nn.Module):
    """Encoder (observation -> latent) + MLP head (latent -> ``out_dim``).

    :param encoder: the encoder (:class:`EvolvableMLP`, :class:`EvolvableCNN`, :class:`EvolvableSimBa`
        or a multi-input encoder) producing ``latent_dim`` features.
    :param head: an :class:`EvolvableMLP` from ``latent_dim`` (+ ``extra_in``) to the outputs.
    :param observation_space: the space observations come from; Discrete observations are one-hot
        encoded, images are moved to channels-first and (``normalize_images``) scaled to [0, 1];
        a multi-input encoder does this per part.
    :param extra_in: features the head reads after the latent (e.g. a critic's action):
        ``forward(obs, extra)``.
    :param detach_encoder: read the encoder without gradient (a critic reading an actor's encoder,
        AgileRL's ``share_encoders`` for DDPG/TD3).
    """

    def __init__(
        self,
        encoder: nn.Module,
        head: EvolvableMLP,
        observation_space: spaces.Space[Any],
        *,
        normalize_images: bool = True,
        latent_range: tuple[int, int] | None = None,
        encoder_arch: str | None = None,
        extra_in: int = 0,
        detach_encoder: bool = False,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.observation_space = observation_space
        self.normalize_images = normalize_images
        #: ``(min, max)`` latent size that ``latent.*`` mutations keep to (None: the latent size is fixed).
        self.latent_range = latent_range
        self.encoder_arch = (
            encoder_arch
            or getattr(encoder, "arch_name", None)
            or (
                "cnn"
                if isinstance(encoder, EvolvableCNN)
                else "simba"
                if isinstance(encoder, EvolvableSimBa)
                else "mlp"
            )
        )
        self.extra_in = int(extra_in)
        self.detach_encoder = detach_encoder
        self._one_hot = int(observation_space.n) if isinstance(observation_space, spaces.Discrete) else 0
        self._channels_last = is_image_space(observation_space) and is_channels_last(observation_space)

    @classmethod
    def from_spec(
        cls,
        spec: NetworkSpec | None,
        observation_space: spaces.Space[Any],
        out_dim: int,
        *,
        encoder: nn.Module | None = None,
        normalize_images: bool = True,
        output_activation: str | None = None,
        output_vanish: bool | None = None,
        extra_in: int = 0,
        detach_encoder: bool = False,
    ) -> EvolvableNetwork:
        """Build from a manifest ``network`` section (``None``: :func:`default_network_spec`).

        Pass ``encoder`` to share an existing encoder (e.g. PPO's actor and critic).
        ``output_activation`` overrides the head's (e.g. ``Tanh`` for deterministic actors).
        ``extra_in`` widens the head's input (see the class).
        """
        arch: str | None = None
        if encoder is None:
            arch, encoder = build_encoder(spec, observation_space, normalize_images=normalize_images)
        elif spec is not None or not isinstance(encoder, (EvolvableMLP, EvolvableCNN, EvolvableSimBa)):
            arch = encoder_kind(spec, observation_space)
        net = spec or default_network_spec()
        head_cfg = net.head_config or MlpSpec(hidden_size=[], layer_norm=False)
        overrides: dict[str, Any] = {"min_hidden_layers": min(head_cfg.min_hidden_layers, len(head_cfg.hidden_size))}
        if output_activation is not None:
            overrides["output_activation"] = output_activation
        if output_vanish is not None:
            overrides["output_vanish"] = output_vanish
        # A shared encoder may have mutated its latent size: the head reads what it gives.
        latent = int(getattr(encoder, "out_dim", net.latent_dim))
        head = EvolvableMLP.from_spec(head_cfg, latent + int(extra_in), out_dim, **overrides)
        return cls(
            encoder,
            head,
            observation_space,
            normalize_images=normalize_images,
            latent_range=latent_range(net),
            encoder_arch=arch,
            extra_in=extra_in,
            detach_encoder=detach_encoder,
        )

    def preprocess(self, obs: Any) -> Any:
        """Observation batch as the encoder wants it (float, one-hot, channels-first)."""
        if self._one_hot:
            return nn.functional.one_hot(obs.long().flatten(), self._one_hot).float()
        if self.encoder_arch == "multiinput":  # per part, inside the encoder
            return obs
        if self.encoder_arch == "cnn":
            x = obs.float()
            if self._channels_last:
                x = x.permute(0, 3, 1, 2)
            return x / 255.0 if self.normalize_images else x
        return obs.float().flatten(1) if obs.dim() > 2 else obs.float()

    def forward(self, obs: Any, extra: torch.Tensor | None = None) -> torch.Tensor:
        z = self.latent(obs)
        if extra is not None:
            z = torch.cat([z, extra], dim=-1)
        return self.head(z)

    def latent(self, obs: Any) -> torch.Tensor:
        if self.detach_encoder:
            with torch.no_grad():
                return self.encoder(self.preprocess(obs))
        return self.encoder(self.preprocess(obs))

    # --- evolution -----------------------------------------------------------------------------
    def mutation_methods(self) -> list[str]:
        """Names accepted by :meth:`apply_mutation`, e.g. ``"encoder.add_node"``; ``"latent.add_node"``
        and ``"latent.remove_node"`` when a latent range is set and both parts can be resized."""
        own = getattr(self.encoder, "mutation_names", None)
        encoder = list(own()) if callable(own) else list(_ENCODER_METHODS.get(self.encoder_arch, ()))
        methods = [f"encoder.{m}" for m in encoder] + [f"head.{m}" for m in _HEAD_METHODS]
        resizable = hasattr(self.encoder, "resize_output") and hasattr(self.head, "resize_input")
        return methods + (["latent.add_node", "latent.remove_node"] if self.latent_range and resizable else [])

    @property
    def latent_dim(self) -> int:
        """Width of the encoder output the head reads."""
        encoder: Any = self.encoder  # every encoder kind has out_dim
        return int(encoder.out_dim)

    def set_latent_dim(self, latent_dim: int) -> bool:
        """Resize the encoder output and the head input to ``latent_dim`` (weights kept where the
        shapes overlap; new head inputs start at zero weight; the ``extra_in`` inputs after the latent,
        e.g. a critic's action, keep theirs). Returns whether anything changed."""
        encoder: Any = self.encoder  # only encoders with resize_output offer latent.* mutations
        changed = bool(encoder.resize_output(latent_dim)) if encoder.out_dim != latent_dim else False
        return bool(self.head.resize_input(latent_dim + self.extra_in, keep_tail=self.extra_in)) or changed

    @property
    def activation(self) -> str | None:
        """The hidden activation (the encoder's; the head's when the encoder has none)."""
        return getattr(self.encoder, "activation", None) or getattr(self.head, "activation", None)

    def set_activation(self, name: str) -> bool:
        """Activation mutation: ``name`` after every hidden layer of the encoder (its output too, which
        feeds the head like a hidden layer) and of the head (not the head's output). Weights are kept.
        Parts without ``set_activation`` keep theirs. Returns whether anything changed."""
        changed = False
        for part, output in ((self.encoder, True), (self.head, False)):
            setter = getattr(part, "set_activation", None)
            if setter is not None:
                changed |= bool(setter(name, output=output))
        return changed

    def apply_mutation(self, method: str, rng: random.Random | None = None) -> bool:
        """Apply ``"encoder.<m>"``, ``"head.<m>"`` or ``"latent.<m>"``; returns whether anything changed."""
        part, _, name = method.partition(".")
        if part == "latent":
            assert self.latent_range is not None
            step = (rng or random.Random()).choice(LATENT_STEPS)
            lo, hi = self.latent_range
            target = self.latent_dim + step if name == "add_node" else self.latent_dim - step
            return self.set_latent_dim(min(max(target, lo), hi))
        module = self.encoder if part == "encoder" else self.head
        fn = getattr(module, name)
        return bool(fn(rng=rng) if "rng" in inspect.signature(fn).parameters else fn())

    def sample_mutation(self, rng: random.Random, new_layer_prob: float) -> str:
        """Pick a method: layer-level with probability ``new_layer_prob``, else node-level."""
        methods = self.mutation_methods()
        layer = [m for m in methods if m.split(".")[1] in _LAYER_METHODS]
        node = [m for m in methods if m not in layer]
        return rng.choice(layer if rng.random() < new_layer_prob else node)

    def arch(self) -> dict[str, Any]:
        encoder: Any = self.encoder  # every encoder kind has arch() / set_arch()
        return {"encoder": encoder.arch(), "head": self.head.arch()}

    def set_arch(self, arch: dict[str, Any]) -> None:
        encoder: Any = self.encoder
        if arch["encoder"] != encoder.arch():
            encoder.set_arch(arch["encoder"])
        if arch["head"] != self.head.arch():
            self.head.set_arch(arch["head"])


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
