"""The on-policy engine: one implementation of what PPO and IPPO (and any actor-critic) share.

* :func:`gae` — Generalised Advantage Estimation over a ``(steps, envs)`` rollout, aware of
  Gymnasium's next-step autoreset (``valid``) and of the difference between termination (no
  bootstrap) and an episode end that cuts a trajectory (bootstrap, but no credit across it).
  :class:`agilerl_plugin_gym.buffers.RolloutBuffer` calls it; so does the multi-agent rollout.
* :func:`rollout_plan` — how many vector steps each rollout of a ``learn`` call takes, so that an
  agent never trains past its step budget (the last rollout is shortened instead).
* :func:`clipped_surrogate` — the PPO loss of one minibatch (clipped ratio, optional value clip,
  entropy bonus).
* :func:`ppo_update` — ``update_epochs`` passes of shuffled minibatches over a flattened rollout,
  with gradient-norm clipping and the ``target_kl`` early stop; the algorithm supplies only a
  ``forward(obs, actions) -> (log_prob, entropy, value)`` for its policy.

Rollout collection itself lives in the strategies (one loop per env API); both write a
:class:`~agilerl_plugin_gym.buffers.RolloutBuffer` and hand its :meth:`flat` view to the
algorithm's ``learn``, which calls :func:`ppo_update`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from agilerl_plugin_gym.observations import rows
from agilerl_plugin_gym.optim import FlatParameters

__all__ = ["PPOSettings", "clipped_surrogate", "gae", "ppo_update", "rollout_plan"]


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    dones: np.ndarray,
    valid: np.ndarray,
    last_value: np.ndarray,
    last_valid: np.ndarray,
    gamma: float,
    gae_lambda: float,
    out: np.ndarray,
) -> None:
    """GAE(lambda) of a ``(T, N)`` rollout into ``out`` (advantages; returns are ``out + values``).

    ``values[t + 1]`` (``last_value`` after the last step) is the value of the observation that
    followed step ``t``. It is bootstrapped unless step ``t`` *terminated*; credit never flows back
    across an episode end (``dones``); a step with ``valid == 0`` (an auto-reset step, or an agent
    that did not act) gets advantage 0 and passes no credit back.
    """
    next_values = np.concatenate([values[1:], np.asarray(last_value, dtype=np.float32)[None]])
    next_valid = np.concatenate([valid[1:], np.asarray(last_valid, dtype=np.float32)[None]])
    # Everything that does not depend on the recursion, computed for all steps at once.
    delta = rewards + gamma * next_values * (1.0 - terminated) - values
    carry = gamma * gae_lambda * (1.0 - dones) * next_valid
    last_gae = np.zeros(rewards.shape[1], dtype=np.float32)
    for t in range(rewards.shape[0] - 1, -1, -1):
        last_gae = (delta[t] + carry[t] * last_gae) * valid[t]
        out[t] = last_gae


def rollout_plan(num_steps: int, learn_step: int, num_envs: int) -> list[int]:
    """Vector steps per rollout for a ``learn(num_steps)`` call.

    Full rollouts are ``max(1, learn_step // num_envs)`` vector steps; when the budget does not
    divide, the last rollout covers only what is left (rounded up to whole vector steps), so the
    agent's step count never exceeds its budget by more than ``num_envs - 1``.
    """
    full = max(1, learn_step // num_envs)
    vec_budget = max(1, -(-num_steps // num_envs))
    plan = [full] * (vec_budget // full)
    if vec_budget % full:
        plan.append(vec_budget % full)
    return plan


class PPOSettings:
    """The hyperparameters :func:`ppo_update` reads, as attributes (mutable by HPO).

    PPO and IPPO inherit this declaration (annotations only: values come from the spec via
    :class:`agilerl.algorithm.AlgorithmBase`, or are set in ``__init__``).
    """

    lr: float
    learn_step: int
    batch_size: int
    gamma: float
    gae_lambda: float
    update_epochs: int
    clip_coef: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    target_kl: float | None
    normalize_advantages: bool
    clip_vloss: bool
    device: torch.device


def clipped_surrogate(
    new_log_prob: torch.Tensor,
    entropy: torch.Tensor,
    value: torch.Tensor,
    batch: Mapping[str, torch.Tensor],
    s: PPOSettings,
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


Forward = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
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
    s: PPOSettings,
    *,
    seq_forward: SequenceForward | None = None,
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
    """
    n = int(data["advantages"].shape[0])
    if n == 0:
        return {}
    batch_size = min(int(s.batch_size), n)
    # Accumulate on tensors: converting to floats every minibatch would sync every step.
    sums = torch.zeros(3, device=s.device)
    approx_kl = torch.zeros((), device=s.device)
    updates = 0
    for _ in range(int(s.update_epochs)):
        perm = torch.randperm(n, device=s.device)
        for start in range(0, n - batch_size + 1, batch_size):
            idx = perm[start : start + batch_size]
            mb = {k: rows(v, idx) for k, v in data.items()}  # an obs of Dict/Tuple parts too
            if seq_forward is None:
                assert forward is not None
                new_lp, entropy, value = forward(mb["obs"], mb["actions"])
            else:  # truncated BPTT: (S, T) outputs, padding masked out
                m = mb["mask"]
                new_lp, entropy, value = (x[m] for x in seq_forward(mb))
                mb = {k: mb[k][m] for k in _TARGETS}
            loss, pg, vl, ent, ratio, log_ratio = clipped_surrogate(new_lp, entropy, value, mb, s)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if isinstance(params, FlatParameters):  # one norm and one scale over all gradients
                params.clip_grad_norm_(s.max_grad_norm)
            else:
                nn.utils.clip_grad_norm_(params, s.max_grad_norm, foreach=True)
            optimizer.step()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()
                sums += torch.stack([pg.detach(), vl.detach(), ent.detach()])
            updates += 1
        if s.target_kl is not None and float(approx_kl) > s.target_kl:
            break
    pg_m, vl_m, en_m = (sums / max(updates, 1)).tolist()
    return {"policy_loss": pg_m, "value_loss": vl_m, "entropy": en_m, "approx_kl": float(approx_kl)}
