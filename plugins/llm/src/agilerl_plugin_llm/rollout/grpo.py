"""GRPO: Group Relative Policy Optimization (Shao et al. 2024, "DeepSeekMath").

Per iteration:

1. ``batch_size`` prompts, each answered ``group_size`` times by the current policy (sampled);
2. advantage of completion i of a group: ``r_i - mean(r)`` (``adv_norm: mean_only``), divided by
   ``std(r) + 1e-4`` (``mean_std``); every policy token of the completion gets it;
3. loss per policy token ``t``, with ``ratio = pi(t) / pi_old(t)``::

       pg = max(-A * ratio, -A * clip(ratio, 1 - clip_coef, 1 + clip_coef))
       kl = exp(ref - logp) - (ref - logp) - 1          # k3 estimator of KL(pi || pi_ref)
       loss_t = pg + beta * min(kl, kl_clamp)

   averaged over each completion's tokens, then over completions (``loss_norm``; TRL's ``loss_type``
   dr_grpo / dapo / bnpo name its other normalisations), minus ``entropy_coef`` x the entropy
   estimate. ``loss_type: gspo`` uses one
   sequence-level ratio (the geometric mean of the token ratios) per completion; ``cispo`` weights
   ``-A * logp`` by the clipped ratio with gradients stopped through it.

With ``update_epochs: 1`` and one mini-batch, ``pi_old`` is the current policy (ratio 1, its
gradient is the plain policy gradient) and no extra forward pass is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agilerl_plugin_llm.rollout.base import (
    RolloutLLMAlgorithm,
    masked_mean_per_row,
    pad_trajectories,
    returns_to_go,
)
from agilerl_plugin_llm.rollout.harness import Trajectory
from agilerl_plugin_llm.rollout.specs import GRPOSpec, clip_bounds


def group_advantages(rewards: torch.Tensor, group_size: int, *, norm: str) -> torch.Tensor:
    """Advantages of ``rewards`` (``[num_groups * group_size]``, groups contiguous) within each group."""
    grouped = rewards.view(-1, group_size)
    adv = grouped - grouped.mean(dim=1, keepdim=True)
    if norm == "mean_std":
        adv = adv / (grouped.std(dim=1, keepdim=True) + 1e-4)
    elif norm == "mean_batch_std":  # TRL's scale_rewards: batch
        adv = adv / ((rewards.std() if rewards.numel() > 1 else torch.zeros(())) + 1e-4)
    return adv.reshape(-1)


def entropy_bonus(logp: torch.Tensor, coef: float) -> torch.Tensor:
    """Per-token ``-coef * H``, ``H`` estimated by the sampled token: value ``coef * log pi`` (``-coef x`` the
    estimate ``-log pi``) and gradient ``coef * log pi * grad log pi``, the score-function estimate of
    ``-coef * grad H`` (``E[grad log pi] = 0``). Minimising it raises the policy's entropy."""
    lp = logp.detach()
    return coef * lp * (logp - lp + 1.0)


def turn_group_advantages(
    trajs: Sequence[Trajectory],
    turn_index: torch.Tensor,
    group_size: int,
    *,
    norm: str,
    fallback: bool,
) -> torch.Tensor:
    """Per-token advantages ``[N, T]`` at turn granularity.

    Completion ``i``'s turn ``k`` is scored by its return from turn ``k`` on, relative to the same
    return of the other completions of its group that reached turn ``k``. Where fewer than two did,
    the turn gets the trajectory advantage (``fallback``) or 0.
    """
    traj_adv = group_advantages(torch.tensor([t.total_reward for t in trajs], dtype=torch.float32), group_size,
                                norm=norm)  # fmt: skip
    adv = torch.zeros(turn_index.shape, dtype=torch.float32)
    for start in range(0, len(trajs), group_size):
        group = range(start, min(start + group_size, len(trajs)))
        returns = {i: returns_to_go(trajs[i].rewards, 1.0) for i in group}
        for k in range(max(len(g) for g in returns.values())):
            members = [i for i in group if k < len(returns[i])]
            values = torch.tensor([returns[i][k] for i in members], dtype=torch.float32)
            for pos, i in enumerate(members):
                if len(members) >= 2:
                    value = float(values[pos] - values.mean())
                    if norm == "mean_std":
                        value /= float(values.std()) + 1e-4
                else:
                    value = float(traj_adv[i]) if fallback else 0.0
                adv[i][turn_index[i] == k] = value
    return adv


