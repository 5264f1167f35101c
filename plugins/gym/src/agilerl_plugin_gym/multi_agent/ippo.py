"""IPPO: independent PPO, one actor-critic per agent or per group (de Witt et al. 2020).

Every agent learns from its own observation and reward with the clipped PPO objective of the
PPO update it shares with PPO (:mod:`agilerl_plugin_gym.ppo_update`: loss, minibatch epochs), on
rollouts the on-policy engine collects (:mod:`agilerl_plugin_gym.engine.on_policy`: GAE); agents of a
group (``speaker_0``, ``speaker_1`` -> ``speaker``) share one actor-critic when ``share_groups`` is
on, and their experience is pooled for its update. Agents that leave an episode early simply stop
contributing rows (their steps are masked out); a trajectory cut by truncation or by the episode
ending is bootstrapped with the value of its last observation.

With ``action_masking: true`` every Discrete agent acts from logits restricted to the actions its
env allows (:mod:`agilerl_plugin_gym.masking`): when sampling rollouts, in the update (each step's
mask is stored with it, so the new log-probabilities are those of the same restricted policy) and
in greedy actions.

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

from agilerl.errors import AgileRLError
from agilerl_plugin_gym.fast.optim import Adam
from agilerl_plugin_gym.masking import mask_logits
from agilerl_plugin_gym.multi_agent.base import MultiAgentAlgorithm, action_dim, network_space
from agilerl_plugin_gym.multi_agent.specs import IPPOSpec
from agilerl_plugin_gym.networks import EvolvableNetwork
from agilerl_plugin_gym.ppo_update import ppo_update
from agilerl_plugin_gym.protocols import RolloutLayout


class _LogStd(nn.Module):
    """State-independent log standard deviation of a Gaussian policy."""

    def __init__(self, dim: int, init_log_std: float) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.full((dim,), float(init_log_std)))


class IPPO(MultiAgentAlgorithm):
    """Independent PPO over a vectorised PettingZoo env."""

    spec: IPPOSpec

    module_attrs = ("actors", "critics", "log_stds")
    optimizer_attrs = ("optimizers",)
    mutable_module_attrs = ("actors",)

    def __init__(self, spec: Any, observation_spaces: Any, action_spaces: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_spaces, action_spaces, **kwargs)
        for a, space in self.action_spaces.items():
            if not isinstance(space, (spaces.Discrete, spaces.Box)):
                raise TypeError(f"IPPO supports Discrete or Box actions; agent {a!r} has {space}")
            if spec.action_masking and not self.discrete[a]:
                raise AgileRLError(
                    f"algorithm.action_masking: IPPO masks Discrete actions, not Box ones (agent {a!r} has {space})"
                )
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
                self.log_stds[key] = _LogStd(action_dim(self.action_spaces[a]), self.spec.action_std_init).to(
                    self.device
                )
        self._build_optimizers()

    def _build_optimizers(self) -> None:
        self.optimizers = {}
        for key in self.net_keys:
            params = [*self.actors[key].parameters(), *self.critics[key].parameters()]
            if key in self.log_stds:
                params += list(self.log_stds[key].parameters())
            self.optimizers[key] = Adam(params, lr=self.spec.lr, eps=1e-5)

    def _after_architecture_change(self) -> None:
        self._build_optimizers()

    def on_spec_change(self, old: Any, changed: frozenset[str]) -> None:
        if "lr" in changed:
            self._set_lr(self.optimizers, float(self.spec.lr))

    # --- policy ----------------------------------------------------------------------------------
    def _dist(
        self, key: str, agent: str, obs: torch.Tensor, action_mask: torch.Tensor | None = None
    ) -> Categorical | Normal:
        out = self.actors[key](obs)
        if self.discrete[agent]:
            return Categorical(logits=mask_logits(out, action_mask))
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

    def _mask(self, action_masks: Mapping[str, np.ndarray] | None, agent: str) -> torch.Tensor | None:
        """Agent ``agent``'s mask as a tensor (None: no masks, or not a maskable agent)."""
        if action_masks is None or agent not in action_masks:
            return None
        return torch.as_tensor(np.asarray(action_masks[agent], dtype=bool), device=self.device)

    def act(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        deterministic: bool = True,
        action_masks: Mapping[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        with torch.inference_mode():
            for a in self.agent_ids:
                key = self.keys[a]
                logits = self.actors[key](self._tensor(obs[a]))
                if self.discrete[a]:
                    logits = mask_logits(logits, self._mask(action_masks, a))
                    act = logits.argmax(-1) if deterministic else Categorical(logits=logits).sample()
                else:
                    act = logits if deterministic else self._dist(key, a, self._tensor(obs[a])).sample()
                out[a] = self._env_action(a, act.cpu().numpy())
        return out

    # --- rollout (the multi-agent on-policy strategy drives the loop) --------------------------------
    def rollout_layouts(self) -> dict[str, RolloutLayout]:
        """Per agent: Discrete actions stored as int64 scalars, Box actions as float32 vectors."""
        return {
            a: RolloutLayout((), np.int64) if self.discrete[a] else RolloutLayout((action_dim(s),), np.float32)
            for a, s in self.action_spaces.items()
        }

    @torch.inference_mode()
    def act_for_rollout(
        self, obs: Mapping[str, np.ndarray], action_masks: Mapping[str, np.ndarray] | None = None
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Sample every agent (from the allowed actions under ``action_masks``): ``({agent: {action,
        log_prob, value}}, env actions)``, all host arrays."""
        out: dict[str, Any] = {}
        env_actions: dict[str, np.ndarray] = {}
        for a in self.agent_ids:
            key = self.keys[a]
            x = self._tensor(obs[a])
            dist = self._dist(key, a, x, self._mask(action_masks, a))
            action = dist.sample()
            act = action.cpu().numpy()
            out[a] = {
                "action": act,
                "log_prob": self._log_prob(dist, action, a).cpu().numpy(),
                "value": self.critics[key](x).squeeze(-1).cpu().numpy(),
            }
            env_actions[a] = self._env_action(a, act)
        return out, env_actions

    @torch.inference_mode()
    def values(self, obs: Mapping[str, np.ndarray], agents: list[str] | None = None) -> dict[str, np.ndarray]:
        """Critic values of a batch of observations, per agent (all agents when ``agents`` is None)."""
        return {
            a: self.critics[self.keys[a]](self._tensor(obs[a])).squeeze(-1).cpu().numpy()
            for a in (self.agent_ids if agents is None else agents)
        }

    # --- update ----------------------------------------------------------------------------------
    def evaluate_actions(
        self, key: str, agent: str, obs: torch.Tensor, actions: torch.Tensor, action_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_prob, entropy, value)`` of stored actions of network ``key`` under the (masked)
        policy, with grad."""
        dist = self._dist(key, agent, obs, action_mask)
        value = self.critics[key](obs).squeeze(-1)
        return self._log_prob(dist, actions, agent), self._entropy(dist, agent), value

    def learn(self, rollout: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, float]:
        """The shared PPO update (:func:`agilerl_plugin_gym.ppo_update.ppo_update`) per network key.

        ``rollout`` maps agent id -> its flattened rollout (:meth:`RolloutBuffer.flat`, with the
        steps' ``action_masks`` under masking); the agents of a group are pooled for their network's update.
        """
        stats: dict[str, list[float]] = {}
        for key in self.net_keys:
            members = self.agents_of(key)
            data = {f: torch.cat([rollout[a][f] for a in members]).to(self.device) for f in rollout[members[0]]}
            agent = members[0]  # same spaces across the group
            opt = self.optimizers[key]
            params = [p for g in opt.param_groups for p in g["params"]]

            def forward(
                obs: torch.Tensor,
                actions: torch.Tensor,
                action_mask: torch.Tensor | None = None,
                key: str = key,
                agent: str = agent,
            ) -> Any:
                return self.evaluate_actions(key, agent, obs, actions, action_mask)

            for k, v in ppo_update(data, forward, opt, params, self.spec).items():
                stats.setdefault(k, []).append(v)
        return {k: float(np.mean(v)) for k, v in stats.items() if v}


__all__ = ["IPPO"]
