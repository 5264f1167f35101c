"""The reward network of the neural bandits and the replay memory they learn from.

NeuralUCB and NeuralTS need, for every arm's context ``x``, the gradient ``g = d f(x) / d theta`` of
the predicted reward with respect to *all* network parameters, and the quadratic form
``g^T U^-1 g``. With the diagonal approximation ``U = lamb + sum_t g_t**2`` this is
``sum_p g_p**2 / U_p``: cost linear in the number of parameters.

For a linear layer ``y = W a + b`` the per-sample gradient is ``dW = delta a^T``, ``db = delta``
(``delta = df/dy``), so ``sum_ij dW_ij**2 / U_ij = (delta**2) . (U^-1 (a**2))``: per-arm gradients
never need to be materialised. :meth:`RewardNet.gradient_factors` returns every layer's ``(a,
delta)`` pairs from one forward and one hand-written backward pass.

Speed is the point of this module: a bandit step works on a handful of tiny tensors, where
autograd's per-call overhead costs more than the arithmetic. So the parameters are the gym plugin's
:class:`~agilerl_plugin_gym.optim.FlatParameters` (layers are views into one flat tensor, their
gradients views into another), the regression gradient is written straight into that flat gradient
buffer, and the gym plugin's :class:`~agilerl_plugin_gym.optim.FlatAdam` steps it (one fused kernel).
The design-matrix diagonal and the anchor ``theta0`` are flat tensors of the same layout: each
elementwise update is one call on one tensor, and a checkpoint is a few flat tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from agilerl_plugin_gym.optim import FlatParameters

ActivationPair = tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]

_SQRT_2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

#: Activation -> (function, derivative given pre-activation ``z`` and output ``h``).
ACTIVATIONS: dict[str, ActivationPair] = {
    # A bool mask multiplies like 0/1 and saves a cast per step.
    "ReLU": (torch.relu, lambda z, h: z > 0),
    "Tanh": (torch.tanh, lambda z, h: 1.0 - h * h),
    "Sigmoid": (torch.sigmoid, lambda z, h: h * (1.0 - h)),
    "LeakyReLU": (
        lambda z: torch.nn.functional.leaky_relu(z, 0.01),
        lambda z, h: torch.where(z > 0, torch.ones_like(z), torch.full_like(z, 0.01)),
    ),
    "ELU": (torch.nn.functional.elu, lambda z, h: torch.where(z > 0, torch.ones_like(z), h + 1.0)),
    "GELU": (
        torch.nn.functional.gelu,
        lambda z, h: 0.5 * (1.0 + torch.erf(z / _SQRT_2)) + z * _INV_SQRT_2PI * torch.exp(-0.5 * z * z),
    ),
    "Softplus": (torch.nn.functional.softplus, lambda z, h: torch.sigmoid(z)),
    "Identity": (lambda z: z, lambda z, h: torch.ones_like(z)),
}


class RewardNet:
    """An MLP mapping a context to a scalar predicted reward, its parameters one flat buffer.

    :param input_dim: context size (``arms * features`` for a table bandit).
    :param hidden_size: width of each hidden layer.
    :param activation: hidden activation (a key of :data:`ACTIVATIONS`).
    :param generator: seeds the initial weights (LeCun-uniform; biases zero).
    :param device: torch device.
    """

    def __init__(
        self,
        input_dim: int,
        hidden_size: list[int],
        activation: str = "ReLU",
        *,
        generator: torch.Generator | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"unsupported activation {activation!r}; use one of {sorted(ACTIVATIONS)}")
        self.input_dim = int(input_dim)
        self.hidden_size = [int(h) for h in hidden_size]
        self.activation = activation
        self._act, self._act_grad = ACTIVATIONS[activation]
        sizes = [self.input_dim, *self.hidden_size, 1]
        #: (out_features, in_features) of each linear layer, the last one the output.
        self.shapes = list(zip(sizes[1:], sizes[:-1], strict=False))
        self.num_params = sum(o * i + o for o, i in self.shapes)
        self.device = torch.device(device)
        tensors: list[torch.Tensor] = []
        for o, i in self.shapes:
            bound = math.sqrt(3.0 / i)  # unit output variance for unit-variance inputs
            tensors += [torch.empty(o, i).uniform_(-bound, bound, generator=generator), torch.zeros(o)]
        #: Weight and bias of each layer, in that order, as views of one flat buffer (and their
        #: gradients as views of another): the layout of every flat tensor of this network.
        self.params = FlatParameters([t.to(self.device) for t in tensors])
        self._bind()

    @property
    def flat(self) -> torch.Tensor:
        """All parameters, one flat tensor (the layers are views into it)."""
        return self.params.data

    @property
    def grad(self) -> torch.Tensor:
        """The flat gradient buffer :meth:`mse_gradient` writes and the optimizer reads."""
        assert self.params.grad is not None
        return self.params.grad

    def _bind(self) -> None:
        self.params.ensure()  # a copy or an unpickled network re-seats its parameters first
        self.layers = self.views(self.flat)
        self._grad_layers = self.views(self.grad)
        # Transposed weight views, made once: forward passes use them every step.
        self.weights_t = [w.t() for w, _ in self.layers]

    def __getstate__(self) -> dict[str, object]:
        # Layer views are rebuilt on unpickling / deepcopy so they keep pointing into ``flat``.
        state = dict(self.__dict__)
        for key in ("layers", "_grad_layers", "weights_t", "_act", "_act_grad"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._act, self._act_grad = ACTIVATIONS[self.activation]
        self._bind()

    def set_activation(self, name: str) -> None:
        """Use activation ``name`` after every hidden layer; the weights stay as they are."""
        if name not in ACTIVATIONS:
            raise ValueError(f"unsupported activation {name!r}; use one of {sorted(ACTIVATIONS)}")
        self.activation = name
        self._act, self._act_grad = ACTIVATIONS[name]

    def views(self, flat: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(weight, bias)`` views of each layer into a flat tensor of this network's layout."""
        parts = self.params.views(flat)
        return list(zip(parts[0::2], parts[1::2], strict=True))

    def zeros(self) -> torch.Tensor:
        """A zero flat tensor with this network's layout (moments, statistics)."""
        return torch.zeros_like(self.flat)

    @property
    def width(self) -> int:
        """Width of the last hidden layer: the ``m`` NeuralUCB scales squared gradients by."""
        return self.hidden_size[-1] if self.hidden_size else self.input_dim

    def load_flat(self, flat: torch.Tensor) -> None:
        if flat.shape != self.flat.shape:
            raise ValueError(f"expected {self.num_params} parameters, got {tuple(flat.shape)}")
        self.flat.copy_(flat)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted reward per row of ``x`` (shape ``(n,)``)."""
        h = x
        last = len(self.layers) - 1
        for i, ((_, b), w_t) in enumerate(zip(self.layers, self.weights_t, strict=True)):
            h = torch.addmm(b, h, w_t)
            if i < last:
                h = self._act(h)
        return h.squeeze(-1)

    def _forward_cached(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        inputs: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []  # activation derivative of each hidden layer
        h = x
        last = len(self.layers) - 1
        for i, ((_, b), w_t) in enumerate(zip(self.layers, self.weights_t, strict=True)):
            inputs.append(h)
            z = torch.addmm(b, h, w_t)
            if i < last:
                h = self._act(z)
                grads.append(self._act_grad(z, h))
            else:
                h = z
        return h, inputs, grads

    def _backward(self, top: torch.Tensor, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        deltas = [top]
        delta = top
        for i in range(len(self.layers) - 2, -1, -1):
            delta = (delta @ self.layers[i + 1][0]) * grads[i]
            deltas.append(delta)
        deltas.reverse()
        return deltas

    def gradient_factors(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """Predictions and, per layer, its inputs ``a`` and output gradients ``delta`` for every row.

        Row ``k``'s gradient of layer ``l`` is ``outer(delta[l][k], a[l][k])`` (weight) and
        ``delta[l][k]`` (bias). Rows are independent (no batch statistics), so one backward pass of
        ``sum(f)`` yields every row's own gradient.
        """
        out, inputs, grads = self._forward_cached(x)
        deltas = self._backward(torch.ones_like(out), grads)
        return out.squeeze(-1), inputs, deltas

    def mse_gradient(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Write ``d mean((f(x) - target)^2) / d theta`` into the flat gradient buffer
        (:attr:`grad`, overwritten); return the MSE."""
        out, inputs, grads = self._forward_cached(x)
        err = out.squeeze(-1) - target
        deltas = self._backward((err * (2.0 / err.shape[0])).unsqueeze(-1), grads)
        for (gw, gb), a, d in zip(self._grad_layers, inputs, deltas, strict=True):
            torch.mm(d.t(), a, out=gw)
            torch.sum(d, 0, out=gb)
        return (err * err).mean()


