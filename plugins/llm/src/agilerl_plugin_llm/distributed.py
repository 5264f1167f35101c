"""Data parallelism over processes started by ``torchrun`` or ``accelerate launch`` (torch.distributed).

Every process runs the same run in lock step: the same population, the same batches and rollouts
(seeded alike), the same evaluations, selection and mutation. What is split is the loss: each
optimizer step's rows are cut into one contiguous shard per process, each process back-propagates
its shard's part of the step's loss (normalised by the *whole* step's units), and the gradients are
summed across processes before the step. So N processes take the same optimizer steps as one
process at the same global batch (up to float summation order), with the forward/backward work
divided by N. Only rank 0 writes metrics and checkpoints (the core does that for any launch).

The process group comes from the launcher's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``): gloo on CPU, nccl on CUDA. One process (no launcher) is the default and costs nothing.
"""

from __future__ import annotations

import atexit
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, ClassVar

import torch

from agilerl.errors import AgileRLError
from agilerl_plugin_llm.fsdp_config import env_problems


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
        if backend == "nccl":  # one GPU per process: "cuda" then means this process's own device
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        # Every collective waits at most this long for a peer that hangs (one that dies is noticed at once).
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=collective_timeout_s()))
        # Leave the group before the interpreter exits: a gloo group torn down by exit aborts the
        # process ("terminate called without an active exception") when a peer is still running.
        atexit.register(_leave)
    return int(dist.get_rank()), int(dist.get_world_size())


#: Seconds a collective waits for a process that stopped answering (``AGILERL_DIST_TIMEOUT_S``).
DEFAULT_COLLECTIVE_TIMEOUT_S = 600.0


def collective_timeout_s() -> float:
    return float(os.environ.get("AGILERL_DIST_TIMEOUT_S", DEFAULT_COLLECTIVE_TIMEOUT_S))


class PeerLostError(AgileRLError):
    """A collective failed: another process of the launch (on this node or another) died or stopped answering."""


@contextmanager
def peers_alive() -> Iterator[None]:
    """Turn a collective's failure (a peer's connection reset or closed, a timeout) into a
    :class:`PeerLostError` that says what happened and how to go on."""
    try:
        yield
    except RuntimeError as exc:  # gloo and nccl report a lost peer as RuntimeError (DistBackendError)
        import torch.distributed as dist

        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, world_size())
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PeerLostError(
            f"rank {rank} of {world}: a collective with the other processes failed ({first}); another process of "
            "this launch, on this node or another, has died or stopped answering, so this one stops too. Start "
            "every node again with the same launch command and `--resume RUN_DIR` (the newest checkpoint; "
            "training.checkpoint_steps keeps them mid-run)"
        ) from None


