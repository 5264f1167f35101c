"""PPO's fast paths: acting with actor and critic packed, the minibatch step without autograd.

* :func:`act` — :meth:`PPO.act <agilerl_plugin_gym.single_agent.ppo.PPO.act>` with actor and
  critic as one :class:`~agilerl_plugin_gym.fast.fused.FusedMLP` (plain-MLP networks);
* :func:`learn` — :meth:`PPO.learn <agilerl_plugin_gym.single_agent.ppo.PPO.learn>` for plain-MLP
  networks and a categorical policy: :func:`~agilerl_plugin_gym.ppo_update.ppo_update` with a
  :func:`manual_step` that writes every gradient itself (:class:`~agilerl_plugin_gym.fast.fused.MLPChain`
  for each network, the loss's gradient from :func:`surrogate_grads`), bit-identical to
  ``loss.backward()``;
* :func:`surrogate_grads` — the loss terms of :func:`~agilerl_plugin_gym.ppo_update.clipped_surrogate`
  and its gradients with respect to the new log-probabilities, the values and the entropies,
  computed with the floating-point operations autograd runs for it, in its order.

The functions take the agent as ``self``: they are the methods they were, moved here unchanged.
``plugins/gym/tests/fast/test_hand_written_gradients.py`` checks them against the autograd path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from agilerl_plugin_gym.fast.fused import FusedMLP, MLPChain
from agilerl_plugin_gym.fast.optim import inference_mode
from agilerl_plugin_gym.ppo_update import ManualStep, PPOHyperparameters, ppo_update

if TYPE_CHECKING:
    from agilerl_plugin_gym.buffers import RolloutBuffer
    from agilerl_plugin_gym.single_agent.ppo import PPO

__all__ = ["LossGrads", "act", "learn", "manual_step", "select_act", "select_learn", "surrogate_grads"]


def select_act(agent: PPO) -> Callable[..., Any] | None:
    """:func:`act` bound to ``agent`` when its actor and critic pack (:meth:`FusedMLP.supports`) and
    it masks no actions."""
    if getattr(agent.spec, "action_masking", False):
        return None
    return functools.partial(act, agent) if fused_heads(agent) is not None else None


def select_learn(agent: PPO) -> Callable[..., Any] | None:
    """:func:`learn` bound to ``agent`` when :func:`manual_step` writes its gradients (no action masks)."""
    if getattr(agent.spec, "action_masking", False):
        return None
    return functools.partial(learn, agent) if manual_step(agent) is not None else None


@inference_mode
def act(self: PPO, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:meth:`PPO.act`: sample actions for a batch: (action, log-prob, value)."""
    fused = fused_heads(self)
    if fused is not None:  # actor and critic as one chain of matmuls (agilerl_plugin_gym.fast.fused)
        out, value = fused(obs)
        return self._act_from(out, value.squeeze(-1))
    return self._act_from(*self._heads(obs))


def fused_heads(self: PPO) -> FusedMLP | None:
    """The packed actor + critic for acting, rebuilt when the networks or their buffer change."""
    actor, critic = self.nets["actor"], self.nets["critic"]
    cached = getattr(self, "_fused", None)
    if cached is None or cached[0] is not self.flat or cached[1] is not actor or cached[2] is not critic:
        fused = FusedMLP([actor, critic], self.flat) if FusedMLP.supports([actor, critic]) else None
        cached = self._fused = (self.flat, actor, critic, fused)  # type: ignore[attr-defined]
    return cached[3]


def learn(self: PPO, buffer: RolloutBuffer) -> dict[str, float]:
    """:meth:`PPO.learn` with the gradients written by hand where :func:`manual_step` can."""
    opt = self.optimizers["optimizer"]
    manual = manual_step(self)
    if manual is not None:  # plain MLPs, categorical policy: gradients by hand, bit-identical
        return ppo_update(buffer.flat(), None, opt, self.flat, self.spec, manual_step=manual)
    return self.learn(buffer)


def manual_step(self: PPO) -> ManualStep | None:
    """The minibatch step without autograd (:class:`~agilerl_plugin_gym.fast.fused.MLPChain` for each
    network, the loss's gradient from :func:`surrogate_grads`), or
    None where autograd runs: anything but a Discrete action space, a shared encoder, a network
    that is not a plain MLP, or parameters outside the two networks' layers."""
    actor, critic = self.nets["actor"], self.nets["critic"]
    if self.kind != "discrete" or self.shared or self.extra_params:
        return None
    if not (MLPChain.supports(actor) and MLPChain.supports(critic)):
        return None
    chains = MLPChain(actor), MLPChain(critic)
    self.flat.ensure()  # every .grad a view of the flat gradient, which the chains overwrite whole
    written = {id(t) for c in chains for t in c.parameters()}
    if written != {id(p) for p in self.flat.params}:
        return None

    def step(mb: Any) -> tuple[torch.Tensor, ...]:
        (logits, saved_a), (value, saved_c) = chains[0].forward(mb["obs"]), chains[1].forward(mb["obs"])
        value = value.squeeze(-1)
        logp = torch.log_softmax(logits, -1)
        actions = mb["actions"].long().unsqueeze(-1)
        p = logp.exp()
        entropy = -(p * logp).sum(-1)
        g = surrogate_grads(logp.gather(-1, actions).squeeze(-1), value, mb, self.spec)
        chains[0].backward(saved_a, categorical_backward(logp, p, actions, g.log_prob, g.entropy))
        chains[1].backward(saved_c, g.value.unsqueeze(-1))
        return g.pg_loss, g.v_loss, entropy.mean(), g.ratio, g.log_ratio

    return step


