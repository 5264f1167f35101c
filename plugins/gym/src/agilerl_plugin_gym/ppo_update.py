"""The PPO update: the clipped surrogate loss and its minibatch epochs, shared by PPO (single-agent,
recurrent too) and IPPO (one update per network key).

* :class:`PPOHyperparameters` — the spec fields the update reads (it is given the algorithm's spec);
* :func:`clipped_surrogate` — the loss of one minibatch (clipped ratio, optional value clip,
  entropy bonus);
* :func:`ppo_update` — ``update_epochs`` passes of shuffled minibatches over a flattened rollout,
  with gradient-norm clipping and the ``target_kl`` early stop; the algorithm supplies only a
  ``forward(obs, actions) -> (log_prob, entropy, value)`` for its policy (or a ``manual_step``
  that writes the minibatch's gradients itself: PPO's fast path, :mod:`agilerl_plugin_gym.fast.ppo`).

The rollouts it learns from are collected by the on-policy engine
(:mod:`agilerl_plugin_gym.engine.on_policy`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from agilerl_plugin_gym.fast.optim import FlatParameters
from agilerl_plugin_gym.observations import rows

__all__ = ["ManualStep", "PPOHyperparameters", "clipped_surrogate", "ppo_update"]


class PPOHyperparameters(Protocol):
    """The spec fields :func:`ppo_update` reads (PPO's and IPPO's specs have them): the update
    takes the algorithm's spec itself, so a mutated value is read at the next update."""

    @property
    def batch_size(self) -> int: ...
    @property
    def update_epochs(self) -> int: ...
    @property
    def clip_coef(self) -> float: ...
    @property
    def ent_coef(self) -> float: ...
    @property
    def vf_coef(self) -> float: ...
    @property
    def max_grad_norm(self) -> float: ...
    @property
    def target_kl(self) -> float | None: ...
    @property
    def normalize_advantages(self) -> bool: ...
    @property
    def clip_vloss(self) -> bool: ...


