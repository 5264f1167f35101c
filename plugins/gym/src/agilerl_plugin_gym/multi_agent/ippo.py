"""IPPO: independent PPO, one actor-critic per agent or per group (de Witt et al. 2020).

Every agent learns from its own observation and reward with the clipped PPO objective; agents of a
group (``speaker_0``, ``speaker_1`` -> ``speaker``) share one actor-critic when ``share_groups`` is
on, and their experience is pooled for its update. Agents that leave an episode early simply stop
contributing rows (their steps are masked out); a trajectory cut by truncation or by the episode
ending is bootstrapped with the value of its last observation.

Hyperparameters (documented on :class:`~agilerl_plugin_gym.multi_agent.specs.IPPOSpec`): ``lr``,
``learn_step``, ``batch_size``, ``gamma``, ``gae_lambda``, ``clip_coef``, ``ent_coef``, ``vf_coef``,
``max_grad_norm``, ``target_kl``, ``update_epochs``, ``action_std_init``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Normal

from agilerl_plugin_gym.multi_agent.base import MultiAgentAlgorithm, action_dim, network_space
from agilerl_plugin_gym.networks import EvolvableNetwork
from agilerl_plugin_gym.optim import Adam


class _LogStd(nn.Module):
    """State-independent log standard deviation of a Gaussian policy."""

    def __init__(self, dim: int, init_log_std: float) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.full((dim,), float(init_log_std)))


class IPPO(MultiAgentAlgorithm):
    """Independent PPO over a vectorised PettingZoo env."""

    lr: float
    learn_step: int
    batch_size: int
    gamma: float
    gae_lambda: float
    clip_coef: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    update_epochs: int
    action_std_init: float

    module_attrs = ("actors", "critics", "log_stds")
    optimizer_attrs = ("optimizers",)
    mutable_module_attrs = ("actors",)

    def __init__(self, spec: Any, observation_spaces: Any, action_spaces: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_spaces, action_spaces, **kwargs)
        for a, space in self.action_spaces.items():
            if not isinstance(space, (spaces.Discrete, spaces.Box)):
                raise TypeError(f"IPPO supports Discrete or Box actions; agent {a!r} has {space}")
        self.actors: dict[str, EvolvableNetwork] = {}
        self.critics: dict[str, EvolvableNetwork] = {}
        self.log_stds: dict[str, _LogStd] = {}
        for key in self.net_keys:
            a = self.agents_of(key)[0]
            obs_space = network_space(self.observation_spaces[a])
            self.actors[key] = EvolvableNetwork.from_spec(
                self.net_spec(key), obs_space, action_dim(self.action_spaces[a]), normalize_images=spec.normalize_images
            ).to(self.device)
            self.critics[key] = EvolvableNetwork.from_spec(
                self.net_spec(key), obs_space, 1, output_vanish=False, normalize_images=spec.normalize_images
            ).to(self.device)
            if not self.discrete[a]:
                self.log_stds[key] = _LogStd(action_dim(self.action_spaces[a]), self.action_std_init).to(self.device)
        self._build_optimizers()

    def _build_optimizers(self) -> None:
        self.optimizers = {}
        for key in self.net_keys:
            params = [*self.actors[key].parameters(), *self.critics[key].parameters()]
            if key in self.log_stds:
                params += list(self.log_stds[key].parameters())
            self.optimizers[key] = Adam(params, lr=self.lr, eps=1e-5)

    def _on_hyperparameter_change(self, name: str, old: Any, new: Any) -> None:
        if name == "lr":
            self._set_lr(self.optimizers, float(new))

    # --- policy ----------------------------------------------------------------------------------
    def _dist(self, key: str, agent: str, obs: torch.Tensor) -> Categorical | Normal:
        out = self.actors[key](obs)
        if self.discrete[agent]:
            return Categorical(logits=out)
        return Normal(out, self.log_stds[key].log_std.exp().expand_as(out))

    def _log_prob(self, dist: Categorical | Normal, action: torch.Tensor, agent: str) -> torch.Tensor:
        lp = dist.log_prob(action)
        return lp if self.discrete[agent] else lp.sum(-1)

    def _entropy(self, dist: Categorical | Normal, agent: str) -> torch.Tensor:
        ent = dist.entropy()
        return ent if self.discrete[agent] else ent.sum(-1)

    def _env_action(self, agent: str, action: np.ndarray) -> np.ndarray:
        if self.discrete[agent]:
            return action
        space = self.action_spaces[agent]
        return np.clip(action, space.low, space.high)

    def act(self, obs: Mapping[str, np.ndarray], *, deterministic: bool = True) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        with torch.inference_mode():
            for a in self.agent_ids:
                key = self.keys[a]
                logits = self.actors[key](self._tensor(obs[a]))
                if self.discrete[a]:
                    act = logits.argmax(-1) if deterministic else Categorical(logits=logits).sample()
                else:
                    act = logits if deterministic else self._dist(key, a, self._tensor(obs[a])).sample()
                out[a] = self._env_action(a, act.cpu().numpy())
        return out

    # --- rollout ---------------------------------------------------------------------------------
    def collect_rollout(
        self, env: Any, obs: dict[str, np.ndarray], active: dict[str, np.ndarray], num_steps: int, tracker: Any
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, dict[str, torch.Tensor]]]:
        """Run ``num_steps`` vector steps; return the next obs/active and per-agent rollout tensors."""
        n = env.num_envs
        buf: dict[str, dict[str, np.ndarray]] = {}
        for a in self.agent_ids:
            shape = env.obs_shapes[a]
            act_shape = () if self.discrete[a] else (action_dim(self.action_spaces[a]),)
            buf[a] = {
                "obs": np.zeros((num_steps, n, *shape), np.float32),
                "action": np.zeros((num_steps, n, *act_shape), np.float32),
                **{k: np.zeros((num_steps, n), np.float32) for k in ("logp", "value", "reward", "done", "mask")},
            }
        for t in range(num_steps):
            env_actions: dict[str, np.ndarray] = {}
            with torch.inference_mode():
                for a in self.agent_ids:
                    key = self.keys[a]
                    x = self._tensor(obs[a])
                    dist = self._dist(key, a, x)
                    action = dist.sample()
                    b = buf[a]
                    b["obs"][t] = obs[a]
                    b["action"][t] = action.cpu().numpy().reshape(b["action"][t].shape)
                    b["logp"][t] = self._log_prob(dist, action, a).cpu().numpy()
                    b["value"][t] = self.critics[key](x).squeeze(-1).cpu().numpy()
                    env_actions[a] = self._env_action(a, action.cpu().numpy())
            next_obs, rewards, terms, truncs, infos = env.step(env_actions)
            episode_done = infos["episode_done"]
            final = infos.get("final_obs")
            for a in self.agent_ids:
                b = buf[a]
                acted = infos["acted"][a]
                reward = rewards[a].astype(np.float32)
                ended = terms[a] | truncs[a] | episode_done
                # Cut without termination (time limit, or the episode ended around a live agent):
                # the future is not zero, so bootstrap from the value of the last observation.
                cut = acted & ended & ~terms[a]
                if cut.any():
                    last = next_obs[a]
                    if final is not None:
                        rows = episode_done.reshape((-1,) + (1,) * (last.ndim - 1))
                        last = np.where(rows, final[a], last)
                    with torch.inference_mode():
                        v = self.critics[self.keys[a]](self._tensor(last)).squeeze(-1).cpu().numpy()
                    reward = reward + self.gamma * v * cut
                b["reward"][t] = reward
                b["done"][t] = ended | ~acted
                b["mask"][t] = acted
            tracker.step(rewards, episode_done)
            obs, active = next_obs, infos["active"]
        rollout: dict[str, dict[str, torch.Tensor]] = {}
        with torch.inference_mode():
            for a in self.agent_ids:
                b = buf[a]
                next_value = self.critics[self.keys[a]](self._tensor(obs[a])).squeeze(-1).cpu().numpy()
                adv = np.zeros((num_steps, n), np.float32)
                last_gae = np.zeros(n, np.float32)
                for t in reversed(range(num_steps)):
                    nv = next_value if t == num_steps - 1 else b["value"][t + 1]
                    nonterminal = 1.0 - b["done"][t]
                    delta = b["reward"][t] + self.gamma * nv * nonterminal - b["value"][t]
                    last_gae = delta + self.gamma * self.gae_lambda * nonterminal * last_gae
                    adv[t] = last_gae
                keep = b["mask"].reshape(-1) > 0
                rollout[a] = {
                    "obs": torch.from_numpy(b["obs"].reshape(num_steps * n, *b["obs"].shape[2:])[keep]),
                    "action": torch.from_numpy(b["action"].reshape(num_steps * n, *b["action"].shape[2:])[keep]),
                    "logp": torch.from_numpy(b["logp"].reshape(-1)[keep]),
                    "advantage": torch.from_numpy(adv.reshape(-1)[keep]),
                    "return": torch.from_numpy((adv + b["value"]).reshape(-1)[keep]),
                }
        return obs, active, rollout

    # --- update ----------------------------------------------------------------------------------
    def learn(self, rollout: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, float]:
        """``update_epochs`` passes of clipped-PPO minibatch updates per network key."""
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "entropy": [], "approx_kl": []}
        for key in self.net_keys:
            members = self.agents_of(key)
            data = {f: torch.cat([rollout[a][f] for a in members]).to(self.device) for f in rollout[members[0]]}
            rows = data["logp"].shape[0]
            if rows == 0:
                continue
            agent = members[0]  # same spaces across the group
            opt, params = self.optimizers[key], [p for g in self.optimizers[key].param_groups for p in g["params"]]
            for _ in range(int(self.update_epochs)):
                perm = torch.randperm(rows, device=self.device)
                kl_stop = False
                for start in range(0, rows, int(self.batch_size)):
                    idx = perm[start : start + int(self.batch_size)]
                    adv = data["advantage"][idx]
                    if len(idx) > 1:
                        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    dist = self._dist(key, agent, data["obs"][idx])
                    logp = self._log_prob(dist, data["action"][idx], agent)
                    log_ratio = logp - data["logp"][idx]
                    ratio = log_ratio.exp()
                    policy_loss = torch.max(
                        -adv * ratio, -adv * ratio.clamp(1 - self.clip_coef, 1 + self.clip_coef)
                    ).mean()
                    value = self.critics[key](data["obs"][idx]).squeeze(-1)
                    value_loss = 0.5 * ((value - data["return"][idx]) ** 2).mean()
                    entropy = self._entropy(dist, agent).mean()
                    loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm, foreach=True)
                    opt.step()
                    with torch.no_grad():
                        approx_kl = ((ratio - 1) - log_ratio).mean().item()
                    stats["policy_loss"].append(policy_loss.item())
                    stats["value_loss"].append(value_loss.item())
                    stats["entropy"].append(entropy.item())
                    stats["approx_kl"].append(approx_kl)
                    target_kl = self.spec.target_kl
                    if target_kl is not None and approx_kl > target_kl:
                        kl_stop = True
                        break
                if kl_stop:
                    break
        return {k: float(np.mean(v)) for k, v in stats.items() if v}


__all__ = ["IPPO"]
