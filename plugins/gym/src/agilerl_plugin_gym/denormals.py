"""Denormal floats flushed to zero while a gym agent learns (the strategies' ``learn``).

Why: Adam's first moment of a parameter whose gradient has become zero (a dead ReLU unit's
weights, common in DQN's 256-256 Q-networks) decays by ``beta1`` each step until it underflows
into float32's denormal range (below ~1.2e-38), and there it stays: round-to-nearest maps
``0.9 * k * 2**-149`` back to ``k * 2**-149`` for small ``k``, so the moment never reaches zero.
On x86 each arithmetic operation on a denormal takes a microcode assist, many times the cost of
a normal one. In the DQN CartPole cell of ``benchmarks/gym/bench_learning.py`` (RL Zoo's
hyperparameters) 59% of the Adam first moments were such denormals after 20,000 steps and the
fused Adam step took ~14x its time on normal values; flushing them halves the run's CPU time
(``benchmarks/gym/bench_denormals.py`` measures it, SB3's side beside ours).

What changes: inside :func:`flush_denormals` the training thread runs with the CPU's
flush-to-zero and denormals-are-zero modes (``torch.set_flush_denormal``), so a value below
float32's smallest normal number reads and writes as zero. Results can differ from the unflushed
run only where a denormal arose: such a first moment moves a weight by about ``lr * 1e-38 / eps``,
far below a float32 weight's rounding step, so in practice runs reproduce value for value (the
learning benchmark's reruns did), though that is not guaranteed. The previous mode is restored on
exit, so code around training (a user's own torch work, evaluation) keeps the process's setting.
Only the thread that trains is switched (our default is one torch thread); GPUs are unaffected.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["flush_denormals", "flushing"]

#: A float32 denormal (below the smallest normal number, 2**-126 ~ 1.18e-38).
_DENORMAL = 1e-39


def flushing() -> bool:
    """Whether this thread flushes denormal floats to zero (torch's setting has no getter)."""
    return float(torch.tensor(_DENORMAL, dtype=torch.float32) * 2.0) == 0.0


@contextmanager
def flush_denormals() -> Iterator[None]:
    """Run the block with denormal floats flushed to zero on this thread; the previous mode after."""
    if flushing():
        yield
        return
    supported = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if supported:
            torch.set_flush_denormal(False)
