"""SFT: supervised fine-tuning of a causal LM on prompt -> response rows.

The loss is the mean next-token negative log-likelihood over *response* tokens only (the dataset
env's ``loss_mask``): the prompt is context, not a target. Fitness is the negative held-out loss.
"""

from __future__ import annotations

from typing import Any

import torch

from agilerl_plugin_llm.algorithms.base import Batch, LLMAlgorithm, sequence_logprobs


def _target_tokens(batch: Batch) -> float:
    # Token 0 has no predecessor, so it can never be a target.
    return float(batch["loss_mask"][..., 1:].sum())


class SFT(LLMAlgorithm):
    """Supervised fine-tuning (hyperparameters in :class:`agilerl_plugin_llm.dataset.specs.SFTSpec`).

    ``lr``: AdamW learning rate. ``batch_size``: rows per iteration. ``update_epochs``: passes over
    each batch. ``max_grad_norm``: gradient clipping (0: off). ``mini_batch_size`` /
    ``micro_batch_size_per_gpu``: rows per optimizer step / per forward pass.
    """

    needs_reference = False

    def _logps(self, batch: Batch) -> torch.Tensor:
        flag = bool(getattr(self.spec, "calc_position_embeddings", True))
        ids, mask, loss_mask = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
        return sequence_logprobs(self.model, ids, mask, loss_mask, position_ids_from_mask=flag,
                                 pack=self.sequence_packing)  # fmt: skip

    def _loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        logps = self._logps(batch)
        loss_sum = -logps.sum()
        return loss_sum, {"loss": float(loss_sum.detach()) / max(_target_tokens(batch), 1.0)}

    def learn(self, batch: Batch) -> dict[str, float]:
        """One training iteration on ``batch`` (``update_epochs`` passes); returns mean stats."""
        stats: dict[str, float] = {}
        for _ in range(int(getattr(self.spec, "update_epochs", 1))):
            stats = self.optimize(batch, self._loss, units=_target_tokens)
        return stats

    @torch.no_grad()
    def evaluate(self, env: Any, *, batch_size: int | None = None) -> dict[str, float]:
        """Mean per-token NLL (and perplexity) of the env's held-out responses."""
        self.model.eval()
        total, tokens = 0.0, 0.0
        size = batch_size or self.micro_batch_rows or self.spec.batch_size
        for batch in env.test_batches(size):
            batch = self.to_device(batch)
            logps = self._logps(batch)
            total -= float(logps.sum())
            tokens += _target_tokens(batch)
        loss = total / max(tokens, 1.0)
        return {"loss": loss, "perplexity": float(torch.tensor(loss).exp())}

    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float:
        """Fitness: the negative held-out loss (higher is better)."""
        return -self.evaluate(env)["loss"]