def comm_device() -> torch.device:
    """Where small buffers of a collective live: the current GPU under nccl (it reduces CUDA tensors
    only), else the CPU."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def shard(rows: int, rank: int, world: int) -> tuple[int, int]:
    """``[start, stop)`` of this rank's contiguous share of ``rows`` (the first ranks get one more)."""
    base, extra = divmod(rows, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


Stats = tuple[dict[str, float], dict[str, int]]

#: Stat slots carried in the gradient all-reduce (a fixed size: every process's buffer must match).
STAT_SLOTS = 32


def _keys_tag(keys: list[str]) -> float:
    """A small exact-in-float32 tag of a stat key list (see :func:`sum_gradients`)."""
    return float(zlib.crc32("\0".join(keys).encode()) % 1021 + 1)


def _pack_stats(stats: Stats, device: torch.device | None = None) -> torch.Tensor:
    """``[totals (STAT_SLOTS), counts (STAT_SLOTS), tag, tag**2, overflow]`` of sorted keys."""
    totals, counts = stats
    keys = sorted(totals)
    out = torch.zeros(2 * STAT_SLOTS + 3, dtype=torch.float32, device=device)
    if len(keys) > STAT_SLOTS or set(counts) != set(keys):
        out[-1] = 1.0  # cannot carry these: every process falls back to merge_stats
        return out
    out[: len(keys)] = torch.tensor([float(totals[k]) for k in keys])
    out[STAT_SLOTS : STAT_SLOTS + len(keys)] = torch.tensor([float(counts[k]) for k in keys])
    tag = _keys_tag(keys)
    out[-3], out[-2] = tag, tag * tag
    return out


def local_rows(rows: int, mini_batch: int | None, rank: int, world: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` row ranges of a ``rows``-row batch this process back-propagates in
    ``optimize`` (its shard of every ``mini_batch``-row step): per-row inputs of the loss that are
    computed before it (the reference and old log-probs) are computed for these rows only."""
    mini = min(mini_batch or rows, rows) or 1
    out = []
    for start in range(0, rows, mini):
        lo, hi = shard(min(start + mini, rows) - start, rank, world)
        if hi > lo:
            out.append((start + lo, start + hi))
    return out


def sum_gradients(params: list[torch.nn.Parameter], stats: Stats | None = None) -> Stats | None:
    """Sum every parameter's gradient over the processes, in one flat all-reduce.

    ``stats`` (this process's stat totals and counts) ride in the same all-reduce when the gradients
    are float32, so a step costs one collective and no pickling (``merge_stats`` costs two and a
    pickle, ~10 ms on 2 loaded CPU processes). They need the same keys on every process: the buffer
    carries a tag ``t`` of the key list and ``t**2``; after the sum ``world * sum(t**2) == sum(t)**2``
    holds, on every process alike, exactly when all tags are equal; otherwise (or when a process has
    more than :data:`STAT_SLOTS` keys) every process falls back to :func:`merge_stats`. Returns the
    merged stats (None without ``stats``).
    """
    import torch.distributed as dist

    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    fuse = stats is not None and all(g.dtype == torch.float32 for g in grads)  # the same on every process
    parts = [g.reshape(-1) for g in grads]
    if fuse and stats is not None:
        parts.append(_pack_stats(stats, grads[0].device if grads else comm_device()))
    flat = torch.cat(parts)
    with peers_alive():
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n
    if stats is None:
        return None
    if fuse:
        tail = flat[offset:].tolist()
        tag, tag_sq, overflow = tail[-3], tail[-2], tail[-1]
        if overflow == 0 and dist.get_world_size() * tag_sq == tag * tag:
            keys = sorted(stats[0])
            k = len(keys)
            counts = {key: round(c) for key, c in zip(keys, tail[STAT_SLOTS : STAT_SLOTS + k], strict=True)}
            return dict(zip(keys, tail[:k], strict=True)), counts
    return merge_stats(*stats)


def merge_stats(totals: dict[str, float], counts: dict[str, int]) -> tuple[dict[str, float], dict[str, int]]:
    """Sum per-process stat totals and counts, so logged means cover the whole step."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    with peers_alive():
        dist.all_gather_object(gathered, (totals, counts))
    out_t: dict[str, float] = {}
    out_c: dict[str, int] = {}
    for t, c in gathered:
        for k, v in t.items():
            out_t[k] = out_t.get(k, 0.0) + float(v)
        for k, v in c.items():
            out_c[k] = out_c.get(k, 0) + int(v)
    return out_t, out_c


def agree_any(flag: bool) -> bool:
    """Whether ``flag`` is true on any process (one tiny all-reduce; every process must call it)."""
    _, world = context()
    if world <= 1:
        return flag
    import torch.distributed as dist

    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=comm_device())
    with peers_alive():
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def launch_problems(env: dict[str, str] | None = None) -> list[str]:
    """What a launcher asked for that this data parallelism does not do (checked before any model loads).

    Plain data parallelism keeps a whole replica of the model and optimizer in each process and sums
    the gradients; ``--use_fsdp --fsdp_version 2`` shards them instead (:mod:`agilerl_plugin_llm.fsdp`,
    whose settings it does not implement are refused by name). DeepSpeed ZeRO and accelerate's mixed
    precision are not applied by this plugin, so a launch asking for them is refused rather than
    silently run without; so is an ``accelerate launch --cpu --num_processes N`` that started one process
    (accelerate runs multi-CPU only under mpirun).
    """
    env = dict(os.environ) if env is None else env
    problems = []
    if env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        problems.append(
            "accelerate launch with DeepSpeed (--use_deepspeed, distributed_type: DEEPSPEED): ZeRO sharding is "
            "not implemented by agilerl-plugin-llm (its training loop does not run through a DeepSpeed engine); "
            "shard with FSDP2 instead (accelerate launch --use_fsdp --fsdp_version 2, or the algorithm's fsdp "
            "field), or launch with --multi_gpu for plain data parallelism"
        )

    problems.extend(env_problems(env))  # --use_fsdp: FSDP2 sharding (agilerl_plugin_llm.fsdp)
    precision = env.get("ACCELERATE_MIXED_PRECISION", "no").lower()
    if precision not in ("no", ""):
        problems.append(
            f"accelerate launch --mixed_precision {precision}: accelerate's autocast is not applied by "
            "agilerl-plugin-llm (the model trains in the dtype it loads in); launch with --mixed_precision no"
        )
    mpi = next((env[k] for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE") if k in env), None)
    if "WORLD_SIZE" not in env and mpi is not None and int(mpi) > 1:
        problems.append(
            f"started by mpirun ({mpi} processes): MPI launches are not supported; use agilerl train "
            "--num-processes N, torchrun, or accelerate launch --multi_gpu --num_processes N"
        )
    elif "WORLD_SIZE" not in env and "MASTER_ADDR" in env and "ACCELERATE_USE_CPU" in env:
        problems.append(
            "accelerate launch --num_processes N started one process: without --multi_gpu (or with --cpu) "
            "accelerate runs several CPU processes only under mpirun. On one machine use agilerl train "
            "--num-processes N, or accelerate launch --multi_gpu --num_processes N (without CUDA its "
            "processes use gloo on the CPU)"
        )
    return problems


def check_launch() -> None:
    """Raise a clear error for a launch :func:`launch_problems` refuses."""
    problems = launch_problems()
    if problems:
        raise AgileRLError("this launch cannot run here:\n  - " + "\n  - ".join(problems))


class DataParallelStrategy:
    """Mixin for the LLM strategies: every process of a launch runs them in lock step (see the module)."""

    multi_process: ClassVar[bool] = True

    def agree_to_stop(self, run: Any, requested: bool) -> bool:
        return agree_any(requested)  # Ctrl-C: all ranks stop at the same point


__all__ = [
    "DataParallelStrategy",
    "PeerLostError",
    "collective_timeout_s",
    "peers_alive",
    "agree_any",
    "check_launch",
    "context",
    "launch_problems",
    "merge_stats",
    "shard",
    "sum_gradients",
    "world_size",
]
