"""Floor references for bench_cartpole.py (PPO, DQN) and bench_offpolicy.py (SAC, TD3): the least work
a framework's training loop can do.

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

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn


def _mlp(n_in: int, n_out: int, hidden: int) -> nn.Sequential:
    return _mlp_sizes(n_in, [hidden, hidden], n_out)


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


# ---- off-policy continuous control at RL Zoo sizes (bench_offpolicy.py) ---------------------------
#
# One env, one gradient step of batch 256 per env step after ``learning_starts`` (SB3's train_freq 1,
# gradient_steps 1), transitions in preallocated tensors, fused Adam, foreach Polyak averaging: the
# update SAC and TD3 must do, and nothing else (no logging, no evaluation, no checkpoint bookkeeping).


class _Transitions:
    """A preallocated ring of (obs, action, reward, next obs, terminated) rows, sampled uniformly."""

    def __init__(self, size: int, n_obs: int, n_act: int, seed: int) -> None:
        self.s, self.s2 = torch.zeros(size, n_obs), torch.zeros(size, n_obs)
        self.a, self.r, self.d = torch.zeros(size, n_act), torch.zeros(size), torch.zeros(size)
        self.size, self.pos, self.filled = size, 0, 0
        self.rng = np.random.default_rng(seed)

    def add(self, s: torch.Tensor, a: np.ndarray, r: float, s2: np.ndarray, term: bool) -> None:
        i = self.pos
        self.s[i], self.a[i], self.r[i] = s, torch.as_tensor(a), float(r)
        self.s2[i], self.d[i] = torch.as_tensor(s2, dtype=torch.float32), float(term)
        self.pos, self.filled = (i + 1) % self.size, min(self.filled + 1, self.size)

    def sample(self, n: int) -> tuple[torch.Tensor, ...]:
        idx = torch.as_tensor(self.rng.integers(0, self.filled, n))
        return self.s[idx], self.a[idx], self.r[idx], self.s2[idx], self.d[idx]


def _mlp_sizes(n_in: int, sizes: list[int], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in sizes:
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    return nn.Sequential(*layers, nn.Linear(n_in, n_out))


def _continuous_env(env_id: str, seed: int) -> tuple[gym.Env, np.ndarray, int, int]:
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    return env, obs, int(np.prod(env.observation_space.shape)), int(np.prod(env.action_space.shape))


def _polyak(target: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    with torch.no_grad():
        torch._foreach_lerp_(target, online, tau)


def _twin_q(nets: nn.ModuleList, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Each critic's Q(s, a), side by side: shape (batch, critics)."""
    x = torch.cat([s, a], dim=-1)
    return torch.cat([net(x) for net in nets], dim=-1)


def _off_policy_loop(
    env: gym.Env,
    obs: np.ndarray,
    buffer: _Transitions,
    total_steps: int,
    learning_starts: int,
    act: Callable[[torch.Tensor], np.ndarray],
    update: Callable[[int], None],
) -> Callable[[], int]:
    """The loop both floors run: a random action before ``learning_starts``, then ``act(obs)``; each
    transition stored; from ``learning_starts`` on, ``update(number of updates so far)`` every step."""

    def train() -> int:
        state = obs
        for done in range(total_steps):
            x = torch.as_tensor(state, dtype=torch.float32)
            a = env.action_space.sample() if done < learning_starts else act(x)
            nxt, r, term, trunc, _ = env.step(a)
            buffer.add(x, a, float(r), nxt, bool(term))
            state = env.reset()[0] if term or trunc else nxt
            if done + 1 >= learning_starts:
                update(done + 1 - learning_starts)
        env.close()
        return total_steps

    return train