def pooled_log_ratio(
    log_ratio: torch.Tensor, mask: torch.Tensor, level: str, turn_index: torch.Tensor | None = None
) -> torch.Tensor:
    """The log importance ratio at ``level``, broadcast back to tokens ``[B, T]``.

    ``token``: unchanged; ``trajectory``: the mean over each row's policy tokens (log of the geometric
    mean ratio, GSPO); ``turn``: the mean over each turn's tokens (``turn_index``, -1 outside turns).
    """
    if level == "token":
        return log_ratio
    if level == "trajectory" or turn_index is None:
        return masked_mean_per_row(log_ratio, mask).unsqueeze(-1).expand_as(log_ratio)
    turns = int(turn_index.max().item()) + 1 if turn_index.numel() else 1
    onehot = (turn_index.unsqueeze(-1) == torch.arange(max(turns, 1), device=turn_index.device)).to(log_ratio.dtype)
    onehot = onehot * mask.to(log_ratio.dtype).unsqueeze(-1)  # [B, T, turns]
    sums = (log_ratio.unsqueeze(-1) * onehot).sum(dim=1)
    means = sums / onehot.sum(dim=1).clamp(min=1.0)  # [B, turns]
    return means.gather(1, turn_index.clamp(min=0))


def postprocess_advantages(adv: torch.Tensor, loss_mask: torch.Tensor | None, spec: Any) -> dict[str, torch.Tensor]:
    """AgileRL's order after the group advantages: zero-advantage filter, whitening, clipping.

    ``filter_zero_adv``: a completion whose largest ``|advantage|`` is at most ``adv_filter_eps`` is
    marked for dropping (``keep``; every member of a group with equal rewards, DAPO's dynamic
    sampling); ``whiten_advantages`` normalises over the kept completions' policy tokens;
    ``adv_clip_range`` clips. The rollout loop removes the dropped rows before the update.
    """
    n = adv.shape[0]
    out: dict[str, torch.Tensor] = {}
    keep = torch.ones(n, dtype=torch.bool)
    if spec.filter_zero_adv:
        keep = adv.reshape(n, -1).abs().amax(dim=1) > float(spec.adv_filter_eps)
        out["keep"] = keep
    if spec.whiten_advantages:
        if loss_mask is None:
            raise ValueError("whiten_advantages needs the batch's loss_mask")
        mask = loss_mask.float().clone()
        mask[:, 0] = 0.0
        mask = mask * keep.float().unsqueeze(-1)
        tokens = adv.unsqueeze(-1).expand_as(mask) if adv.dim() == 1 else adv
        count = mask.sum().clamp(min=1.0)
        mean = (tokens * mask).sum() / count
        var = (((tokens - mean) * mask) ** 2).sum() / (count - 1.0).clamp(min=1.0)
        adv = (tokens - mean) / (var.sqrt() + 1e-8) * (mask > 0)
    if spec.adv_clip_range is not None:
        adv = adv.clamp(-float(spec.adv_clip_range), float(spec.adv_clip_range))
    out["advantages"] = adv
    return out


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_coef: float | tuple[float, float],
    loss_type: str = "grpo",
    level: str | None = None,
    turn_index: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token surrogate loss ``[B, T]`` and the clipped-token indicator, for ``loss_type``.

    ``clip_coef``: a scalar ``c`` (ratio bounds ``1 -+ c``) or ratio bounds ``(low, high)``. ``level``
    is the ``importance_sampling_level`` (default token; gspo: trajectory). For CISPO a scalar bounds
    the weight from above only (as MiniMax-M1); a pair bounds it both ways.
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    low, high = clip_bounds(clip_coef)
    level = level or ("trajectory" if loss_type == "gspo" else "token")
    log_ratio = logp - old_logp
    if level != "token":
        # The pooled ratio's value, with each token's own gradient path (the GSPO-token form).
        log_ratio = pooled_log_ratio(log_ratio, mask, level, turn_index).detach() + logp - logp.detach()
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, low, high)
    if loss_type == "cispo":
        bounded = (
            torch.clamp(ratio, min=low, max=high) if isinstance(clip_coef, (tuple, list)) else ratio.clamp(max=high)
        )
        weight = bounded.detach()
        return -weight * adv * logp, (ratio > high).float()
    per_token = torch.maximum(-adv * ratio, -adv * clipped_ratio)
    return per_token, (clipped_ratio != ratio).float()