def adam_state(state: dict[str, Any], net: RewardNet) -> dict[str, Any]:
    """An optimizer state in ``torch.optim.Adam``'s format (what :class:`FlatAdam` saves), also from
    checkpoints written before the bandit used it: their own flat Adam's ``{lr, betas, eps, m, v, t}``."""
    if "param_groups" in state:
        return state
    t = int(state["t"])
    moments = zip(net.params.views(state["m"]), net.params.views(state["v"]), strict=True)
    return {
        "state": {} if t == 0 else {
            i: {"step": torch.tensor(float(t)), "exp_avg": m, "exp_avg_sq": v} for i, (m, v) in enumerate(moments)
        },
        "param_groups": [{"lr": float(state["lr"]), "betas": tuple(state["betas"]), "eps": float(state["eps"]),
                          "weight_decay": 0.0, "params": list(range(len(net.params.params)))}],
    }  # fmt: skip


class BanditMemory:
    """A ring buffer of (chosen context, reward) pairs in preallocated numpy arrays.

    numpy, not torch: writing one row per step costs a fraction of a torch indexing call, and a
    sampled minibatch crosses to torch without a copy (on CPU).

    :param capacity: pairs kept; the oldest is overwritten when full.
    :param context_dim: size of one context.
    """

    def __init__(self, capacity: int, context_dim: int, *, device: str | torch.device = "cpu") -> None:
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.contexts = np.zeros((self.capacity, context_dim), dtype=np.float32)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, context: np.ndarray, reward: float) -> None:
        self.contexts[self.pos] = context
        self.rewards[self.pos] = reward
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch_size`` pairs drawn uniformly with replacement."""
        idx = rng.integers(0, self.size, size=batch_size)
        x = torch.from_numpy(self.contexts[idx])
        r = torch.from_numpy(self.rewards[idx])
        if self.device.type != "cpu":
            x, r = x.to(self.device, non_blocking=True), r.to(self.device, non_blocking=True)
        return x, r

    def state_dict(self) -> dict[str, object]:
        return {
            "capacity": self.capacity,
            "contexts": torch.from_numpy(self.contexts[: self.size].copy()),
            "rewards": torch.from_numpy(self.rewards[: self.size].copy()),
            "pos": self.pos,
            "size": self.size,
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        size = int(state["size"])  # type: ignore[call-overload]
        contexts = np.asarray(state["contexts"], dtype=np.float32)
        rewards = np.asarray(state["rewards"], dtype=np.float32)
        if size > self.capacity or contexts.shape[1:] != self.contexts.shape[1:]:
            raise ValueError("replay memory in the checkpoint does not fit this agent's buffer")
        self.contexts[:size] = contexts
        self.rewards[:size] = rewards
        self.size = size
        self.pos = int(state["pos"]) % self.capacity  # type: ignore[call-overload]
