"""The on-policy engine: rollout collection and the learn loop every actor-critic here shares.

As Stable-Baselines3's ``OnPolicyAlgorithm``: the engine steps the env, fills a
:class:`~agilerl_plugin_gym.buffers.RolloutBuffer`, computes GAE and hands the rollout to the
algorithm's ``learn`` (PPO, IPPO, a plugin's A2C), which owns only its loss and networks
(:mod:`agilerl_plugin_gym.ppo_update` for the PPO family). Two env APIs, one schedule:

* :class:`OnPolicyEngine` — a gymnasium vector env and an
  :class:`~agilerl_plugin_gym.protocols.OnPolicyAlgorithm` (recurrent policies too: one hidden state
  per sub-env, stored with each step and zeroed once the sub-env has auto-reset);
* :class:`MultiAgentOnPolicyEngine` — a PettingZoo vector env and a
  :class:`~agilerl_plugin_gym.protocols.MultiAgentOnPolicyAlgorithm`: one buffer per agent id, a row
  valid only where that agent acted, a trajectory cut without termination bootstrapped through its
  reward, each step's action masks stored with it under ``action_masking``;
* :func:`rollout_plan` — how many vector steps each rollout of a ``learn`` call takes, so that an
  agent never trains past its step budget (the last rollout is shortened instead);
* :func:`gae` (from :mod:`agilerl_plugin_gym.buffers`, beside the rollout buffer that calls it).

Gymnasium 1.x vector envs auto-reset on the *next* step: after a sub-env's episode ends, its next
``step`` ignores the action and returns the reset observation with reward 0. Rollouts mark that
step invalid (masked out of GAE and the loss). Every ``learn`` starts from ``env.reset(seed)`` with
the seed the strategy passes (:func:`~agilerl_plugin_gym.engine.common.episode_seed`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from agilerl.training.heap import HeapTrimmer
from agilerl_plugin_gym import fast
from agilerl_plugin_gym.buffers import RolloutBuffer, gae
from agilerl_plugin_gym.engine.common import EpisodeReturns, env_rows, episode_scores
from agilerl_plugin_gym.engine.recurrent import RecurrentRolloutBuffer, reset_rows
from agilerl_plugin_gym.masking import MaskSource, check_masking, strip_mask_key
from agilerl_plugin_gym.normalization import agent_normalizer
from agilerl_plugin_gym.observations import field_layout

if TYPE_CHECKING:
    from agilerl_plugin_gym.protocols import (
        MultiAgentOnPolicyAlgorithm,
        OnPolicyAlgorithm,
        RecurrentOnPolicyAlgorithm,
    )

__all__ = ["MultiAgentOnPolicyEngine", "OnPolicyEngine", "gae", "recurrent", "rollout_plan"]


def rollout_plan(num_steps: int, learn_step: int, num_envs: int) -> list[int]:
    """Vector steps per rollout for a ``learn(num_steps)`` call.

    Full rollouts are ``max(1, learn_step // num_envs)`` vector steps; when the budget does not
    divide, the last rollout covers only what is left (rounded up to whole vector steps), so the
    agent's step count never exceeds its budget by more than ``num_envs - 1``.
    """
    full = max(1, learn_step // num_envs)
    vec_budget = max(1, -(-num_steps // num_envs))
    plan = [full] * (vec_budget // full)
    if vec_budget % full:
        plan.append(vec_budget % full)
    return plan


def recurrent(agent: OnPolicyAlgorithm) -> RecurrentOnPolicyAlgorithm | None:
    """``agent`` if its policy carries a hidden state (recurrent PPO), else None."""
    return agent if getattr(agent.spec, "recurrent", False) else None  # type: ignore[return-value]


class OnPolicyEngine:
    """Rollouts of ``learn_step`` env steps (``learn_step // num_envs`` vector steps), then an update,
    on a gymnasium vector env."""

    def __init__(self) -> None:
        #: Rollout buffers by layout; every rollout rewrites all of a buffer, so agents share them.
        self.buffers: dict[tuple[Any, ...], RolloutBuffer] = {}

    def rollout_buffer(
        self, agent: OnPolicyAlgorithm, steps: int, n: int, obs: Any, mask_dim: int = 0
    ) -> RolloutBuffer:
        layout = agent.rollout_layout()
        obs_shape, obs_dtype = field_layout("obs", obs)  # mappings for Dict/Tuple observations
        rec = recurrent(agent)
        state_size = rec.state_size if rec is not None else 0
        key = (steps, n, repr(obs_shape), repr(obs_dtype), layout, str(agent.device), state_size, mask_dim)
        buf = self.buffers.get(key)
        if buf is None:
            args = (steps, n, obs_shape, layout.action_shape)
            kw: dict[str, Any] = {"obs_dtype": obs_dtype, "action_dtype": layout.action_dtype, "device": agent.device}
            if mask_dim:
                kw["mask_dim"] = mask_dim
            buf = (
                RecurrentRolloutBuffer(*args, state_size=state_size, **kw) if state_size else RolloutBuffer(*args, **kw)
            )
            self.buffers[key] = buf
        return buf

    def learn(self, agent: OnPolicyAlgorithm, env: Any, num_steps: int, seed: int | None) -> dict[str, float]:
        """Collect and learn from rollouts until ``num_steps`` env steps; the last update's stats and
        the training episodes' returns."""
        n = env.num_envs
        obs, info = env.reset(seed=seed)
        # Action masks (masking.py): from the env when the algorithm asks for them, else an error if it gives them.
        source = MaskSource.of(env, obs, info)
        supported = "action_masking" in getattr(type(agent.spec), "model_fields", {})
        check_masking(
            source, bool(getattr(agent.spec, "action_masking", False)), type(agent).__name__, supported=supported
        )
        mask = source.read(env, obs, info)
        obs = strip_mask_key(obs)
        # environment.normalize: statistics updated by every new batch, the buffer holding what the
        # networks saw (normalised observations, scaled rewards); reported returns stay raw.
        norm = agent_normalizer(agent)
        if norm is not None:
            norm.start_episodes(n)
            obs = norm.train_obs(obs)
        valid = np.ones(n, dtype=bool)
        episodes = EpisodeReturns(n)
        stats: dict[str, float] = {}
        # Recurrent policies: one hidden state per env, from zero (every learn() starts new episodes).
        rec = recurrent(agent)
        state = rec.initial_hidden_state(n) if rec is not None else None
        # The fast room's act and learn where the networks qualify (agilerl_plugin_gym.fast).
        act: Callable[..., Any] = (fast.select(agent, "act") if rec is None else None) or agent.act
        learn = fast.select(agent, "learn") or agent.learn
        heap = HeapTrimmer()  # the updates' freed tensors fragment the C heap: its free pages go back
        for steps in rollout_plan(num_steps, agent.spec.learn_step, n):
            buf = self.rollout_buffer(agent, steps, n, obs, 0 if mask is None else mask.shape[-1])
            for t in range(steps):
                if mask is not None:
                    action, log_prob, value = act(agent.obs_tensor(obs), torch.as_tensor(mask, device=agent.device))
                elif rec is None:
                    action, log_prob, value = act(agent.obs_tensor(obs))
                else:
                    assert state is not None
                    buf.hidden[t] = state.cpu().numpy()  # type: ignore[attr-defined]  # the state it acts from
                    action, log_prob, value, state = rec.act_recurrent(agent.obs_tensor(obs), state)
                    # An auto-reset step returns the next episode's first observation: start it from zero.
                    state = reset_rows(state, ~valid)
                buf.add(t, obs, action, log_prob, value, 0.0, 0.0, 0.0, valid, action_mask=mask)
                obs, reward, terminated, truncated, info = env.step(agent.env_action(action))
                mask = source.read(env, obs, info)
                obs = strip_mask_key(obs)
                done = terminated | truncated
                buf.rewards[t] = reward if norm is None else norm.train_reward(reward, done)
                buf.terminated[t] = terminated
                buf.dones[t] = done
                episodes.step(reward, done, valid)
                if norm is not None:
                    obs = norm.train_obs(obs)
                valid = ~done  # a finished sub-env spends its next step auto-resetting
            obs_t = agent.obs_tensor(obs)
            last_value = agent.value(obs_t) if rec is None else rec.value_recurrent(obs_t, state)
            buf.compute_returns_and_advantages(last_value, valid, agent.spec.gamma, agent.spec.gae_lambda)
            stats = dict(learn(buf))
            heap.tick()
            agent.steps += steps * n
            agent.vec_steps += steps
            if rec is not None:
                rec.hidden_state = state
        return {**stats, **episodes.row()}


class MultiAgentOnPolicyEngine:
    """On-policy multi-agent training (IPPO): collect ``learn_step`` env steps, update, repeat.

    Each agent's steps go to its own :class:`~agilerl_plugin_gym.buffers.RolloutBuffer` (the
    single-agent one). An agent's row of a step is valid only where it acted; a trajectory cut
    without termination (time limit, or the episode ending around a live agent) is bootstrapped by
    adding ``gamma * V(last obs)`` to its reward, then treated as ended.
    """

    def __init__(self) -> None:
        self.buffers: dict[tuple[Any, ...], RolloutBuffer] = {}

    def rollout_buffer(
        self, agent_id: str, layout: Any, steps: int, obs: np.ndarray, device: Any, mask_dim: int = 0
    ) -> RolloutBuffer:
        key = (agent_id, steps, obs.shape, obs.dtype.str, layout, str(device), mask_dim)
        buf = self.buffers.get(key)
        if buf is None:
            buf = RolloutBuffer(
                steps, obs.shape[0], tuple(obs.shape[1:]), layout.action_shape,
                obs_dtype=obs.dtype, action_dtype=layout.action_dtype, device=device, mask_dim=mask_dim,
            )  # fmt: skip
            self.buffers[key] = buf
        return buf

    def learn(self, agent: MultiAgentOnPolicyAlgorithm, env: Any, num_steps: int, seed: int | None) -> dict[str, float]:
        """Collect and learn until ``num_steps`` env steps on a PettingZoo vector env; the mean of
        the updates' stats and the training episodes' scores."""
        n = env.num_envs
        obs, infos = env.reset(seed=seed)
        agent.check_masks(env.mask_kind)  # the env gives masks (infos["action_mask"]) iff action_masking
        masks: dict[str, np.ndarray] = infos.get("action_mask", {})
        layouts = agent.rollout_layouts()
        episodes = EpisodeReturns(n, key="train_score")
        stats: dict[str, list[float]] = {}
        ids = agent.agent_ids
        heap = HeapTrimmer()  # as the single-agent engine's
        for steps in rollout_plan(num_steps, agent.spec.learn_step, n):
            bufs = {
                a: self.rollout_buffer(a, layouts[a], steps, np.asarray(obs[a]), agent.device,
                                       masks[a].shape[-1] if a in masks else 0)
                for a in ids
            }  # fmt: skip
            for t in range(steps):
                out, env_actions = agent.act_for_rollout(obs, masks or None)
                for a in ids:
                    o = out[a]
                    bufs[a].add(t, obs[a], o["action"], o["log_prob"], o["value"], 0.0, 0.0, 0.0, 0.0, masks.get(a))
                next_obs, rewards, terms, truncs, infos = env.step(env_actions)
                masks = infos.get("action_mask", {})
                episode_done = infos["episode_done"]
                acted = infos["acted"]
                ended = {a: terms[a] | truncs[a] | episode_done for a in ids}
                cut = {a: acted[a] & ended[a] & ~terms[a] for a in ids}
                need = [a for a in ids if cut[a].any()]
                boot: dict[str, np.ndarray] = {}
                if need:
                    final = infos.get("final_obs")
                    last = {
                        a: next_obs[a] if final is None else np.where(env_rows(episode_done, next_obs[a]), final[a], next_obs[a])
                        for a in need
                    }  # fmt: skip
                    boot = agent.values(last, need)
                for a in ids:
                    b = bufs[a]
                    reward = rewards[a].astype(np.float32)
                    if a in boot:
                        reward = reward + agent.spec.gamma * boot[a] * cut[a]
                    b.rewards[t] = reward
                    stop = ended[a] | ~acted[a]
                    b.terminated[t] = stop  # a cut was bootstrapped through the reward above
                    b.dones[t] = stop
                    b.valid[t] = acted[a]
                episodes.step(episode_scores(agent, rewards), episode_done)
                obs = next_obs
            last_values = agent.values(obs)
            ones = np.ones(n, dtype=np.float32)
            for a in ids:
                bufs[a].compute_returns_and_advantages(last_values[a], ones, agent.spec.gamma, agent.spec.gae_lambda)
            for k, v in agent.learn({a: bufs[a].flat() for a in ids}).items():
                stats.setdefault(k, []).append(v)
            heap.tick()
            agent.steps += steps * n
            agent.vec_steps += steps
        out = {k: float(np.mean(v)) for k, v in stats.items()}
        return {**out, **episodes.row()}
