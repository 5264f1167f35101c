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
valid and a shared encoder can be mutated once for every head that reads it.

:meth:`EvolvableNetwork.mutation_methods` lists the mutations a network supports as strings such as
``"encoder.add_layer"``; :meth:`EvolvableNetwork.apply_mutation` applies one.
:func:`add_parameter_noise` is the "parameter mutation" operator (Gaussian noise on weights).
:meth:`EvolvableNetwork.arch` / :meth:`EvolvableNetwork.set_arch` save and restore the current shape
so a mutated network can be rebuilt before ``load_state_dict`` (checkpoint resume).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.models import CnnSpec, LstmSpec, MlpSpec, NetworkSpec
from agilerl_plugin_gym.networks_lstm import EvolvableLSTM
from agilerl_plugin_gym.single_agent.spaces import is_image_space

__all__ = [
    "EvolvableCNN",
    "EvolvableMLP",
    "EvolvableNetwork",
    "activation_layer",
    "add_parameter_noise",
    "default_network_spec",
    "is_image_space",
    "obs_dim",
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


def _init_linear(layer: nn.Linear, gain: float = math.sqrt(2)) -> None:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)


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
        return {"hidden_size": list(self.hidden_size), "activation": self.activation}

    def set_arch(self, arch: dict[str, Any]) -> None:
        """Rebuild with the given shape (weights are re-initialised; load them afterwards)."""
        self.hidden_size = [int(h) for h in arch["hidden_size"]]
        self.activation = str(arch.get("activation", self.activation))
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
        }

    def set_arch(self, arch: dict[str, Any]) -> None:
        device = self.output.weight.device
        self.channel_size = [int(c) for c in arch["channel_size"]]
        self.kernel_size = [int(k) for k in arch["kernel_size"]]
        self.stride_size = [int(s) for s in arch["stride_size"]]
        self.activation = str(arch.get("activation", self.activation))
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


# --------------------------------------------------------------------------------------------------
# Encoder + head
# --------------------------------------------------------------------------------------------------

_ENCODER_METHODS = {
    "mlp": ("add_layer", "remove_layer", "add_node", "remove_node"),
    "cnn": ("add_layer", "remove_layer", "add_channel", "remove_channel"),
    "lstm": ("add_layer", "remove_layer", "add_node", "remove_node"),
}
_HEAD_METHODS = ("add_layer", "remove_layer", "add_node", "remove_node")
_LAYER_METHODS = {"add_layer", "remove_layer"}


def default_network_spec(latent_dim: int = 64, hidden: Sequence[int] = (64,), head: Sequence[int] = ()) -> NetworkSpec:
    """A small MLP network: ``obs -> 64 -> latent 64 -> out`` unless told otherwise.

    Layer norm is off in the default: these nets are tiny and LayerNorm costs more than it gives.
    """
    return NetworkSpec(
        latent_dim=latent_dim,
        encoder_config=MlpSpec(hidden_size=list(hidden), layer_norm=False),
        head_config=MlpSpec(hidden_size=list(head), layer_norm=False, min_hidden_layers=1),
    )


