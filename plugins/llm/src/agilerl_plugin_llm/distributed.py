"""Data parallelism over processes started by ``torchrun`` or ``accelerate launch`` (torch.distributed).

Every process runs the same run in lock step: the same population, the same batches and rollouts
(seeded alike), the same evaluations, selection and mutation. What is split is the loss: each
optimizer step's rows are cut into one contiguous shard per process, each process back-propagates
its shard's part of the step's loss (normalised by the *whole* step's units), and the gradients are
summed across processes before the step. So N processes take the same optimizer steps as one
process at the same global batch (up to float summation order), with the forward/backward work
divided by N. Only rank 0 writes metrics.

The process group comes from the launcher's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``): gloo on CPU, nccl on CUDA. One process (no launcher) is the default and costs nothing.
"""

from __future__ import annotations

import os
from typing import Any

import torch


def world_size() -> int:
    """Processes in this run (1 without a launcher)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def context() -> tuple[int, int]:
    """``(rank, world_size)``; joins the launcher's process group on first use."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() and os.environ.get("AGILERL_DIST_BACKEND") != "gloo" else "gloo"
        dist.init_process_group(backend=backend)
    return int(dist.get_rank()), int(dist.get_world_size())


def shard(rows: int, rank: int, world: int) -> tuple[int, int]:
    """``[start, stop)`` of this rank's contiguous share of ``rows`` (the first ranks get one more)."""
    base, extra = divmod(rows, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum every parameter's gradient over the processes (in one flat buffer)."""
    import torch.distributed as dist

    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def merge_stats(totals: dict[str, float], counts: dict[str, int]) -> tuple[dict[str, float], dict[str, int]]:
    """Sum per-process stat totals and counts, so logged means cover the whole step."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (totals, counts))
    out_t: dict[str, float] = {}
    out_c: dict[str, int] = {}
    for t, c in gathered:
        for k, v in t.items():
            out_t[k] = out_t.get(k, 0.0) + float(v)
        for k, v in c.items():
            out_c[k] = out_c.get(k, 0) + int(v)
    return out_t, out_c


class _Silent:
    """A metrics logger for ranks other than 0 (rank 0 writes the run's metrics)."""

    def log(self, row: dict[str, Any]) -> None:
        pass

    def log_population(self, summary: dict[str, Any]) -> None:
        pass

    def read_jsonl(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


def quiet_other_ranks(run: Any) -> None:
    """On ranks other than 0, drop metric rows (every rank computes the same ones)."""
    rank, world = context()
    if world > 1 and rank != 0:
        run.logger = _Silent()


__all__ = ["context", "merge_stats", "quiet_other_ranks", "shard", "sum_gradients", "world_size"]
