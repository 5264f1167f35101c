"""``agilerl train --num-processes N``: one run in N local processes, for strategies that split work.

The launcher sets the environment every torch.distributed launcher sets (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and starts ``python -m agilerl``
with the same arguments N times. What the processes do with it is the strategy's business (core
knows nothing of torch.distributed): a strategy that runs in lock step across processes sets
:attr:`~agilerl.strategies.TrainingStrategy.multi_process`; any other is refused before a process
starts, and refused again by :class:`~agilerl.training.trainer.LocalTrainer` when some other launcher
(``torchrun``, ``accelerate launch``) starts it in several processes.

Rank 0 owns the terminal and the run directory; the other ranks print nothing (their stderr is
shown if they fail). Ctrl-C reaches every rank once (they run in their own session, the launcher
forwards it): they agree at the next consistent point, rank 0 writes the interrupted checkpoint,
and a second Ctrl-C stops them all at once. A rank that fails stops the others.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from agilerl.errors import AgileRLError
from agilerl.registry import MANIFEST_REGISTRY, STRATEGIES

#: Seconds the other ranks get to finish after one rank failed, before they are terminated.
FAILURE_GRACE_S = 20.0


def rank() -> int:
    """This process's rank in a multi-process launch (0 without one)."""
    return int(os.environ.get("RANK", "0") or 0)


def world_size() -> int:
    """Processes in this launch (1 without one)."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1") or 1))


def is_main_process() -> bool:
    """Whether this process writes the run's files and output (rank 0, or no launch)."""
    return rank() == 0


def require_multi_process(strategy: Any, algorithm: str, processes: int) -> None:
    """Refuse ``processes`` > 1 for a strategy that cannot split a run across processes."""
    if processes > 1 and not getattr(strategy, "multi_process", False):
        able = multi_process_algorithms()
        raise AgileRLError(
            f"{algorithm} trains in one process ({type(strategy).__name__} does not split a run across "
            f"processes), so {processes} processes would only repeat the same run; use --num-processes 1 "
            "(or launch it without torchrun/accelerate). Algorithms whose strategy splits a run: "
            + (", ".join(able) if able else "none installed")
        )


def multi_process_algorithms() -> list[str]:
    """Registered algorithms whose strategy runs in several processes."""
    names = []
    for entry in MANIFEST_REGISTRY.entries():
        spec = entry.value
        if spec.not_supported or not spec.paradigm:
            continue
        try:
            cls = STRATEGIES.get(spec.paradigm, spec.regime)
        except Exception:  # a custom strategy override, or none registered: not listed
            continue
        if getattr(cls, "multi_process", False):
            names.append(entry.key)
    return sorted(names)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM when the launcher dies (it runs in its own session)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def launch(argv: Sequence[str], processes: int) -> int:
    """Run ``python -m agilerl *argv`` in ``processes`` local processes; return rank 0's exit code
    (or the first failing rank's)."""
    port = _free_port()
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(processes),
            "LOCAL_WORLD_SIZE": str(processes), "GROUP_RANK": "0", "NODE_RANK": "0"}  # fmt: skip
    base.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: one thread each unless told otherwise
    cmd = [sys.executable, "-m", "agilerl", *argv]
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []

    def forward(signum: int, frame: Any) -> None:  # each Ctrl-C reaches every rank once
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGINT)

    failed_at: float | None = None
    first_failure: int | None = None  # the exit code of the first rank that failed by itself
    previous = signal.signal(signal.SIGINT, forward)
    try:
        for r in range(processes):
            env = {**base, "RANK": str(r), "LOCAL_RANK": str(r)}
            log = None if r == 0 else tempfile.TemporaryFile()
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=env,
                    start_new_session=True,  # Ctrl-C reaches the ranks through forward(), once
                    preexec_fn=_die_with_parent,
                    stdout=None if r == 0 else subprocess.DEVNULL,
                    stderr=log,
                )
            )
        while any(p.poll() is None for p in procs):
            codes = [p.poll() for p in procs]
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = time.monotonic()
                first_failure = next(c for c in codes if c not in (None, 0))
            if failed_at is not None and time.monotonic() - failed_at > FAILURE_GRACE_S:
                # The others wait for it in a collective (or at the rendezvous): stop them.
                print(f"a rank exited with {first_failure}; stopping the other ranks", file=sys.stderr)
                for p in procs:
                    if p.poll() is None:
                        p.terminate()
                failed_at = float("inf")  # terminate once; wait below
            time.sleep(0.05)
        codes = [int(p.wait()) for p in procs]
    finally:
        signal.signal(signal.SIGINT, previous)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (code, log) in enumerate(zip(codes, logs, strict=True)):
        if r and code not in (0, 130) and log is not None:
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-20:]
            print(f"rank {r} of {processes} exited with {code}:", *tail, sep="\n  ", file=sys.stderr)
        if log is not None:
            log.close()
    if first_failure is not None and failed_at == float("inf"):
        return first_failure  # the rank that failed, not the ones stopped because of it
    return codes[0] or next((c for c in codes if c), 0)


__all__ = ["is_main_process", "launch", "multi_process_algorithms", "rank", "require_multi_process", "world_size"]
