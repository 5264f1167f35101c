"""Token log-probabilities from hidden states, optionally in row chunks that never hold all the logits.

``log p(target) = logit[target] - logsumexp(logits)`` needs the vocabulary projection of every
scored position: ``[N, V]`` for N policy tokens, in float32 for the reduction, and kept by autograd
for the backward. With a large vocabulary that is most of a step's memory (N = 4096 tokens of a
262k-vocabulary model: 4 GiB per copy). Chunked (AgileRL's ``use_liger_loss``, Liger's fused
linear + loss in effect, and ``chunk_rows``), the rows go through ``lm_head`` and the reduction
``chunk_rows`` at a time under activation checkpointing: each chunk's logits are freed as soon as
its log-probs exist, and the backward recomputes them one chunk at a time. Same numbers (float
tolerance), peak logit memory ``[chunk_rows, V]``, one extra ``lm_head`` matmul per chunk.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

#: The float32 logit tile the automatic chunk size aims at (AgileRL's ~256 MB budget).
WORKSPACE_BYTES = 256 * 2**20
MIN_CHUNK_ROWS, MAX_CHUNK_ROWS = 128, 4096


def auto_chunk_rows(vocab_size: int) -> int:
    """Rows per chunk for a ``[rows, vocab_size]`` float32 tile of about :data:`WORKSPACE_BYTES`."""
    rows = WORKSPACE_BYTES // max(1, int(vocab_size) * 4)
    return int(min(max(rows, MIN_CHUNK_ROWS), MAX_CHUNK_ROWS))


def token_logprobs(
    hidden: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """``log p(targets[i])`` under ``head(hidden[i]) / temperature`` for each row ``i`` (float32, ``[N]``).

    :param hidden: ``[N, H]`` hidden states of the positions that predict ``targets``.
    :param head: maps ``[n, H]`` hidden states to ``[n, V]`` logits (``lm_head`` and the model's own
        logit scaling / soft-capping).
    :param chunk_rows: None: all rows at once (``[N, V]`` logits); else at most this many at a time.
    """

    def piece(rows: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
        logits = head(rows)
        if temperature != 1.0:
            logits = logits / temperature
        # cross_entropy = -log_softmax gathered at the target: one fused op, no [n, V] log-prob copy.
        return -F.cross_entropy(logits.float(), wanted, reduction="none")

    n = int(hidden.shape[0])
    if chunk_rows is None or n <= chunk_rows:
        return piece(hidden, targets)
    track = torch.is_grad_enabled()
    parts = []
    for start in range(0, n, int(chunk_rows)):
        rows, wanted = hidden[start : start + chunk_rows], targets[start : start + chunk_rows]
        # Checkpointed: only the chunk's inputs are kept; its logits are rebuilt in the backward.
        parts.append(checkpoint(piece, rows, wanted, use_reentrant=False) if track else piece(rows, wanted))
    return torch.cat(parts)


__all__ = ["MAX_CHUNK_ROWS", "MIN_CHUNK_ROWS", "WORKSPACE_BYTES", "auto_chunk_rows", "token_logprobs"]
