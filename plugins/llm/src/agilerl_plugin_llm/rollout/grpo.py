"""GRPO: Group Relative Policy Optimization (Shao et al. 2024, "DeepSeekMath").

Per iteration:

1. ``batch_size`` prompts, each answered ``group_size`` times by the current policy (sampled);
2. advantage of completion i of a group: ``r_i - mean(r)`` (``adv_norm: mean_only``), divided by
   ``std(r) + 1e-4`` (``mean_std``); every policy token of the completion gets it;
3. loss per policy token ``t``, with ``ratio = pi(t) / pi_old(t)``::

       pg = max(-A * ratio, -A * clip(ratio, 1 - clip_coef, 1 + clip_coef))
       kl = exp(ref - logp) - (ref - logp) - 1          # k3 estimator of KL(pi || pi_ref)
       loss_t = pg + beta * min(kl, kl_clamp)

   averaged over each completion's tokens, then over completions. ``loss_type: gspo`` uses one
   sequence-level ratio (the geometric mean of the token ratios) per completion; ``cispo`` weights
   ``-A * logp`` by the clipped ratio with gradients stopped through it.

With ``update_epochs: 1`` and one mini-batch, ``pi_old`` is the current policy (ratio 1, its
gradient is the plain policy gradient) and no extra forward pass is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agilerl_plugin_llm.rollout.base import RolloutLLMAlgorithm, k3_kl, masked_mean_per_row
from agilerl_plugin_llm.rollout.harness import Trajectory
from agilerl_plugin_llm.rollout.specs import GRPOSpec


def group_advantages(rewards: torch.Tensor, group_size: int, *, norm: str) -> torch.Tensor:
    """Advantages of ``rewards`` (``[num_groups * group_size]``, groups contiguous) within each group."""
    grouped = rewards.view(-1, group_size)
    adv = grouped - grouped.mean(dim=1, keepdim=True)
    if norm == "mean_std":
        adv = adv / (grouped.std(dim=1, keepdim=True) + 1e-4)
    return adv.reshape(-1)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_coef: float,
    loss_type: str = "grpo",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token surrogate loss ``[B, T]`` and the clipped-token indicator, for ``loss_type``."""
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    log_ratio = logp - old_logp
    if loss_type == "gspo":
        # Sequence-level ratio, with the token's own gradient path (GSPO-token form).
        seq = masked_mean_per_row(log_ratio, mask).unsqueeze(-1)
        log_ratio = seq.detach() + logp - logp.detach()
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    if loss_type == "cispo":
        weight = torch.clamp(ratio, max=1.0 + clip_coef).detach()
        return -weight * adv * logp, (ratio > 1.0 + clip_coef).float()
    per_token = torch.maximum(-adv * ratio, -adv * clipped_ratio)
    return per_token, (clipped_ratio != ratio).float()


class GRPO(RolloutLLMAlgorithm):
    """GRPO on a causal LM (full fine-tuning or a LoRA ``actor`` adapter). See the module docstring.

    Hyperparameters (all from :class:`~agilerl_plugin_llm.rollout.specs.GRPOSpec`): ``group_size``,
    ``lr``, ``clip_coef``, ``beta``, ``adv_norm``, ``loss_type``, ``kl_clamp``, ``filter_zero_adv``,
    ``temperature`` (and the other sampling fields), ``update_epochs``, ``max_grad_norm``.
    """

    spec: GRPOSpec
    group_size: int

    def __init__(self, spec: Any, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)  # tokenizer, model, index, device, ... (see RolloutLLMAlgorithm)
        self._rows_per_batch()

    def _rows_per_batch(self) -> None:
        # Mini/micro batches are given in prompts; each prompt is group_size rows.
        mini, micro = self.spec.mini_batch_size, self.spec.micro_batch_size_per_gpu
        self.mini_batch_size = None if mini is None else int(mini) * int(self.group_size)
        self.micro_batch_size_per_gpu = None if micro is None else int(micro) * int(self.group_size)

    def _on_hyperparameter_change(self, name: str, old: Any, new: Any) -> None:
        super()._on_hyperparameter_change(name, old, new)
        if name == "group_size":
            self._rows_per_batch()

    @property
    def needs_reference(self) -> bool:  # type: ignore[override]
        return float(getattr(self, "beta", 0.0)) > 0.0

    def episodes_per_iteration(self) -> tuple[list[int], int]:
        return self._iteration_seeds(int(self.batch_size)), int(self.group_size)

    def advantages(self, trajs: Sequence[Trajectory], rewards: torch.Tensor, repeats: int) -> dict[str, torch.Tensor]:
        adv = group_advantages(rewards, repeats, norm=self.spec.adv_norm)
        if self.spec.filter_zero_adv:
            # Groups with equal rewards carry no signal; drop their tokens from the loss.
            keep = rewards.view(-1, repeats).std(dim=1) > 1e-8
            keep = keep.repeat_interleave(repeats)
            return {"advantages": adv, "row_weight": keep.float()}
        return {"advantages": adv}

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        mask = batch["loss_mask"].float()
        mask[:, 0] = 0.0
        logp = self.logprobs(batch, temperature=self._logit_temperature())
        old = batch["old_logprobs"] if "old_logprobs" in batch else logp.detach()
        per_token, clipped = policy_loss(
            logp, old, batch["advantages"], mask, clip_coef=float(self.clip_coef), loss_type=self.spec.loss_type
        )
        stats: dict[str, float] = {}
        if self.beta > 0 and "ref_logprobs" in batch:
            kl = k3_kl(logp, batch["ref_logprobs"], self.spec.kl_clamp)
            per_token = per_token + float(self.beta) * kl
            stats["kl"] = float(masked_mean_per_row(kl.detach(), mask).mean())
        per_row = masked_mean_per_row(per_token, mask)
        if "row_weight" in batch:
            per_row = per_row * batch["row_weight"]
        stats["clip_fraction"] = float(masked_mean_per_row(clipped, mask).mean())
        loss_sum = per_row.sum()
        stats["loss"] = float(loss_sum.detach()) / max(len(per_row), 1)
        return loss_sum, stats


__all__ = ["GRPO", "group_advantages", "policy_loss"]
