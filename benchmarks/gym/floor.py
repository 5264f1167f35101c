"""Floor references for bench_cartpole.py: the least work a framework's training loop can do.

* PPO floor: a bare torch loop that steps the 8-env vector env with one no-grad forward of the
  actor per vector step (sampled action), and after every 2048 env steps runs the matched PPO
  update alone (4 epochs of 128-row minibatches, actor + critic, clipped loss, grad-norm clip,
  fused Adam) on the rollout's observations. No GAE bookkeeping, no log-prob/value storage.
* DQN floor: the same env loop (one no-grad forward, epsilon-greedy argmax) storing transitions in a
  preallocated tensor ring, and after the 1000-step warm-up the matched update alone: 2 gradient
  steps of batch 128 per vector step (Huber loss, fused Adam, fused soft target update).

A framework's throughput divided by the floor's says how close its loop is to that minimum
(1.0 = no overhead beyond the env, one forward per step and the update itself).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn


def _mlp(n_in: int, n_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_out)
    )


def _envs(env_id: str, seed: int) -> tuple[gym.vector.VectorEnv, np.ndarray]:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(8)])
    obs, _ = envs.reset(seed=seed)
    return envs, obs


def ppo_floor(env_id: str, total_steps: int, seed: int) -> int:
    torch.manual_seed(seed)
    envs, obs = _envs(env_id, seed)
    n_obs, n_act = int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n)
    actor, critic = _mlp(n_obs, n_act, 64), _mlp(n_obs, 1, 64)
    params = [*actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3, eps=1e-5, fused=True)
    steps_per_rollout, n = 256, 8
    buf = torch.zeros(steps_per_rollout, n, n_obs)
    acts = torch.zeros(steps_per_rollout, n, dtype=torch.long)
    done = 0
    while done < total_steps:
        for t in range(steps_per_rollout):
            x = torch.as_tensor(obs, dtype=torch.float32)
            with torch.no_grad():
                a = torch.multinomial(torch.softmax(actor(x), -1), 1).squeeze(-1)
            buf[t], acts[t] = x, a
            obs, *_ = envs.step(a.numpy())
        done += steps_per_rollout * n
        flat_obs, flat_act = buf.reshape(-1, n_obs), acts.reshape(-1)
        rows = flat_obs.shape[0]
        old_lp = torch.zeros(rows)
        adv, ret = torch.randn(rows), torch.randn(rows)
        for _ in range(4):
            perm = torch.randperm(rows)
            for s in range(0, rows, 128):
                idx = perm[s : s + 128]
                logp = torch.log_softmax(actor(flat_obs[idx]), -1)
                lp = logp.gather(-1, flat_act[idx].unsqueeze(-1)).squeeze(-1)
                ratio = (lp - old_lp[idx]).exp()
                pg = torch.max(-adv[idx] * ratio, -adv[idx] * ratio.clamp(0.8, 1.2)).mean()
                v = critic(flat_obs[idx]).squeeze(-1)
                loss = pg + 0.5 * 0.5 * (v - ret[idx]).pow(2).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
                opt.step()
    envs.close()
    return done


def dqn_floor(env_id: str, total_steps: int, seed: int) -> int:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    envs, obs = _envs(env_id, seed)
    n_obs, n_act = int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n)
    q = nn.Sequential(nn.Linear(n_obs, 128), nn.ReLU(), nn.Linear(128, n_act))
    target = nn.Sequential(nn.Linear(n_obs, 128), nn.ReLU(), nn.Linear(128, n_act))
    target.load_state_dict(q.state_dict())
    online_p, target_p = list(q.parameters()), list(target.parameters())
    opt = torch.optim.Adam(online_p, lr=1e-3, fused=True)
    size, n = 50_000, 8
    s_buf, s2_buf = torch.zeros(size, n_obs), torch.zeros(size, n_obs)
    a_buf, r_buf, d_buf = torch.zeros(size, dtype=torch.long), torch.zeros(size), torch.zeros(size)
    pos = filled = done = 0
    eps = 1.0
    while done < total_steps:
        x = torch.as_tensor(obs, dtype=torch.float32)
        with torch.no_grad():
            a = q(x).argmax(-1).numpy()
        a = np.where(rng.random(n) < eps, rng.integers(0, n_act, n), a)
        nxt, r, term, _, _ = envs.step(a)
        i = (pos + np.arange(n)) % size
        s_buf[i], s2_buf[i] = x, torch.as_tensor(nxt, dtype=torch.float32)
        a_buf[i], r_buf[i], d_buf[i] = (
            torch.as_tensor(a),
            torch.as_tensor(r, dtype=torch.float32),
            torch.as_tensor(term, dtype=torch.float32),
        )
        pos, filled = (pos + n) % size, min(filled + n, size)
        obs = nxt
        done += n
        eps = max(0.05, eps * 0.997)
        if done < 1000:
            continue
        for _ in range(2):
            idx = torch.as_tensor(rng.integers(0, filled, 128))
            with torch.no_grad():
                y = r_buf[idx] + 0.99 * (1 - d_buf[idx]) * target(s2_buf[idx]).max(1).values
            qa = q(s_buf[idx]).gather(1, a_buf[idx].unsqueeze(1)).squeeze(1)
            loss = nn.functional.smooth_l1_loss(qa, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                torch._foreach_lerp_(target_p, online_p, 0.005)
    envs.close()
    return done
