"""Replay and rollout buffers: ring semantics, masks, checkpoint round trips, GAE."""

from __future__ import annotations

import io
import mmap
import os

import numpy as np
import torch

from agilerl_plugin_gym.buffers import ReplayBuffer, RolloutBuffer, lazy_zeros


def _add(buf: ReplayBuffer, start: int, n: int, mask: np.ndarray | None = None) -> None:
    ids = np.arange(start, start + n)
    buf.add(mask=mask, obs=np.stack([ids, ids], 1).astype(np.float32), action=ids, reward=ids * 1.0, done=ids % 2 == 0)


def test_replay_ring_wraps_and_masks() -> None:
    buf = ReplayBuffer(10, seed=0)
    _add(buf, 0, 6)
    assert len(buf) == 6 and buf.data["obs"].dtype == np.float32 and buf.data["reward"].dtype == np.float32
    _add(buf, 6, 6)  # wraps: 10..11 overwrite slots 0..1
    assert len(buf) == 10 and buf.pos == 2
    assert sorted(buf.data["action"].tolist()) == list(range(2, 12))
    _add(buf, 100, 4, mask=np.array([True, False, True, False]))
    assert buf.pos == 4 and set(buf.data["action"][2:4].tolist()) == {100, 102}
    batch = buf.sample(32)
    assert batch["obs"].shape == (32, 2) and batch["action"].dtype == torch.int64
    assert torch.equal(batch["obs"][:, 0], batch["action"].float())  # rows stay aligned


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _mapped(arr: np.ndarray) -> bool:
    base: object = arr
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def test_a_large_replay_buffer_costs_the_rows_it_holds() -> None:
    """max_size 1,000,000 (SB3's default) with a few rows stored: the columns are ~70 MB of zeros,
    but memory is committed only where rows are written (np.zeros served from glibc's heap is
    cleared byte by byte: the 1M-row action, reward and done columns alone cost ~19 MB)."""
    before = _rss_mb()
    buf = ReplayBuffer(1_000_000, seed=0)
    obs = np.ones((4, 11), np.float32)
    buf.add(obs=obs, action=np.ones((4, 3), np.float32), reward=np.ones(4), next_obs=obs, done=np.zeros(4, bool))
    assert sum(v.nbytes for v in buf.data.values()) > 60 * 2**20
    # Each column over a MiB is its own anonymous mapping (how much np.zeros costs depends on the
    # heap's history; in a training process it was the full size, measured in benchmarks/README.md).
    assert all(_mapped(v) for k, v in buf.data.items() if k != "done")
    assert _rss_mb() - before < 8.0
    assert buf.data["action"].flags.writeable and float(buf.data["action"][4:].sum()) == 0.0
    batch = buf.sample(2)
    assert torch.equal(batch["action"], torch.ones(2, 3))
    small = lazy_zeros((10, 3), np.float32)  # under a MiB: a plain array
    assert not _mapped(small) and small.sum() == 0.0
    # Private, as np.zeros' memory: a forked child's writes stay in the child.
    pid = os.fork()
    if pid == 0:  # the child
        buf.data["action"][:] = 7.0
        os._exit(0)
    os.waitpid(pid, 0)
    assert float(buf.data["action"][4:].sum()) == 0.0
    mapped = lazy_zeros((300_000, 3), np.float64)
    assert mapped.shape == (300_000, 3) and mapped.dtype == np.float64 and mapped[-1].sum() == 0.0 and _mapped(mapped)


def test_replay_state_dict_round_trip_through_torch_weights_only() -> None:
    buf = ReplayBuffer(50, seed=1)
    _add(buf, 0, 30)
    buf.sample(8)
    blob = io.BytesIO()
    torch.save(buf.state_dict(), blob)
    blob.seek(0)
    restored = ReplayBuffer(50, seed=999)
    restored.load_state_dict(torch.load(blob, weights_only=True))
    a, b = buf.sample(16), restored.sample(16)
    assert all(torch.equal(a[k], b[k]) for k in a)  # same contents and the same RNG stream
    _add(buf, 30, 25)
    _add(restored, 30, 25)
    assert all(np.array_equal(buf.data[k], restored.data[k]) for k in buf.data)


def _reference_gae(rewards, values, terminated, dones, valid, last_value, gamma, lam):  # type: ignore[no-untyped-def]
    """Per-env episode-by-episode GAE written the slow, obvious way."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            if not valid[t, n]:
                continue
            total, discount = 0.0, 1.0
            for k in range(t, T):
                v_next = values[k + 1, n] if k + 1 < T else last_value[n]
                delta = rewards[k, n] + gamma * v_next * (1 - terminated[k, n]) - values[k, n]
                total += discount * delta
                if dones[k, n]:
                    break
                discount *= gamma * lam
            adv[t, n] = total
    return adv


def test_gae_matches_reference_with_termination_truncation_and_autoreset() -> None:
    T, N, gamma, lam = 7, 3, 0.9, 0.8
    rng = np.random.default_rng(0)
    rewards = rng.standard_normal((T, N))
    values = rng.standard_normal((T, N))
    terminated = np.zeros((T, N))
    dones = np.zeros((T, N))
    valid = np.ones((T, N))
    terminated[2, 0] = dones[2, 0] = 1  # env 0 terminates at t=2 ...
    valid[3, 0] = 0  # ... and spends t=3 auto-resetting
    rewards[3, 0] = 0
    dones[4, 1] = 1  # env 1 is truncated at t=4 (bootstrap from the final obs at t=5)
    valid[5, 1] = 0
    rewards[5, 1] = 0
    last_value = rng.standard_normal(N)
    buf = RolloutBuffer(T, N, (2,), ())
    for t in range(T):
        buf.add(t, torch.zeros(N, 2), torch.zeros(N), torch.zeros(N), torch.as_tensor(values[t], dtype=torch.float32),
                rewards[t], terminated[t], dones[t], valid[t])  # fmt: skip
    buf.compute_returns_and_advantages(torch.as_tensor(last_value, dtype=torch.float32), torch.ones(N), gamma, lam)
    expected = _reference_gae(rewards, values, terminated, dones, valid, last_value, gamma, lam)
    assert np.allclose(buf.advantages, expected, atol=1e-5)
    flat = buf.flat()
    assert flat["advantages"].shape == (T * N - 2,)  # the two auto-reset steps are left out
