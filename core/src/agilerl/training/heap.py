"""The C heap's free pages handed back to the OS after each member's step (glibc's ``malloc_trim``).

Why: a training process allocates and frees tensors of a few sizes all the time (a batch's
activations, its gradients); on Linux glibc serves them from its heap and keeps what they free for
later requests. Small allocations that outlive a step land between those holes, so the heap
fragments: in one benchmarked run (``benchmarks/README.md``, "Peak RSS") the heap's bytes in use
stayed at ~92 MB while its free space grew by ~1 MB every 500 updates, and the process's resident
memory rose with it (271 MB after 10,000 env steps, 340 MB after 100,000). Those free pages stay
resident until someone returns them; ``malloc_trim(0)`` does (``madvise`` on every whole free
page, not only the heap's top), in under a millisecond. :func:`agilerl.training.backend.train_member`
calls :func:`release_free_heap` after each member's step; a plugin's training loop that runs long
between generations also calls :meth:`HeapTrimmer.tick` after its updates, which trims at most once
a second (the same run then stayed at 273-281 MB throughout).

What changes: nothing a run computes; only the process's resident set. Where the C library has
no ``malloc_trim`` (macOS, musl) :func:`release_free_heap` does nothing and says so by returning
``False``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import time
from collections.abc import Callable

__all__ = ["HeapTrimmer", "release_free_heap"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Return the C heap's free pages to the OS; ``False`` where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


#: Seconds between two trims of a :class:`HeapTrimmer` (a trim costs under a millisecond).
TRIM_INTERVAL_S = 1.0


class HeapTrimmer:
    """:func:`release_free_heap` at most once every ``interval`` seconds (default
    :data:`TRIM_INTERVAL_S`), for a loop to call :meth:`tick` after each update: a clock read per
    call, the trim itself at most once an interval."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = TRIM_INTERVAL_S if interval is None else interval
        self._due = time.monotonic() + self.interval

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._due:
            release_free_heap()
            self._due = now + self.interval
