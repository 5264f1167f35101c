"""DPO: Direct Preference Optimization (Rafailov et al., 2023), with an optional NLL term.

For a prompt x with a chosen answer y_w and a rejected y_l, and the summed log-probabilities of the
answer tokens under the policy (pi) and the frozen reference (ref)::

    h = beta * [(log pi(y_w|x) - log ref(y_w|x)) - (log pi(y_l|x) - log ref(y_l|x))]
    loss = -log sigmoid(h) + nll_alpha * NLL(y_w|x)

``NLL`` is the chosen answer's mean per-token negative log-likelihood (the RPO-style term that
keeps the chosen answers likely; ``nll_alpha: 0`` gives plain DPO). The reference is the separate
``reference`` LoRA adapter, the adapter-disabled base, or (full fine-tuning) a frozen copy.
Fitness is the negative held-out loss; the held-out preference accuracy (h > 0; a tie counts 1/2) is
reported too.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from agilerl_plugin_llm.algorithms.base import Batch, LLMAlgorithm, sequence_logprobs
from agilerl_plugin_llm.dataset.specs import DPOSpec


def _accuracy(logits: torch.Tensor) -> torch.Tensor:
    """1 where the policy prefers chosen over rejected more than the reference does, 0.5 on a tie
    (so an untrained policy, identical to its reference, scores chance rather than 0)."""
    return (logits > 0).float() + 0.5 * (logits == 0).float()


class DPO(LLMAlgorithm):
    """DPO (hyperparameters in :class:`agilerl_plugin_llm.dataset.specs.DPOSpec`).

    ``beta``: scale of the implicit reward ``log(pi / ref)``. ``nll_alpha``: weight of the chosen
    NLL. ``lr``, ``batch_size`` (pairs per iteration), ``update_epochs``, ``max_grad_norm``,
    ``mini_batch_size``, ``micro_batch_size_per_gpu`` as in SFT.
    """

    needs_reference = True
    spec: DPOSpec

    def _answer_logps(self, model: Any, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed answer log-probs ``[B, 2]`` and answer token counts ``[B, 2]`` (chosen, rejected)."""
        b, sides, t = batch["input_ids"].shape
        flat = {k: v.reshape(b * sides, t) for k, v in batch.items()}
        # One forward over chosen and rejected together: half the kernel launches of two passes.
        logps = sequence_logprobs(
            model,
            flat["input_ids"],
            flat["attention_mask"],
            flat["loss_mask"],
            position_ids_from_mask=bool(getattr(self.spec, "calc_position_embeddings", True)),
            pack=self.sequence_packing,
        )
        counts = flat["loss_mask"][:, 1:].sum(-1).clamp(min=1).float()
        return logps.sum(-1).view(b, sides), counts.view(b, sides)

    def _terms(self, batch: Batch) -> dict[str, torch.Tensor]:
        policy, counts = self._answer_logps(self.model, batch)
        with self.reference() as ref:
            reference, _ = self._answer_logps(ref, batch)
        ratios = policy - reference
        logits = self.spec.beta * (ratios[:, 0] - ratios[:, 1])
        dpo = -F.logsigmoid(logits)
        nll = -policy[:, 0] / counts[:, 0]
        return {"loss": dpo + self.spec.nll_alpha * nll, "dpo": dpo, "nll": nll, "logits": logits}

    def _loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        terms = self._terms(batch)
        stats = {
            "loss": float(terms["loss"].detach().mean()),
            "dpo_loss": float(terms["dpo"].detach().mean()),
            "nll": float(terms["nll"].detach().mean()),
            "accuracy": float(_accuracy(terms["logits"].detach()).mean()),
            "margin": float(terms["logits"].detach().mean() / self.spec.beta),
        }
        return terms["loss"].sum(), stats

    def learn(self, batch: Batch) -> dict[str, float]:
        """One training iteration on a batch of pairs (``update_epochs`` passes); returns mean stats."""
        stats: dict[str, float] = {}
        for _ in range(int(getattr(self.spec, "update_epochs", 1))):
            stats = self.optimize(batch, self._loss)
        return stats

    @torch.no_grad()
    def evaluate(self, env: Any, *, batch_size: int | None = None) -> dict[str, float]:
        """Held-out loss, preference accuracy (share of pairs with h > 0) and mean reward margin."""
        self.model.eval()
        sums = {"loss": 0.0, "accuracy": 0.0, "margin": 0.0, "nll": 0.0}
        rows = 0
        size = batch_size or self.micro_batch_rows or self.spec.batch_size
        for batch in env.test_batches(size):
            terms = self._terms(self.to_device(batch))
            sums["loss"] += float(terms["loss"].sum())
            sums["nll"] += float(terms["nll"].sum())
            sums["accuracy"] += float(_accuracy(terms["logits"]).sum())
            sums["margin"] += float(terms["logits"].sum() / self.spec.beta)
            rows += int(terms["loss"].shape[0])
        return {k: v / max(rows, 1) for k, v in sums.items()}

    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float:
        """Fitness: the negative held-out loss (higher is better)."""
        return -self.evaluate(env)["loss"]