class EvolvableNetwork(nn.Module):
    """Encoder (observation -> latent) + MLP head (latent -> ``out_dim``).

    :param encoder: an :class:`EvolvableMLP` or :class:`EvolvableCNN` producing ``latent_dim`` features.
    :param head: an :class:`EvolvableMLP` from ``latent_dim`` to the outputs.
    :param observation_space: the space observations come from; Discrete observations are one-hot
        encoded, images are moved to channels-first and (``normalize_images``) scaled to [0, 1].
    """

    def __init__(
        self,
        encoder: EvolvableMLP | EvolvableCNN | EvolvableLSTM,
        head: EvolvableMLP,
        observation_space: spaces.Space[Any],
        *,
        normalize_images: bool = True,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.observation_space = observation_space
        self.normalize_images = normalize_images
        self.encoder_arch = getattr(encoder, "arch_name", "cnn" if isinstance(encoder, EvolvableCNN) else "mlp")
        self._one_hot = int(observation_space.n) if isinstance(observation_space, spaces.Discrete) else 0
        self._channels_last = (
            is_image_space(observation_space) and observation_space.shape[-1] < observation_space.shape[0]
        )

    @classmethod
    def from_spec(
        cls,
        spec: NetworkSpec | None,
        observation_space: spaces.Space[Any],
        out_dim: int,
        *,
        encoder: EvolvableMLP | EvolvableCNN | EvolvableLSTM | None = None,
        normalize_images: bool = True,
        output_activation: str | None = None,
        output_vanish: bool | None = None,
    ) -> EvolvableNetwork:
        """Build from a manifest ``network`` section (``None``: :func:`default_network_spec`).

        Pass ``encoder`` to share an existing encoder (e.g. PPO's actor and critic).
        ``output_activation`` overrides the head's (e.g. ``Tanh`` for deterministic actors).
        """
        spec = spec or default_network_spec()
        latent = spec.latent_dim
        if encoder is None:
            enc_cfg = spec.encoder_config
            if is_image_space(observation_space):
                cnn = enc_cfg if isinstance(enc_cfg, CnnSpec) else CnnSpec()
                shape = observation_space.shape
                chw = (shape[2], shape[0], shape[1]) if shape[-1] < shape[0] else tuple(shape)
                encoder = EvolvableCNN.from_spec(cnn, chw, latent)
            elif isinstance(enc_cfg, LstmSpec):  # recurrent policies (networks_lstm)
                encoder = EvolvableLSTM.from_spec(enc_cfg, obs_dim(observation_space), latent)
            else:
                if enc_cfg is not None and not isinstance(enc_cfg, MlpSpec):
                    raise TypeError(
                        f"network.encoder_config.arch {enc_cfg.arch!r} needs image observations; "
                        f"{observation_space} is a vector space: use arch: mlp"
                    )
                mlp = enc_cfg or MlpSpec(layer_norm=False)
                # The encoder's output is a hidden representation: activate it like a hidden layer.
                encoder = EvolvableMLP.from_spec(
                    mlp, obs_dim(observation_space), latent, output_activation=mlp.activation, output_vanish=False
                )
        head_cfg = spec.head_config or MlpSpec(hidden_size=[], layer_norm=False)
        overrides: dict[str, Any] = {"min_hidden_layers": min(head_cfg.min_hidden_layers, len(head_cfg.hidden_size))}
        if output_activation is not None:
            overrides["output_activation"] = output_activation
        if output_vanish is not None:
            overrides["output_vanish"] = output_vanish
        head = EvolvableMLP.from_spec(head_cfg, latent, out_dim, **overrides)
        return cls(encoder, head, observation_space, normalize_images=normalize_images)

    def preprocess(self, obs: torch.Tensor) -> torch.Tensor:
        """Observation batch as the encoder wants it (float, one-hot, channels-first)."""
        if self._one_hot:
            return nn.functional.one_hot(obs.long().flatten(), self._one_hot).float()
        if self.encoder_arch == "cnn":
            x = obs.float()
            if self._channels_last:
                x = x.permute(0, 3, 1, 2)
            return x / 255.0 if self.normalize_images else x
        return obs.float().flatten(1) if obs.dim() > 2 else obs.float()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.preprocess(obs)))

    def latent(self, obs: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.preprocess(obs))

    # --- evolution -----------------------------------------------------------------------------
    def mutation_methods(self) -> list[str]:
        """Names accepted by :meth:`apply_mutation`, e.g. ``"encoder.add_node"``."""
        return [f"encoder.{m}" for m in _ENCODER_METHODS[self.encoder_arch]] + [f"head.{m}" for m in _HEAD_METHODS]

    def apply_mutation(self, method: str, rng: random.Random | None = None) -> bool:
        """Apply ``"encoder.<m>"`` or ``"head.<m>"``; returns whether anything changed."""
        part, _, name = method.partition(".")
        module = self.encoder if part == "encoder" else self.head
        fn = getattr(module, name)
        return bool(fn() if name in _LAYER_METHODS else fn(rng=rng))

    def sample_mutation(self, rng: random.Random, new_layer_prob: float) -> str:
        """Pick a method: layer-level with probability ``new_layer_prob``, else node-level."""
        methods = self.mutation_methods()
        layer = [m for m in methods if m.split(".")[1] in _LAYER_METHODS]
        node = [m for m in methods if m not in layer]
        return rng.choice(layer if rng.random() < new_layer_prob else node)

    def arch(self) -> dict[str, Any]:
        return {"encoder": self.encoder.arch(), "head": self.head.arch()}

    def set_arch(self, arch: dict[str, Any]) -> None:
        if arch["encoder"] != self.encoder.arch():
            self.encoder.set_arch(arch["encoder"])
        if arch["head"] != self.head.arch():
            self.head.set_arch(arch["head"])


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