def sac_floor(
    env_id: str, total_steps: int, seed: int, *, learning_starts: int = 256, hidden: int = 256
) -> Callable[[], int]:
    """SAC as SB3 runs it (two 256-256 critics, tanh-squashed Gaussian actor, learned entropy
    coefficient, batch 256, tau .005, lr 3e-4), reduced to the update. Returns the training loop,
    built (env, networks, optimizers, transitions allocated), to be timed on its own."""
    torch.manual_seed(seed)
    env, obs, n_obs, n_act = _continuous_env(env_id, seed)
    actor = _mlp_sizes(n_obs, [hidden, hidden], 2 * n_act)
    critics = nn.ModuleList(_mlp_sizes(n_obs + n_act, [hidden, hidden], 1) for _ in range(2))
    targets = nn.ModuleList(_mlp_sizes(n_obs + n_act, [hidden, hidden], 1) for _ in range(2))
    targets.load_state_dict(critics.state_dict())
    log_alpha = torch.zeros(1, requires_grad=True)
    actor_p = list(actor.parameters())
    opt_actor = torch.optim.Adam(actor_p, lr=3e-4, fused=True)
    opt_critic = torch.optim.Adam(critics.parameters(), lr=3e-4, fused=True)
    opt_alpha = torch.optim.Adam([log_alpha], lr=3e-4, fused=True)
    online_p, target_p = list(critics.parameters()), list(targets.parameters())
    buffer = _Transitions(total_steps, n_obs, n_act, seed)
    target_entropy = -float(n_act)

    def sample(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = actor(s).chunk(2, dim=-1)
        log_std = log_std.clamp(-20, 2)
        noise = torch.randn_like(mean)
        a = torch.tanh(mean + log_std.exp() * noise)
        logp = (-0.5 * noise**2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        return a, logp - torch.log1p(-a.pow(2) + 1e-6).sum(-1)

    def act(x: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            return sample(x.unsqueeze(0))[0][0].numpy()

    def update(_: int) -> None:
        s, a_b, r_b, s2, d = buffer.sample(256)
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            a2, logp2 = sample(s2)
            y = r_b + 0.99 * (1 - d) * (_twin_q(targets, s2, a2).min(-1).values - alpha * logp2)
        critic_loss = 0.5 * (_twin_q(critics, s, a_b) - y.unsqueeze(-1)).pow(2).mean(0).sum()
        opt_critic.zero_grad(set_to_none=True)
        critic_loss.backward()
        opt_critic.step()
        a_pi, logp = sample(s)
        actor_loss = (alpha * logp - _twin_q(critics, s, a_pi).min(-1).values).mean()
        opt_actor.zero_grad(set_to_none=True)
        actor_loss.backward(inputs=actor_p)  # no gradient for the critics' weights: the least work
        opt_actor.step()
        alpha_loss = -(log_alpha * (logp.detach() + target_entropy)).mean()
        opt_alpha.zero_grad(set_to_none=True)
        alpha_loss.backward()
        opt_alpha.step()
        _polyak(target_p, online_p, 0.005)

    return _off_policy_loop(env, obs, buffer, total_steps, learning_starts, act, update)


def td3_floor(env_id: str, total_steps: int, seed: int, *, learning_starts: int = 256) -> Callable[[], int]:
    """TD3 as the zoo's Hopper row (400-300 actor and critics, batch 256, lr 1e-3, exploration noise
    .1, target smoothing .2 clipped at .5, actor and targets every 2nd update), reduced to the update.
    Returns the training loop, built, to be timed on its own."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env, obs, n_obs, n_act = _continuous_env(env_id, seed)
    sizes = [400, 300]
    actor, actor_target = _mlp_sizes(n_obs, sizes, n_act), _mlp_sizes(n_obs, sizes, n_act)
    actor_target.load_state_dict(actor.state_dict())
    critics = nn.ModuleList(_mlp_sizes(n_obs + n_act, sizes, 1) for _ in range(2))
    targets = nn.ModuleList(_mlp_sizes(n_obs + n_act, sizes, 1) for _ in range(2))
    targets.load_state_dict(critics.state_dict())
    actor_p = list(actor.parameters())
    opt_actor = torch.optim.Adam(actor_p, lr=1e-3, fused=True)
    opt_critic = torch.optim.Adam(critics.parameters(), lr=1e-3, fused=True)
    online_p = [*critics.parameters(), *actor.parameters()]
    target_p = [*targets.parameters(), *actor_target.parameters()]
    buffer = _Transitions(total_steps, n_obs, n_act, seed)

    def act(x: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            a = torch.tanh(actor(x)).numpy()
        return np.clip(a + rng.normal(0.0, 0.1, n_act), -1.0, 1.0).astype(np.float32)

    def update(n: int) -> None:
        s, a_b, r_b, s2, d = buffer.sample(256)
        with torch.no_grad():
            noise = (torch.randn_like(a_b) * 0.2).clamp(-0.5, 0.5)
            a2 = (torch.tanh(actor_target(s2)) + noise).clamp(-1.0, 1.0)
            y = r_b + 0.99 * (1 - d) * _twin_q(targets, s2, a2).min(-1).values
        critic_loss = (_twin_q(critics, s, a_b) - y.unsqueeze(-1)).pow(2).mean(0).sum()
        opt_critic.zero_grad(set_to_none=True)
        critic_loss.backward()
        opt_critic.step()
        if n % 2 == 0:
            actor_loss = -_twin_q(critics[:1], s, torch.tanh(actor(s))).mean()
            opt_actor.zero_grad(set_to_none=True)
            actor_loss.backward(inputs=actor_p)
            opt_actor.step()
            _polyak(target_p, online_p, 0.005)

    return _off_policy_loop(env, obs, buffer, total_steps, learning_starts, act, update)