def clipped_surrogate(
    new_log_prob: torch.Tensor,
    entropy: torch.Tensor,
    value: torch.Tensor,
    batch: Mapping[str, torch.Tensor],
    s: PPOHyperparameters,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, policy_loss, value_loss, entropy, ratio, log_ratio)`` of one minibatch."""
    log_ratio = new_log_prob - batch["log_probs"]
    ratio = log_ratio.exp()
    adv = batch["advantages"]
    if s.normalize_advantages and adv.shape[0] > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - s.clip_coef, 1 + s.clip_coef)).mean()
    ret = batch["returns"]
    if s.clip_vloss:
        old_v = batch["values"]
        v_clipped = old_v + (value - old_v).clamp(-s.clip_coef, s.clip_coef)
        v_loss = 0.5 * torch.max((value - ret).pow(2), (v_clipped - ret).pow(2)).mean()
    else:
        v_loss = 0.5 * (value - ret).pow(2).mean()
    ent = entropy.mean()
    loss = pg_loss - s.ent_coef * ent + s.vf_coef * v_loss
    return loss, pg_loss, v_loss, ent, ratio, log_ratio


#: A minibatch step that writes the gradients of :func:`clipped_surrogate`'s loss itself (no
#: autograd; :func:`agilerl_plugin_gym.fast.ppo.manual_step`): ``step(minibatch) -> (pg_loss, v_loss, entropy, ratio, log_ratio)``, every parameter's
#: ``.grad`` set; :func:`ppo_update` then clips and steps as after ``backward()``.
ManualStep = Callable[[Mapping[str, torch.Tensor]], tuple[torch.Tensor, ...]]


#: ``forward(obs, actions[, action_mask=])``: the mask is passed when the rollout stored one.
Forward = Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
#: A recurrent policy's forward over a minibatch of padded sequences (engine.recurrent): (S, T) outputs.
SequenceForward = Callable[[Mapping[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
_TARGETS = ("log_probs", "values", "advantages", "returns")


class Optimizer(Protocol):
    """What :func:`ppo_update` needs of an optimizer (torch's, or ``agilerl_plugin_gym.optim.Adam``)."""

    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def step(self) -> Any: ...


def ppo_update(
    data: Mapping[str, torch.Tensor],
    forward: Forward | None,
    optimizer: Optimizer,
    params: Sequence[nn.Parameter] | FlatParameters,
    s: PPOHyperparameters,
    *,
    seq_forward: SequenceForward | None = None,
    manual_step: ManualStep | None = None,
) -> dict[str, float]:
    """``update_epochs`` passes of clipped-PPO minibatch steps over a flattened rollout.

    ``data`` holds ``obs``, ``actions``, ``log_probs``, ``values``, ``advantages`` and ``returns``
    (one row per valid step, as :meth:`RolloutBuffer.flat` returns them); ``forward(obs, actions)``
    returns the policy's ``(log_prob, entropy, value)`` for a minibatch. Minibatches are
    ``min(batch_size, rows)`` rows (a remainder smaller than that is skipped in the epoch); an epoch
    that ends with an approximate KL above ``target_kl`` ends the update.

    Recurrent policies pass ``seq_forward`` and the padded sequences of
    :meth:`agilerl_plugin_gym.engine.recurrent.RecurrentRolloutBuffer.sequences`: a row is then a
    sequence (``batch_size`` counts sequences, as in AgileRL), ``seq_forward(minibatch)`` runs the
    policy through time from each sequence's stored initial state, and only the steps in ``mask``
    enter the loss.

    ``manual_step`` (instead of ``forward``) computes a minibatch's loss terms and writes every
    parameter's gradient itself (bit-identical to ``backward()``: :mod:`agilerl_plugin_gym.fast.ppo`);
    the clip, the optimizer step and the statistics are the same.
    """
    n = int(data["advantages"].shape[0])
    if n == 0:
        return {}
    batch_size = min(int(s.batch_size), n)
    # Accumulate on tensors: converting to floats every minibatch would sync every step.
    device = data["advantages"].device
    sums = torch.zeros(3, device=device)
    approx_kl = torch.zeros((), device=device)
    updates = 0
    for _ in range(int(s.update_epochs)):
        perm = torch.randperm(n, device=device)
        for start in range(0, n - batch_size + 1, batch_size):
            idx = perm[start : start + batch_size]
            mb = {k: rows(v, idx) for k, v in data.items()}  # an obs of Dict/Tuple parts too
            if manual_step is not None:  # gradients written by hand: no graph, no backward()
                pg, vl, ent, ratio, log_ratio = manual_step(mb)
                _clip_and_step(optimizer, params, s.max_grad_norm)
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - log_ratio).mean()
                    sums += torch.stack([pg, vl, ent])
                updates += 1
                continue
            if seq_forward is None:
                assert forward is not None
                masks = {"action_mask": mb["action_masks"]} if "action_masks" in mb else {}  # masked policies
                new_lp, entropy, value = forward(mb["obs"], mb["actions"], **masks)
            else:  # truncated BPTT: (S, T) outputs, padding masked out
                m = mb["mask"]
                new_lp, entropy, value = (x[m] for x in seq_forward(mb))
                mb = {k: mb[k][m] for k in _TARGETS}
            loss, pg, vl, ent, ratio, log_ratio = clipped_surrogate(new_lp, entropy, value, mb, s)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            _clip_and_step(optimizer, params, s.max_grad_norm)
            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()
                sums += torch.stack([pg.detach(), vl.detach(), ent.detach()])
            updates += 1
        if s.target_kl is not None and float(approx_kl) > s.target_kl:
            break
    pg_m, vl_m, en_m = (sums / max(updates, 1)).tolist()
    return {"policy_loss": pg_m, "value_loss": vl_m, "entropy": en_m, "approx_kl": float(approx_kl)}


def _clip_and_step(optimizer: Optimizer, params: Sequence[nn.Parameter] | FlatParameters, max_grad_norm: float) -> None:
    if isinstance(params, FlatParameters):  # one norm and one scale over all gradients
        params.clip_grad_norm_(max_grad_norm)
    else:
        nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
    optimizer.step()
