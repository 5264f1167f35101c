"""RainbowDQN's fast path: its gradient step with the gradients written by hand.

:func:`learn` is :meth:`RainbowDQN.learn <agilerl_plugin_gym.single_agent.rainbow.RainbowDQN.learn>`
for an online network with an MLP encoder and plain noisy streams (:func:`by_hand` says when), with
``loss.backward()``'s gradients written out in autograd's order of floating-point operations
(:func:`learn_by_hand`), bit-identical. The functions take the agent as ``self``: they are the
methods they were, moved here unchanged. ``plugins/gym/tests/fast/test_hand_written_gradients.py``
checks them against the autograd path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from agilerl_plugin_gym.fast.fused import MLPChain, activation_kernels, write_linear_grads
from agilerl_plugin_gym.fast.optim import no_grad
from agilerl_plugin_gym.networks.rainbow import NoisyLinear, NoisyMLP, RainbowNetwork, project_distribution
from agilerl_plugin_gym.single_agent.rainbow import MAX_GRAD_NORM, RainbowDQN

__all__ = ["by_hand", "learn", "learn_by_hand", "select_learn"]


def select_learn(agent: RainbowDQN) -> Callable[..., Any] | None:
    """:func:`learn` bound to ``agent`` when :func:`by_hand` has a plan for its network."""
    if getattr(agent.spec, "action_masking", False):  # masked next actions: RainbowDQN's own learn
        return None
    return functools.partial(learn, agent) if by_hand(agent) is not None else None


def learn(self: RainbowDQN, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """:meth:`RainbowDQN.learn`: by hand while :func:`by_hand` has a plan (:func:`learn_by_hand`)."""
    plan = by_hand(self)
    if plan is None:
        return self.learn(batch)
    return learn_by_hand(self, batch, plan)


def by_hand(self: RainbowDQN) -> _Plan | None:
    """What :func:`learn_by_hand` runs the online network as (kept until the network's parts
    change), or None where autograd runs: a non-MLP encoder, LayerNorm or an activation
    without a written-out backward, ``combined_reward`` (a second loss term), or parameters
    outside the layers it writes."""
    net = self.nets["actor"]
    structure = (net, net.encoder, net.head, net.value_head, getattr(net.encoder, "layer_chain", None),
                 net.head.layer_chain, net.value_head.layer_chain, self.flat)  # fmt: skip
    cached = self.__dict__.get("_plan")
    if cached is None or any(a is not b for a, b in zip(cached[0], structure, strict=True)):
        cached = self._plan = (structure, None if self.spec.combined_reward else _Plan.of(net, self.flat))  # type: ignore[attr-defined]
    if cached[1] is not None:
        self.flat.ensure()  # every .grad a view of the flat gradient, which the plan overwrites whole
    return cached[1]


@no_grad
def learn_by_hand(self: RainbowDQN, batch: dict[str, torch.Tensor], plan: _Plan) -> dict[str, torch.Tensor]:
    """:meth:`RainbowDQN.learn` with ``loss.backward()``'s gradients written by hand, in autograd's order
    of floating-point operations: the weighted mean, the cross-entropy's product and sum, the
    log-softmax and the index of the taken action, the dueling combination (``V + A -
    mean_a A``), each noisy layer (``addmm`` under ``mu + sigma * eps``: ``mu`` gets the weight
    gradient, ``sigma`` it times ``eps``) and the encoder (:class:`MLPChain`)."""
    net, target = self.nets["actor"], self.nets["actor_target"]
    net.noisy = target.noisy = True
    action = batch["action"].long().view(-1)
    nsteps = batch.get("nsteps")
    gamma_n = self.spec.gamma if nsteps is None else torch.pow(self.spec.gamma, nsteps)
    rows = torch.arange(action.shape[0], device=action.device)
    # Forward: as RainbowNetwork.logits_pair (the next observations under the same noise).
    z, saved_enc = plan.encoder.forward(batch["obs"])
    z2, _ = plan.encoder.forward(batch["next_obs"])
    adv, adv2, saved_adv = plan.advantage.forward_pair(z, z2)
    value, value2, saved_value = plan.value.forward_pair(z, z2)
    logits, next_logits = net.dueling(adv, value), net.dueling(adv2, value2)
    log_p = logits[rows, action].log_softmax(-1)
    next_a = net.q_values(next_logits).argmax(1)
    next_dist = target.logits(batch["next_obs"])[rows, next_a].softmax(-1)
    proj = project_distribution(next_dist, batch["reward"], gamma_n * (1.0 - batch["done"]), net.support)
    loss_i = -(proj * log_p).sum(1)
    weights = batch.get("weights")
    loss = (loss_i * weights).mean() if weights is not None else loss_i.mean()
    # Backward.
    n = loss_i.shape[0]
    g_mean = torch.ones((), dtype=loss_i.dtype, device=loss_i.device) / n
    g_loss_i = g_mean * weights if weights is not None else g_mean.expand(n)
    g_log_p = (-g_loss_i).unsqueeze(1).expand_as(log_p) * proj
    g_picked = torch._log_softmax_backward_data(g_log_p, log_p, -1, log_p.dtype)
    g_logits = torch._index_put_impl_(torch.zeros_like(logits), (rows, action), g_picked, True, True)
    g_value = g_logits.sum(1, keepdim=True)  # V + A: V broadcast over the actions
    g_adv = g_logits + (-g_logits).sum(1, keepdim=True).expand_as(g_logits) / logits.shape[1]  # A - mean_a A
    g_z = plan.advantage.backward(saved_adv, g_adv.view_as(adv)) + plan.value.backward(
        saved_value, g_value.view_as(value)
    )
    plan.encoder.backward(saved_enc, g_z)
    self.flat.clip_grad_norm_(MAX_GRAD_NORM)
    self.optimizers["optimizer"].step()  # every gradient written: nothing to zero first
    self.soft_update()
    net.reset_noise()
    target.reset_noise()
    out = {"loss": loss.detach()}
    if weights is not None:
        out["priorities"] = loss_i.detach() + self.spec.prior_eps
    return out


class _NoisyStream:
    """A :class:`NoisyMLP` stream with its noise on, run by hand: the forward over two batches under
    the same noisy weights (as ``NoisyMLP.forward_pair``), the backward for the first."""

    def __init__(self, layers: list[tuple[NoisyLinear, Any, Any]]) -> None:
        self.layers = layers

    @classmethod
    def of(cls, mlp: Any) -> _NoisyStream | None:
        if type(mlp) is not NoisyMLP or mlp.layer_norm:
            return None
        layers = []
        for lin, act in [*zip(mlp.linears, mlp.acts, strict=True), (mlp.output, mlp.output_act)]:
            kernels = activation_kernels(act)
            if type(lin) is not NoisyLinear or kernels is None:
                return None
            layers.append((lin, *kernels))
        return cls(layers)

    def parameters(self) -> list[torch.Tensor]:
        return [lin._parameters[k] for lin, _, _ in self.layers for k in ("weight", "bias", "weight_sigma",
                                                                            "bias_sigma")]  # type: ignore[misc]  # fmt: skip

    def forward_pair(self, x: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[Any]]:
        saved = []
        for lin, forward, _ in self.layers:
            p, b = lin._parameters, lin._buffers
            weight = torch.addcmul(p["weight"], p["weight_sigma"], b["weight_eps"])  # type: ignore[arg-type]
            bias = torch.addcmul(p["bias"], p["bias_sigma"], b["bias_eps"])  # type: ignore[arg-type]
            x_in = x
            x, x2 = torch.addmm(bias, x, weight.t()), torch.addmm(bias, x2, weight.t())
            if forward is not None:
                x, x2 = forward(x), forward(x2)
            saved.append((weight, x_in, x))
        return x, x2, saved

    def backward(self, saved: list[Any], grad: torch.Tensor) -> torch.Tensor:
        """Write every layer's four gradients (``AddcmulBackward0`` under ``AddmmBackward0``) and
        return the gradient of the stream's input."""
        for (lin, _, act_backward), (weight, x_in, out) in zip(reversed(self.layers), reversed(saved), strict=True):
            if act_backward is not None:
                grad = act_backward(grad, out)
            p, b = lin._parameters, lin._buffers
            g_weight, g_bias = write_linear_grads(p["weight"], p["bias"], grad, x_in)  # type: ignore[arg-type]
            torch.mul(g_weight, b["weight_eps"], out=p["weight_sigma"].grad)  # type: ignore[union-attr]
            torch.mul(g_bias, b["bias_eps"], out=p["bias_sigma"].grad)  # type: ignore[union-attr]
            grad = torch.mm(grad, weight)
        return grad


class _Plan:
    """The online RainbowNetwork for :func:`learn_by_hand`: its encoder as an
    :class:`MLPChain`, its advantage and value streams as :class:`_NoisyStream` s."""

    def __init__(self, encoder: MLPChain, advantage: _NoisyStream, value: _NoisyStream) -> None:
        self.encoder, self.advantage, self.value = encoder, advantage, value

    @classmethod
    def of(cls, net: RainbowNetwork, flat: Any) -> _Plan | None:
        if type(net) is not RainbowNetwork or net.encoder_arch != "mlp":
            return None
        encoder = MLPChain.of_mlp(net.encoder, net.preprocess)
        advantage, value = _NoisyStream.of(net.head), _NoisyStream.of(net.value_head)
        if encoder is None or advantage is None or value is None:
            return None
        written = [*encoder.parameters(), *advantage.parameters(), *value.parameters()]
        if len(written) != len(flat.params) or {id(t) for t in written} != {id(p) for p in flat.params}:
            return None
        return cls(encoder, advantage, value)
