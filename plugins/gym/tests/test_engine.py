"""The engines' shared pieces on their own (the algorithms' learning tests exercise them end to end)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from agilerl_plugin_gym.engine.off_policy import ExplorationNoise, NoiseSettings, TargetSync, UpdateSchedule
from agilerl_plugin_gym.engine.on_policy import gae, rollout_plan


def test_rollout_plan_never_exceeds_the_budget() -> None:
    assert rollout_plan(4096, 1024, 8) == [128] * 4
    assert rollout_plan(1000, 512, 8) == [64, 61]  # 125 vector steps: one full rollout, one shortened
    assert rollout_plan(3, 512, 8) == [1]  # less than one vector step left: one vector step
    for budget in range(1, 3000, 37):
        assert sum(rollout_plan(budget, 256, 8)) * 8 - budget < 8


def test_update_schedule_follows_agilerl_learn_step() -> None:
    s = UpdateSchedule(learn_step=16, num_envs=8, learning_delay=100, batch_size=32)
    assert s.due(vec_steps=2, agent_steps=96, buffer_size=1000) == 0  # still in the learning delay
    assert [s.due(v, 200, 1000) for v in (1, 2, 3, 4)] == [0, 1, 0, 1]  # one update every 2 vector steps
    assert UpdateSchedule(2, 8, 0, 32).due(1, 8, 1000) == 4  # 4 updates per vector step
    assert UpdateSchedule(2, 8, 0, 32).due(1, 8, 31) == 0  # not a batch in the buffer yet


def test_update_schedule_takes_bursts_at_the_same_ratio() -> None:
    s = UpdateSchedule(2, 1, 0, 32, burst=128)  # SB3's train_freq 256, gradient_steps 128
    due = [s.due(v, v, 1000) for v in range(1, 769)]
    assert [v for v, d in enumerate(due, 1) if d] == [256, 512, 768] and set(due) == {0, 128}
    eight = UpdateSchedule(1, 8, 0, 32, burst=16)  # 8 envs: 16 updates every 2 vector steps
    assert [eight.due(v, 8 * v, 1000) for v in (1, 2, 3, 4)] == [0, 16, 0, 16]
    assert UpdateSchedule(2, 1, 100, 32, burst=128).due(256, 90, 1000) == 0  # the learning delay still holds


def test_ou_noise_is_seeded_correlated_and_resets_per_env() -> None:
    settings = NoiseSettings(ou=True, scale=0.2, mean=0.0, theta=0.15, dt=0.01)
    a, b = ExplorationNoise(2), ExplorationNoise(2)
    ra, rb = np.random.default_rng(5), np.random.default_rng(5)
    xs = [a.sample(3, ra, settings).copy() for _ in range(50)]
    ys = [b.sample(3, rb, settings).copy() for _ in range(50)]
    np.testing.assert_array_equal(np.stack(xs), np.stack(ys))  # same generator state, same noise
    # x_t = x_{t-1} - theta (x_{t-1} - mu) dt + sigma sqrt(dt) eps: strongly correlated in time.
    flat = np.stack(xs)[:, 0, 0]
    assert np.corrcoef(flat[:-1], flat[1:])[0, 1] > 0.8
    a.reset(np.array([True, False, False]))
    assert (a.state[0] == 0).all() and (a.state[1:] != 0).all()
    gauss = ExplorationNoise(2).sample(1000, np.random.default_rng(0), NoiseSettings(ou=False, scale=0.5, mean=1.0))
    assert abs(gauss.mean() - 1.0) < 0.05 and abs(gauss.std() - 0.5) < 0.05


def test_target_sync_soft_and_hard() -> None:
    torch.manual_seed(0)
    nets = {"q": nn.Linear(3, 2)}
    sync = TargetSync(nets, {"q_target": "q"})
    sync.copy_online()
    assert not nets["q_target"].weight.requires_grad
    with torch.no_grad():
        nets["q"].weight.add_(1.0)
    before = nets["q_target"].weight.clone()
    sync.soft(0.25)
    torch.testing.assert_close(nets["q_target"].weight, before + 0.25 * (nets["q"].weight - before))
    sync.hard()
    torch.testing.assert_close(nets["q_target"].weight, nets["q"].weight)


def test_gae_matches_the_textbook_recursion_and_masks_autoreset_steps() -> None:
    rng = np.random.default_rng(0)
    T, N, gamma, lam = 6, 2, 0.9, 0.8
    rewards, values = rng.random((T, N)).astype(np.float32), rng.random((T, N)).astype(np.float32)
    terminated = np.zeros((T, N), np.float32)
    terminated[2, 0] = 1.0
    dones = terminated.copy()
    valid = np.ones((T, N), np.float32)
    valid[3, 0] = 0.0  # the auto-reset step after the termination
    last_value = rng.random(N).astype(np.float32)
    out = np.zeros((T, N), np.float32)
    gae(rewards, values, terminated, dones, valid, last_value, np.ones(N, np.float32), gamma, lam, out)
    expect = np.zeros((T, N))
    for n in range(N):
        adv = 0.0
        for t in reversed(range(T)):
            next_v = last_value[n] if t == T - 1 else values[t + 1, n]
            next_ok = 1.0 if t == T - 1 else valid[t + 1, n]
            delta = rewards[t, n] + gamma * next_v * (1 - terminated[t, n]) - values[t, n]
            adv = (delta + gamma * lam * (1 - dones[t, n]) * next_ok * adv) * valid[t, n]
            expect[t, n] = adv
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)
    assert out[3, 0] == 0.0
