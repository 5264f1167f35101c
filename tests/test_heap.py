"""The C heap's free pages go back to the OS between (and during) generations: agilerl.training.heap."""

from __future__ import annotations

import ctypes.util
import platform
from typing import Any

import pytest

from agilerl.training import heap

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_a_fragmented_heap_gives_its_free_pages_back() -> None:
    # 60 MB of 100 KB blocks (below glibc's 128 KB mmap threshold: served from the heap), every
    # other one freed: holes between live blocks, which glibc keeps resident until trimmed.
    blocks = [bytearray(100_000) for _ in range(600)]
    del blocks[::2]
    before = _rss_mb()
    assert heap.release_free_heap() is True
    after = _rss_mb()
    assert before - after > 20, (before, after)  # ~30 MB of holes
    del blocks


def test_where_malloc_trim_cannot_be_found_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    heap._malloc_trim.cache_clear()
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libdoes-not-exist.so.9")
    assert heap.release_free_heap() is False
    heap._malloc_trim.cache_clear()
    monkeypatch.undo()
    assert heap.release_free_heap() is GLIBC


def test_the_trimmer_trims_at_most_once_an_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = heap.release_free_heap
    monkeypatch.setattr(heap, "release_free_heap", lambda: calls.append(1) or real())
    slow = heap.HeapTrimmer(interval=3600.0)
    for _ in range(100):
        slow.tick()
    assert len(calls) == 0
    every = heap.HeapTrimmer(interval=0.0)
    for _ in range(5):
        every.tick()
    assert len(calls) == 5
    monkeypatch.setattr(heap, "TRIM_INTERVAL_S", 0.0)
    assert heap.HeapTrimmer().interval == 0.0  # the module default, read when a trimmer starts


def test_each_member_step_trims(monkeypatch: pytest.MonkeyPatch) -> None:
    from agilerl.training import backend

    calls: list[int] = []
    real = heap.release_free_heap
    monkeypatch.setattr(backend, "release_free_heap", lambda: calls.append(1) or real())

    class Strategy:
        def learn(self, agent: Any, run: Any, budget: int) -> dict[str, float]:
            agent.steps += budget
            return {"loss": 1.0}

        def evaluate(self, agent: Any, run: Any) -> float:
            return 2.0

    class Agent:
        index, steps = 0, 0

        def __init__(self) -> None:
            self.fitness: list[float] = []

    class Run:
        seed = 0

    agent = Agent()
    assert backend.train_member(Strategy(), Run(), agent, 10) == {"loss": 1.0}  # type: ignore[arg-type]
    assert (agent.steps, agent.fitness, len(calls)) == (10, [2.0], 1)
