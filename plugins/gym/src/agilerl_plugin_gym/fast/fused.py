"""Small plain MLPs without per-module and autograd overhead: packed acting, hand-written backward.

A policy acts on a handful of observations every env step. For the 64-unit MLPs of classic
control, most of such a call is per-module dispatch and per-layer kernel launches, not arithmetic;
PPO pays it twice (actor and critic). :class:`FusedMLP` packs the layers of networks whose encoder
and head are plain :class:`~agilerl_plugin_gym.networks.mlp.EvolvableMLP` chains (linear layers
and elementwise activations, no LayerNorm) into one chain: first layers stacked (they read the
same input), later layers block-diagonal, so the two networks cost about what one does. An
encoder the networks share is run once.

The packed weights are rebuilt only when a parameter changed, however it changed (an optimizer
step, loaded weights, a parameter mutation): every call compares the parameters' flat buffer
(:class:`~agilerl_plugin_gym.fast.optim.FlatParameters`) with a snapshot taken at packing time, one
``torch.equal`` over a few thousand floats. Between two updates a whole rollout reuses them.

Outputs equal the separate networks' up to float rounding (a block-diagonal product sums the
same terms plus exact zeros, in the kernel's own order).

:class:`MLPChain` is the training side: the forward pass of one such network with its activations
kept, and its backward written out (the same aten kernels autograd runs for ``addmm``, ReLU and
Tanh, in the same order, so the gradients are bit-identical to autograd's), writing each weight's
and bias's gradient into its ``.grad``. For a 64-unit network the autograd engine's per-node
bookkeeping costs about as much as the matmuls themselves; a learner whose loss gradient is known
in closed form (PPO's clipped surrogate, DQN's Huber loss) skips it.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from agilerl_plugin_gym.fast.optim import FlatParameters, no_grad
from agilerl_plugin_gym.networks.mlp import EvolvableMLP
from agilerl_plugin_gym.networks.network import EvolvableNetwork

__all__ = ["FusedMLP", "MLPChain", "activation_kernels", "mlp_chain", "write_linear_grads"]

#: (weight, bias, activation module or None) of one linear layer.
Layer = tuple[torch.Tensor, torch.Tensor, nn.Module | None]


def mlp_layers(mlp: nn.Module) -> list[Layer] | None:
    """An :class:`EvolvableMLP`'s layers, or None when it has anything but linears and activations.

    Exact classes only: a subclass (RainbowDQN's noisy MLP) may compute something else.
    """
    if type(mlp) is not EvolvableMLP or mlp.layer_norm:
        return None
    layers: list[Layer] = []
    for lin, norm, act in zip(mlp.linears, mlp.norms, mlp.acts, strict=True):
        if not isinstance(norm, nn.Identity) or type(lin) is not nn.Linear:
            return None
        layers.append((lin.weight, lin.bias, None if isinstance(act, nn.Identity) else act))
    out_act = mlp.output_act
    if type(mlp.output) is not nn.Linear:
        return None
    layers.append((mlp.output.weight, mlp.output.bias, None if isinstance(out_act, nn.Identity) else out_act))
    return layers


def _plain(net: nn.Module) -> bool:
    """A network whose forward is ``head(encoder(preprocess(obs)))`` with MLP encoder and head (the
    class itself, not a subclass: RainbowDQN's dueling, noisy network is one)."""
    return (
        type(net) is EvolvableNetwork
        and net.encoder_arch == "mlp"
        and net.extra_in == 0
        and mlp_layers(net.encoder) is not None
        and mlp_layers(net.head) is not None
    )


def _same_activations(chains: Sequence[list[Layer]]) -> bool:
    for layers in zip(*chains, strict=True):
        acts = [repr(act) for _, _, act in layers]
        if len(set(acts)) != 1:
            return False
    return True


def _pack(chains: Sequence[list[Layer]]) -> list[Layer]:
    """One chain computing every chain's output side by side (they read the same input)."""
    packed: list[Layer] = []
    for depth, layers in enumerate(zip(*chains, strict=True)):
        weights = [w.detach() for w, _, _ in layers]
        weight = torch.cat(weights, 0) if depth == 0 else torch.block_diag(*weights)
        packed.append((weight, torch.cat([b.detach() for _, b, _ in layers]), layers[0][2]))
    return packed


class FusedMLP:
    """Inference forward of ``nets`` (plain-MLP :class:`EvolvableNetwork` s) on one input, packed.

    :param nets: the networks, in the order their outputs are returned.
    :param flat: the flat buffer holding every parameter of ``nets`` (its version says when to repack).

    :meth:`supports` says whether the nets qualify (same depth and activations, MLP encoders and
    heads without LayerNorm, and either one shared encoder or none shared); callers fall back to
    the networks themselves otherwise.
    """

    def __init__(self, nets: Sequence[nn.Module], flat: FlatParameters) -> None:
        self.nets = list(nets)
        self.flat = flat
        self._snapshot: torch.Tensor | None = None  # flat.data when last packed
        self._prefix: list[Layer] = []
        self._packed: list[Layer] = []
        self._layers: list[tuple[torch.Tensor, torch.Tensor, Any]] = []
        self._splits = [int(net.head.out_dim) for net in self.nets]  # type: ignore[union-attr]

    @staticmethod
    def supports(nets: Sequence[nn.Module]) -> bool:
        if not nets or not all(_plain(n) for n in nets):
            return False
        encoders = [n.encoder for n in nets]  # type: ignore[union-attr]
        shared = all(e is encoders[0] for e in encoders)
        if not shared and len({id(e) for e in encoders}) != len(encoders):
            return False  # some but not all share an encoder: not worth a special case
        chains = [mlp_layers(n.head) for n in nets] if shared else [
            [*mlp_layers(n.encoder), *mlp_layers(n.head)] for n in nets]  # type: ignore[misc,union-attr]  # fmt: skip
        return len({len(c) for c in chains}) == 1 and _same_activations(chains)  # type: ignore[arg-type]

    def _repack(self) -> None:
        nets = self.nets
        encoders = [n.encoder for n in nets]  # type: ignore[union-attr]
        if all(e is encoders[0] for e in encoders):
            self._prefix = [(w.detach(), b.detach(), a) for w, b, a in mlp_layers(encoders[0]) or []]
            self._packed = _pack([mlp_layers(n.head) or [] for n in nets])  # type: ignore[union-attr]
        else:
            self._prefix = []
            self._packed = _pack([[*(mlp_layers(n.encoder) or []), *(mlp_layers(n.head) or [])] for n in nets])  # type: ignore[union-attr]

    def _current(self) -> None:
        self.flat.ensure()  # parameters re-seated since (a deepcopy, .to()): back into the buffer
        data = self.flat.data
        snap = self._snapshot
        if snap is None or snap.shape != data.shape or not torch.equal(snap, data):
            with torch.no_grad():
                self._repack()
            self._snapshot = data.clone()
            # The activation kernel itself (the module's forward ends in it, a few calls deeper).
            kernel = {nn.ReLU: torch.relu, nn.Tanh: torch.tanh}
            self._layers = [(w, b, None if a is None else kernel.get(type(a), a.forward))
                            for w, b, a in (*self._prefix, *self._packed)]  # fmt: skip

    def __call__(self, obs: Any) -> tuple[torch.Tensor, ...]:
        """Every network's output for ``obs`` (no gradient)."""
        self._current()
        x = self.nets[0].preprocess(obs)  # type: ignore[operator]
        for weight, bias, act in self._layers:
            x = torch.addmm(bias, x, weight.t()) if x.dim() == 2 else nn.functional.linear(x, weight, bias)
            if act is not None:
                x = act(x)
        return torch.split(x, self._splits, dim=-1)


# The overloads themselves: ``torch.ops.aten.<op>(...)`` resolves the overload on every call (~5 µs).
_THRESHOLD_BACKWARD = torch.ops.aten.threshold_backward.default
_TANH_BACKWARD = torch.ops.aten.tanh_backward.default


def _relu_backward(grad: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    return _THRESHOLD_BACKWARD(grad, result, 0)  # ReluBackward0


def _tanh_backward(grad: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    return _TANH_BACKWARD(grad, result)  # TanhBackward0


#: The activations :class:`MLPChain` runs: the kernel the module's forward ends in (without the
#: module and functional layers around it) and its backward, ``(grad, result) -> grad``, as
#: autograd computes it.
_ACTIVATIONS: dict[type[nn.Module], tuple[Any, Any]] = {
    nn.ReLU: (torch.relu, _relu_backward),
    nn.Tanh: (torch.tanh, _tanh_backward),
}


def activation_kernels(act: nn.Module | None) -> tuple[Any, Any] | None:
    """``(forward, backward)`` kernels of an activation module (``(None, None)`` for none or an
    ``nn.Identity``), or None when :class:`MLPChain` does not write its backward."""
    if act is None or isinstance(act, nn.Identity):
        return None, None
    return _ACTIVATIONS.get(type(act))


#: Gradients go straight into ``.grad`` (``out=``) only where it is aligned as a fresh tensor is: a
#: GEMM may pick another kernel, and round differently, for an unaligned output; elsewhere they are
#: computed fresh and copied in (the bits autograd would accumulate into a zeroed gradient, either way).
_ALIGN = 64


def write_linear_grads(
    weight: torch.Tensor, bias: torch.Tensor, grad: torch.Tensor, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``AddmmBackward0`` of ``addmm(bias, x, weight.t())`` for the parameters: ``grad.t() @ x`` into
    ``weight.grad`` and ``grad.sum(0)`` into ``bias.grad`` (overwritten); returns the two."""
    w_grad, b_grad = weight.grad, bias.grad
    assert w_grad is not None and b_grad is not None
    if w_grad.data_ptr() % _ALIGN == 0:
        torch.mm(grad.t(), x, out=w_grad)
    else:
        w_grad.copy_(torch.mm(grad.t(), x))
    if b_grad.data_ptr() % _ALIGN == 0:
        torch.sum(grad, 0, out=b_grad)
    else:
        b_grad.copy_(grad.sum(0))
    return w_grad, b_grad


class MLPChain:
    """Training forward and hand-written backward of a plain MLP: an :class:`EvolvableNetwork`
    (its encoder and head as one chain) or, with :meth:`of_mlp`, one :class:`EvolvableMLP`.

    :meth:`forward` runs the layers as one chain of ``addmm`` and activations (no autograd graph)
    and returns the output with what the backward needs; :meth:`backward` takes the loss's gradient
    with respect to the output and writes every weight's and bias's gradient into its ``.grad``
    (overwriting it), bit-identical to what ``backward()`` through the modules would accumulate into
    zeroed gradients. Every ``.grad`` must exist (e.g. the views of
    :class:`~agilerl_plugin_gym.fast.optim.FlatParameters`).

    It holds the layers the network had when built (a mutation replaces them): :func:`mlp_chain`
    keeps one per network structure. :meth:`supports` says whether a network qualifies (an MLP
    encoder and head without LayerNorm, ReLU/Tanh/no activations, no extra head input, its encoder
    trained with it).
    """

    def __init__(self, net: nn.Module) -> None:
        if not self.supports(net):
            raise ValueError("MLPChain needs a plain-MLP network (see MLPChain.supports)")
        self._setup([*(mlp_layers(net.encoder) or []), *(mlp_layers(net.head) or [])], net.preprocess)  # type: ignore[union-attr,arg-type]

    @classmethod
    def of_mlp(cls, mlp: nn.Module, preprocess: Any = None) -> MLPChain | None:
        """The chain of one :class:`EvolvableMLP` (input ``preprocess(x)``, or ``x``), or None when
        it has anything but linear layers and ReLU/Tanh activations."""
        layers = mlp_layers(mlp)
        if layers is None or not all(act is None or type(act) in _ACTIVATIONS for _, _, act in layers):
            return None
        chain = cls.__new__(cls)
        chain._setup(layers, preprocess)
        return chain

    def _setup(self, layers: list[Layer], preprocess: Any) -> None:
        self.layers = layers
        self.preprocess = preprocess
        self._forward = [None if act is None else _ACTIVATIONS[type(act)][0] for _, _, act in layers]
        self._backward = [None if act is None else _ACTIVATIONS[type(act)][1] for _, _, act in layers]

    @staticmethod
    def supports(net: nn.Module) -> bool:
        if not _plain(net) or getattr(net, "detach_encoder", False):
            return False
        layers = [*(mlp_layers(net.encoder) or []), *(mlp_layers(net.head) or [])]  # type: ignore[union-attr]
        return all(act is None or type(act) in _ACTIVATIONS for _, _, act in layers)

    def parameters(self) -> list[torch.Tensor]:
        """Every tensor :meth:`backward` writes a gradient for (weights and biases, layer by layer)."""
        return [t for w, b, _ in self.layers for t in (w, b)]

    @no_grad
    def forward(self, obs: Any) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(output, saved)``: the output for ``obs`` (no graph) and each layer's input."""
        x = obs if self.preprocess is None else self.preprocess(obs)
        saved = [x]
        for (weight, bias, _), act in zip(self.layers, self._forward, strict=True):
            x = torch.addmm(bias, x, weight.t())  # what nn.functional.linear runs for a 2-D input
            if act is not None:
                x = act(x)
            saved.append(x)
        return x, saved

    @no_grad
    def backward(self, saved: list[torch.Tensor], grad: torch.Tensor, *, input_grad: bool = False) -> Any:
        """Write ``d loss / d parameter`` into every weight's and bias's ``.grad``, given
        ``grad = d loss / d output`` and :meth:`forward`'s ``saved``; with ``input_grad``, return
        ``d loss / d input`` too (else None).

        The kernels and operand orders are autograd's: ``AddmmBackward0`` (weight: ``grad.t() @
        input``, bias: ``grad.sum(0)``, input: ``grad @ weight``), ``ReluBackward0``
        (``threshold_backward`` on the result), ``TanhBackward0`` (``tanh_backward``).
        """
        for i in range(len(self.layers) - 1, -1, -1):
            weight, bias, _ = self.layers[i]
            act_backward = self._backward[i]
            if act_backward is not None:
                grad = act_backward(grad, saved[i + 1])
            write_linear_grads(weight, bias, grad, saved[i])
            if i or input_grad:
                grad = torch.mm(grad, weight)
        return grad if input_grad else None


#: Where :func:`mlp_chain` keeps a network's chain: a plain attribute of the network (copied with it).
_CACHED = "_agilerl_mlp_chain"


def mlp_chain(net: nn.Module) -> MLPChain | None:
    """``net``'s :class:`MLPChain` (None when it does not qualify), built once per structure.

    A learner asks for it every gradient step, and building one walks the modules (tens of µs), so
    it is kept (on the network) until the network's parts change: a new encoder or head, or a
    rebuilt layer list (every mutation, activation change or resize rebuilds an
    :class:`EvolvableMLP`'s ``layer_chain``, the list its own forward walks).
    """
    state = net.__dict__
    modules = state.get("_modules") or {}
    encoder, head = modules.get("encoder"), modules.get("head")
    structure = (encoder, head, getattr(encoder, "layer_chain", None), getattr(head, "layer_chain", None))
    hit = state.get(_CACHED)
    if hit is not None and all(map(operator.is_, hit[0], structure)):
        return hit[1]  # type: ignore[no-any-return]
    chain = MLPChain(net) if MLPChain.supports(net) else None
    state[_CACHED] = (structure, chain)  # a plain attribute: no submodule, no state_dict entry
    return chain