def normalised_loss_sum(
    per_token: torch.Tensor, mask: torch.Tensor, batch: dict[str, torch.Tensor], norm: str, max_tokens: int = 1
) -> torch.Tensor:
    """The loss of a micro-batch, summed in the units ``optimize`` divides by (see ``loss_norm``).

    ``sequence``: each row's token mean, summed over rows (``optimize`` divides by the mini-batch's
    rows); ``micro_batch``: the micro-batch's token mean times its rows (so micro-batches weigh by
    rows); ``accumulation_window``: the token sum (``optimize`` divides by the mini-batch's tokens);
    ``max_tokens``: each row's token sum over the constant ``max_tokens`` (Dr. GRPO: no length bias).
    """
    if norm == "sequence":
        return masked_mean_per_row(per_token, mask).sum()
    total = (per_token * mask).sum()
    if norm == "max_tokens":
        return total / float(max(max_tokens, 1))
    if norm == "micro_batch":
        return total / mask.sum().clamp(min=1.0) * per_token.shape[0]
    return total


class GRPO(RolloutLLMAlgorithm):
    """GRPO on a causal LM (full fine-tuning or a LoRA ``actor`` adapter). See the module docstring.

    Hyperparameters (all from :class:`~agilerl_plugin_llm.rollout.specs.GRPOSpec`): ``group_size``,
    ``lr``, ``clip_coef``, ``beta``, ``adv_norm``, ``loss_type``, ``kl_clamp``, ``filter_zero_adv``
    (with ``adv_filter_eps``), ``whiten_advantages``, ``adv_clip_range``,
    ``temperature`` (and the other sampling fields), ``update_epochs``, ``max_grad_norm``.
    """

    spec: GRPOSpec

    @property
    def needs_reference(self) -> bool:  # type: ignore[override]
        return float(getattr(self.spec, "beta", 0.0)) > 0.0

    def advantages(
        self, trajs: Sequence[Trajectory], rewards: torch.Tensor, group_size: int
    ) -> dict[str, torch.Tensor]:
        adv: torch.Tensor
        if self.spec.advantage_granularity == "turn":
            turn_index = pad_trajectories(trajs, self.pad_id)["turn_index"]
            adv = turn_group_advantages(trajs, turn_index, group_size, norm=self.spec.adv_norm,
                                        fallback=self.spec.turn_advantage_trajectory_fallback)  # fmt: skip
        else:  # trajectory (and auto): one advantage per completion
            adv = group_advantages(rewards, group_size, norm=self.spec.adv_norm)
        # Only whitening reads the policy-token mask: skip padding the batch a second time without it.
        mask = pad_trajectories(trajs, self.pad_id)["loss_mask"] if self.spec.whiten_advantages else None
        return postprocess_advantages(adv, mask, self.spec)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        x = self.policy_tokens(batch, self.logprobs(batch, temperature=self._logit_temperature()))
        mask = x.mask
        per_token, clipped = policy_loss(
            x.logp, x.old, batch["advantages"], mask, clip_coef=self.clip_range(), loss_type=self.spec.loss_type,
            level=self.spec.ratio_level, turn_index=batch.get("turn_index"),
        )  # fmt: skip
        stats = dict(x.stats)
        # The vLLM importance-sampling weight scales the policy term, before the KL penalty (as AgileRL).
        per_token = self.with_kl(x.weighted(per_token), x.logp, batch, mask, stats, self.spec.kl_clamp)
        stats["entropy"] = float(masked_mean_per_row(-x.logp.detach(), mask).mean())  # sampled-token estimate
        if self.spec.entropy_coef > 0:
            per_token = per_token + entropy_bonus(x.logp, float(self.spec.entropy_coef))
        stats["clip_fraction"] = float(masked_mean_per_row(clipped, mask).mean())
        loss_sum = normalised_loss_sum(per_token, mask, batch, self.spec.loss_norm, self.spec.new_tokens)
        stats["loss"] = float(loss_sum.detach()) / max(len(per_token), 1)
        return loss_sum, stats

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        if self.spec.loss_norm == "accumulation_window":
            # Token-level loss over the optimizer step: optimize divides by the mini-batch's policy tokens.
            return self._update(batch, units=_policy_tokens)
        return self._update(batch)


def _policy_tokens(batch: dict[str, torch.Tensor]) -> float:
    mask = batch["loss_mask"].clone()
    mask[:, 0] = 0
    return float(mask.sum())


__all__ = [
    "GRPO",
    "entropy_bonus",
    "group_advantages",
    "normalised_loss_sum",
    "policy_loss",
    "pooled_log_ratio",
    "postprocess_advantages",
    "turn_group_advantages",
]