def categorical_backward(
    logp: torch.Tensor, p: torch.Tensor, actions: torch.Tensor, g_log_prob: torch.Tensor, g_entropy: torch.Tensor
) -> torch.Tensor:
    """d loss / d logits of :meth:`_log_prob_entropy`'s discrete branch, as autograd computes
    it: the entropy's backward (``-(exp(logp) * logp).sum(-1)``: through the product and through
    the exp) and the gather's (a scatter into zeros), summed into the log-softmax's gradient in
    the engine's order, then ``_log_softmax_backward_data``."""
    g_prod = (-g_entropy).expand_as(logp)  # through the neg and the sum
    g_gather = torch.zeros_like(logp).scatter_add_(-1, actions, g_log_prob.unsqueeze(-1))
    # The engine runs the entropy's nodes (made after the gather) first: (product + exp) + gather.
    g_logp = (g_prod * p + (g_prod * logp) * p) + g_gather
    return torch._log_softmax_backward_data(g_logp, logp, -1, logp.dtype)


class LossGrads(NamedTuple):
    """:func:`surrogate_grads`' result: the loss terms (no graph) and the loss's gradients."""

    pg_loss: torch.Tensor
    v_loss: torch.Tensor
    ratio: torch.Tensor
    log_ratio: torch.Tensor
    #: d loss / d new log-probability, per row.
    log_prob: torch.Tensor
    #: d loss / d value, per row.
    value: torch.Tensor
    #: d loss / d entropy, the same for every row (a 0-dim tensor: ``-ent_coef / rows``).
    entropy: torch.Tensor


def _maximum_backward(a: torch.Tensor, b: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.maximum``'s backward (autograd's formula): a tie splits the gradient in half."""
    tie = a == b
    half = grad / 2
    return torch.where(tie, half, grad).masked_fill_(a < b, 0), torch.where(tie, half, grad).masked_fill_(a > b, 0)


def _clamp_backward(x: torch.Tensor, grad: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """``clamp``'s backward (autograd's formula): the gradient where ``low <= x <= high``, else 0."""
    return torch.where((x >= low).logical_and_(x <= high), grad, torch.zeros((), dtype=grad.dtype, device=grad.device))


@torch.no_grad()
def surrogate_grads(
    new_log_prob: torch.Tensor, value: torch.Tensor, batch: Mapping[str, torch.Tensor], s: PPOHyperparameters
) -> LossGrads:
    """:func:`clipped_surrogate` without autograd: its loss terms and its gradients.

    The gradients of ``loss = pg_loss - ent_coef * entropy.mean() + vf_coef * v_loss`` with respect
    to ``new_log_prob``, ``value`` and each row's entropy, from the same kernels autograd's backward
    of :func:`clipped_surrogate` runs (``MeanBackward``, ``MaximumBackward``, ``ClampBackward``,
    ``MulBackward``, ``ExpBackward``, ``PowBackward``), in the same order, so that they are
    bit-identical to ``loss.backward()``'s (a test checks it).
    """
    n = new_log_prob.shape[0]
    one = torch.ones((), dtype=new_log_prob.dtype, device=new_log_prob.device)
    c = s.clip_coef
    log_ratio = new_log_prob - batch["log_probs"]
    ratio = log_ratio.exp()
    adv = batch["advantages"]
    if s.normalize_advantages and adv.shape[0] > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    neg_adv = -adv
    surr, surr_clipped = neg_adv * ratio, neg_adv * ratio.clamp(1 - c, 1 + c)
    pg_loss = torch.max(surr, surr_clipped).mean()
    # loss = (pg - ent_coef * ent) + vf_coef * v_loss: the three terms' upstream gradients.
    g_surr, g_clipped = _maximum_backward(surr, surr_clipped, one / n)
    g_ratio = g_surr * neg_adv + _clamp_backward(ratio, g_clipped * neg_adv, 1 - c, 1 + c)
    g_log_prob = g_ratio * ratio
    g_entropy = (-one * s.ent_coef) / n
    g_sq = one * s.vf_coef * 0.5 / n  # through vf_coef * (0.5 * mean(...))
    ret = batch["returns"]
    if s.clip_vloss:
        old_v = batch["values"]
        dv = value - old_v
        diff, diff_clipped = value - ret, old_v + dv.clamp(-c, c) - ret
        sq, sq_clipped = diff.pow(2), diff_clipped.pow(2)
        v_loss = 0.5 * torch.max(sq, sq_clipped).mean()
        g_sq_a, g_sq_b = _maximum_backward(sq, sq_clipped, g_sq)
        g_value = g_sq_a * (2.0 * diff) + _clamp_backward(dv, g_sq_b * (2.0 * diff_clipped), -c, c)
    else:
        diff = value - ret
        v_loss = 0.5 * diff.pow(2).mean()
        g_value = g_sq * (2.0 * diff)
    return LossGrads(pg_loss, v_loss, ratio, log_ratio, g_log_prob, g_value, g_entropy)
