"""RLOO: REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics"), as TRL's RLOOTrainer.

Per iteration, ``batch_size`` prompts are each answered ``group_size`` (k) times. Completion i's
baseline is the mean reward of the other k - 1 completions of its prompt::

    A_i = r_i - (sum_j r_j - r_i) / (k - 1)  =  k / (k - 1) * (r_i - mean(r))

(``normalize_advantages``: then ``(A - mean(A)) / (std(A) + 1e-4)`` over the batch, as TRL). The loss
is GRPO's (clipped ratio, ``beta`` x the k3 KL to the reference, ``loss_type``/``loss_norm``,
``entropy_coef``, ``filter_zero_adv``, ``mask_truncated_completions``): only the advantage differs.
TRL's RLOOTrainer subtracts ``beta`` x the sequence KL from the reward instead; here the KL is GRPO's
per-token penalty in the loss (docs/llm.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agilerl_plugin_llm.rollout.base import pad_trajectories
from agilerl_plugin_llm.rollout.grpo import GRPO, postprocess_advantages
from agilerl_plugin_llm.rollout.harness import Trajectory
from agilerl_plugin_llm.rollout.specs import RLOOSpec


def leave_one_out_advantages(rewards: torch.Tensor, k: int, *, normalize: bool = False) -> torch.Tensor:
    """``r_i`` minus the mean of the other ``k - 1`` rewards of its group (groups of ``k``, contiguous)."""
    grouped = rewards.view(-1, k)
    baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (k - 1)
    adv = (grouped - baseline).reshape(-1)
    if normalize and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-4)
    return adv


class RLOO(GRPO):
    """RLOO on a causal LM: GRPO with the leave-one-out baseline. See the module docstring."""

    spec: RLOOSpec  # type: ignore[assignment]

    def advantages(
        self, trajs: Sequence[Trajectory], rewards: torch.Tensor, group_size: int
    ) -> dict[str, torch.Tensor]:
        adv = leave_one_out_advantages(rewards, group_size, normalize=self.spec.normalize_advantages)
        mask = pad_trajectories(trajs, self.pad_id)["loss_mask"] if self.spec.whiten_advantages else None
        return postprocess_advantages(adv, mask, self.spec)


__all__ = ["RLOO", "leave_one_out_advantages"]
