"""LLMREINFORCE: REINFORCE with a baseline for (multi-turn) text episodes.

One sampled episode per prompt. Each turn's policy tokens are credited with the discounted return
from that turn on (``gamma``), minus the batch's mean episode return (``baseline: batch_mean``),
optionally whitened. The loss per policy token is the clipped surrogate
``max(-A * ratio, -A * clip(ratio, 1 +- clip_coef))``; with ``update_epochs: 1`` the ratio is 1 and
this is exactly ``-A * log pi`` in gradient. Loss is averaged over each episode's tokens, then over
episodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agilerl_plugin_llm.rollout.base import (
    RolloutLLMAlgorithm,
    pad_trajectories,
    returns_to_go,
    sequence_mean_loss,
)
from agilerl_plugin_llm.rollout.grpo import policy_loss
from agilerl_plugin_llm.rollout.harness import Trajectory
from agilerl_plugin_llm.rollout.specs import LLMREINFORCESpec


class LLMREINFORCE(RolloutLLMAlgorithm):
    """REINFORCE on a causal LM. Hyperparameters: ``lr``, ``gamma``, ``clip_coef``, ``baseline``,
    ``whiten_advantages``, ``update_epochs``, ``max_grad_norm``, ``beta`` (KL to the reference; 0 off)
    and the sampling fields."""

    spec: LLMREINFORCESpec

    @property
    def needs_reference(self) -> bool:  # type: ignore[override]
        return float(getattr(self.spec, "beta", 0.0)) > 0.0

    def advantages(
        self, trajs: Sequence[Trajectory], rewards: torch.Tensor, group_size: int
    ) -> dict[str, torch.Tensor]:
        baseline = float(rewards.mean()) if self.spec.baseline == "batch_mean" else 0.0
        turn_index = pad_trajectories(trajs, self.pad_id)["turn_index"]
        adv = torch.zeros(turn_index.shape, dtype=torch.float32)
        for i, t in enumerate(trajs):
            g = returns_to_go(t.rewards, float(self.spec.gamma))
            if self.spec.advantage_granularity == "trajectory":
                g = [g[0]] * len(g)  # the episode's (discounted) return credits every turn
            for turn, value in enumerate(g):
                adv[i][turn_index[i] == turn] = value - baseline
        if self.spec.whiten_advantages:
            mask = turn_index >= 0
            if int(mask.sum()) > 1:
                adv = torch.where(mask, adv / (adv[mask].std() + 1e-6), adv)
        return {"advantages": adv}

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        x = self.policy_tokens(batch, self.logprobs(batch, temperature=self._logit_temperature()))
        per_token, clipped = policy_loss(
            x.logp, x.old, batch["advantages"], x.mask, clip_coef=self.clip_range(), level=self.spec.ratio_level,
            turn_index=batch.get("turn_index"),
        )  # fmt: skip
        stats = dict(x.stats)
        per_token = self.with_kl(x.weighted(per_token), x.logp, batch, x.mask, stats, 10.0)
        return sequence_mean_loss(per_token, clipped, x.mask, stats)


__all__ = ["LLMREINFORCE", "returns_to_go"]
