"""Bare single-file PPO and DQN, written without any RL framework: the "do it yourself" baseline.

Plain gymnasium ``SyncVectorEnv`` + torch, the usual straightforward way (one tensor per step,
``torch.distributions``, ``nn.Sequential``), no tricks. ``bench_cartpole.py`` runs it side by side
with agilerl and Stable-Baselines3 at the same hyperparameters.

Both functions take ``on_eval(steps, policy) -> bool`` called every ``eval_every`` env steps with a
greedy policy ``obs -> actions``; returning True stops training (solved). They return the number
of env steps taken.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

Policy = Callable[[np.ndarray], np.ndarray]
OnEval = Callable[[int, Policy], bool]


def mlp(n_in: int, n_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_out)
    )


def ppo(
    env_id: str,
    *,
    total_steps: int,
    seed: int = 0,
    num_envs: int = 8,
    num_steps: int = 256,
    batch_size: int = 128,
    epochs: int = 4,
    lr: float = 1e-3,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    clip: float = 0.2,
    vf_coef: float = 0.5,
    ent_coef: float = 0.0,
    max_grad_norm: float = 0.5,
    hidden: int = 64,
    eval_every: int = 0,
    on_eval: OnEval | None = None,
) -> int:
    torch.manual_seed(seed)
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id) for _ in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    n_obs = envs.single_observation_space.shape[0]
    n_act = envs.single_action_space.n
    actor, critic = mlp(n_obs, n_act, hidden), mlp(n_obs, 1, hidden)
    params = [*actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=lr, eps=1e-5)
    obs_buf = torch.zeros(num_steps, num_envs, n_obs)
    act_buf = torch.zeros(num_steps, num_envs, dtype=torch.long)
    logp_buf = torch.zeros(num_steps, num_envs)
    rew_buf = torch.zeros(num_steps, num_envs)
    done_buf = torch.zeros(num_steps, num_envs)
    val_buf = torch.zeros(num_steps, num_envs)
    obs, _ = envs.reset(seed=seed)
    obs = torch.tensor(obs)
    steps, next_eval = 0, eval_every

    def greedy(o: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return actor(torch.tensor(o)).argmax(-1).numpy()

    while steps < total_steps:
        for t in range(num_steps):
            with torch.no_grad():
                dist = torch.distributions.Categorical(logits=actor(obs))
                action = dist.sample()
                value = critic(obs).squeeze(-1)
            next_obs, reward, term, trunc, info = envs.step(action.numpy())
            reward = torch.tensor(reward, dtype=torch.float32)
            # Same-step autoreset: bootstrap truncated episodes from their final observation.
            if trunc.any():
                final = np.stack([info["final_obs"][i] for i in np.nonzero(trunc)[0]])
                with torch.no_grad():
                    reward[torch.tensor(trunc)] += gamma * critic(torch.tensor(final)).squeeze(-1)
            obs_buf[t], act_buf[t], logp_buf[t], val_buf[t] = obs, action, dist.log_prob(action), value
            rew_buf[t], done_buf[t] = reward, torch.tensor(term | trunc, dtype=torch.float32)
            obs = torch.tensor(next_obs)
        steps += num_steps * num_envs
        with torch.no_grad():
            next_value = critic(obs).squeeze(-1)
            adv = torch.zeros_like(rew_buf)
            last = torch.zeros(num_envs)
            for t in reversed(range(num_steps)):
                nv = next_value if t == num_steps - 1 else val_buf[t + 1]
                nonterminal = 1.0 - done_buf[t]
                delta = rew_buf[t] + gamma * nv * nonterminal - val_buf[t]
                last = delta + gamma * gae_lambda * nonterminal * last
                adv[t] = last
            ret = adv + val_buf
        b_obs, b_act, b_logp = obs_buf.reshape(-1, n_obs), act_buf.reshape(-1), logp_buf.reshape(-1)
        b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
        n = b_obs.shape[0]
        for _ in range(epochs):
            perm = torch.randperm(n)
            for start in range(0, n, batch_size):
                idx = perm[start : start + batch_size]
                dist = torch.distributions.Categorical(logits=actor(b_obs[idx]))
                ratio = (dist.log_prob(b_act[idx]) - b_logp[idx]).exp()
                a = b_adv[idx]
                a = (a - a.mean()) / (a.std() + 1e-8)
                pg = torch.max(-a * ratio, -a * ratio.clamp(1 - clip, 1 + clip)).mean()
                v = critic(b_obs[idx]).squeeze(-1)
                loss = pg + vf_coef * 0.5 * (v - b_ret[idx]).pow(2).mean() - ent_coef * dist.entropy().mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, max_grad_norm)
                opt.step()
        if on_eval is not None and eval_every and steps >= next_eval:
            next_eval += eval_every
            if on_eval(steps, greedy):
                break
    envs.close()
    return steps


def dqn(
    env_id: str,
    *,
    total_steps: int,
    seed: int = 0,
    num_envs: int = 8,
    buffer_size: int = 50_000,
    batch_size: int = 128,
    gradient_steps: int = 2,
    lr: float = 1e-3,
    gamma: float = 0.99,
    tau: float = 0.005,
    learning_starts: int = 1000,
    eps_start: float = 1.0,
    eps_end: float = 0.05,
    eps_decay: float = 0.997,
    hidden: int = 128,
    eval_every: int = 0,
    on_eval: OnEval | None = None,
) -> int:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id) for _ in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    n_obs = envs.single_observation_space.shape[0]
    n_act = envs.single_action_space.n
    q = nn.Sequential(
        nn.Linear(n_obs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_act)
    )
    q_target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), lr=lr)
    b_obs = np.zeros((buffer_size, n_obs), np.float32)
    b_next = np.zeros((buffer_size, n_obs), np.float32)
    b_act = np.zeros(buffer_size, np.int64)
    b_rew = np.zeros(buffer_size, np.float32)
    b_done = np.zeros(buffer_size, np.float32)
    pos = size = 0
    obs, _ = envs.reset(seed=seed)
    eps, steps, next_eval = eps_start, 0, eval_every

    def greedy(o: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return q(torch.tensor(o)).argmax(-1).numpy()

    while steps < total_steps:
        if rng.random() < eps:
            action = rng.integers(0, n_act, num_envs)
        else:
            action = greedy(obs)
            explore = rng.random(num_envs) < eps
            action[explore] = rng.integers(0, n_act, int(explore.sum()))
        next_obs, reward, term, trunc, info = envs.step(action)
        real_next = next_obs.copy()
        for i in np.nonzero(term | trunc)[0]:
            real_next[i] = info["final_obs"][i]
        for i in range(num_envs):
            b_obs[pos], b_next[pos], b_act[pos] = obs[i], real_next[i], action[i]
            b_rew[pos], b_done[pos] = reward[i], float(term[i])
            pos = (pos + 1) % buffer_size
            size = min(size + 1, buffer_size)
        obs = next_obs
        steps += num_envs
        eps = max(eps_end, eps * eps_decay)
        if steps >= learning_starts:
            for _ in range(gradient_steps):
                idx = rng.integers(0, size, batch_size)
                o, a, r = torch.tensor(b_obs[idx]), torch.tensor(b_act[idx]), torch.tensor(b_rew[idx])
                o2, d = torch.tensor(b_next[idx]), torch.tensor(b_done[idx])
                with torch.no_grad():
                    target = r + gamma * (1 - d) * q_target(o2).max(1).values
                pred = q(o).gather(1, a.unsqueeze(1)).squeeze(1)
                loss = nn.functional.smooth_l1_loss(pred, target)
                opt.zero_grad()
                loss.backward()
                opt.step()
                with torch.no_grad():
                    for p_t, p in zip(q_target.parameters(), q.parameters(), strict=True):
                        p_t.mul_(1 - tau).add_(p, alpha=tau)
        if on_eval is not None and eval_every and steps >= next_eval:
            next_eval += eval_every
            if on_eval(steps, greedy):
                break
    envs.close()
    return steps
