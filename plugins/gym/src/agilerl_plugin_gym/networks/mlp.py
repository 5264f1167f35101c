"""The evolvable multi-layer perceptron: vector encoders and every head."""

from __future__ import annotations

import itertools
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
from agilerl_plugin_gym.sections import MlpSpec

__all__ = ["EvolvableMLP"]


class EvolvableMLP(nn.Module):
    """``in_dim -> hidden_size[0] -> ... -> hidden_size[-1] -> out_dim``.

    :param in_dim: input features.
    :param out_dim: output features.
    :param hidden_size: widths of the hidden layers (may be empty: a single linear layer).
    :param activation: activation after every hidden layer.
    :param output_activation: activation after the output layer (None: linear output).
    :param layer_norm: LayerNorm after each hidden linear layer (before the activation).
    :param init_layers: orthogonal initialisation (gain sqrt(2)) instead of torch's default.
    :param output_vanish: small initial outputs: orthogonal gain .01 with ``init_layers``, else torch's
        default init scaled by 0.1.
    :param output_gain: the output layer's orthogonal gain with ``init_layers`` (None: 1, or .01 with
        ``output_vanish``).
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
        output_gain: float | None = None,
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
        self.output_gain = output_gain
        self.min_hidden_layers, self.max_hidden_layers = min_hidden_layers, max_hidden_layers
        self.min_mlp_nodes, self.max_mlp_nodes = min_mlp_nodes, max_mlp_nodes
        self._build()

    @classmethod
    def from_spec(cls, spec: MlpSpec, in_dim: int, out_dim: int, **overrides: Any) -> EvolvableMLP:
        return cls(in_dim, out_dim, **spec_kwargs(spec, **overrides))

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
                init_linear(lin)
            init_linear(self.output, self.output_init_gain())
        elif self.output_vanish:
            with torch.no_grad():
                self.output.weight.mul_(0.1)
                self.output.bias.mul_(0.1)
        self._refresh_forward()

    def output_init_gain(self) -> float:
        """The orthogonal gain the output layer starts at (and new output units get)."""
        if self.output_gain is not None:
            return float(self.output_gain)
        return 0.01 if self.output_vanish else 1.0

    def _refresh_forward(self) -> None:
        # The forward pass walks a flat list without the Identity placeholders: per-module call
        # overhead is a large part of a small MLP's forward time.
        chain: list[nn.Module] = []
        for lin, norm, act in zip(self.linears, self.norms, self.acts, strict=True):
            chain += [m for m in (lin, norm, act) if not isinstance(m, nn.Identity)]
        chain += [m for m in (self.output, self.output_act) if not isinstance(m, nn.Identity)]
        #: the layers ``forward`` walks, in order (a plain list; read by ``fused.mlp_chain``)
        self.layer_chain = chain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # ``module.forward`` directly: the hook machinery of ``module(x)`` costs more than a small
        # layer's matmul (these inner modules never carry hooks).
        for module in self.layer_chain:
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
        orthogonal_(new_rows, math.sqrt(2))
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
        if not swap_activations(self, name, output, list(self.hidden_size)):
            return False
        self._refresh_forward()  # the flat forward chain holds the old activation modules
        return True

    def resize_output(self, out_dim: int) -> bool:
        """Give the output layer ``out_dim`` units: the kept units keep their weights, new ones are
        initialised as the layer was. Returns whether the size changed."""
        if out_dim == self.out_dim:
            return False
        w = self._weights()
        w[-1] = resized_linear(*w[-1], rows=out_dim, gain=self.output_init_gain())
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
            head_w, _ = resized_linear(weight[:, :-keep_tail], bias, cols=in_dim - keep_tail)
            w[0] = (torch.cat([head_w, weight[:, -keep_tail:]], dim=1), bias)
        else:
            w[0] = resized_linear(weight, bias, cols=in_dim)
        self.in_dim = int(in_dim)
        self._replace(list(self.hidden_size), w)
        return True


def torch_default_init(mlp: nn.Module | None) -> None:
    """Start an orthogonally initialised MLP over at torch's default layer init (``nn.Linear``'s own),
    as SB3's DQN QNetwork does, with ``init_layers`` off so a rebuild of the module starts there too
    (a mutation's new units keep their function-preserving init). ``output_vanish`` keeps its
    meaning (the output layer x0.1); an MLP with an explicit ``output_gain`` (an orthogonal gain)
    is left as built.

    DQN calls it: the ablation of DQN CartPole-v1 on the learning table's SB3 mapping (30 seeds,
    benchmarks/README.md) read a last-quarter median greedy return of 257 orthogonal against 366
    with torch's init (rank-sum p = 0.0006).
    """
    if not isinstance(mlp, EvolvableMLP) or not mlp.init_layers or mlp.output_gain is not None:
        return
    mlp.init_layers = False
    for lin in [*mlp.linears, mlp.output]:
        lin.reset_parameters()
    if mlp.output_vanish:
        with torch.no_grad():
            mlp.output.weight.mul_(0.1)
            mlp.output.bias.mul_(0.1)


#: SB3's orthogonal gain for hidden layers, which PPO's and A2C's MLP encoders' latent layer starts at.
LATENT_GAIN = math.sqrt(2)


def sb3_latent_gain(encoder: nn.Module) -> None:
    """Start an MLP encoder's latent (last, activated) layer at orthogonal gain sqrt(2), as SB3's
    policy does its second hidden layer, unless the manifest sets ``encoder_config.output_gain``.

    Our encoders start that layer at gain 1; ablations (benchmarks/README.md, "Why DQN, A2C and PPO
    lost to SB3") named it the cause of ours ending below SB3: A2C CartPole last-quarter median 304
    at gain 1, 492 at sqrt(2), SB3 392 (10 seeds); PPO LunarLander at its 1M budget 256 at gain 1,
    265 at sqrt(2), SB3's lower quartile 262 (3 seeds, every seed at or above gain 1's).
    ``orthogonal_`` draws the same numbers for any gain, so scaling the built layer is building it
    at this gain; ``output_gain`` keeps the gain for the layers an architecture mutation rebuilds.
    PPO and A2C call it; the value-based and off-policy algorithms keep gain 1 (their cells do not
    lose to SB3 on it).
    """
    if isinstance(encoder, EvolvableMLP) and encoder.init_layers and encoder.output_gain is None:
        encoder.output_gain = LATENT_GAIN
        with torch.no_grad():
            encoder.output.weight.mul_(LATENT_GAIN)
