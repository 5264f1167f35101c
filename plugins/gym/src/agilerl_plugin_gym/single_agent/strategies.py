"""Training strategies for the core's evolutionary loop: on-policy (PPO) and off-policy (DQN, DDPG, TD3).

The core loop calls, per generation and agent, ``learn(agent, run, num_steps)`` then
``evaluate(agent, run)``; progress, metrics, checkpoints, ``target_score``/``max_steps`` and
evolution are the core's. Here is the part that touches the env:

* Every ``learn`` call starts from ``env.reset(seed=...)`` with a seed derived from the run seed,
  the agent's index and its step count. Agents of a population share the env, so each needs fresh
  episodes anyway; and because the seed depends only on saved state, a run resumed from a
  checkpoint continues exactly as the uninterrupted run would have (the cut-off episodes are
  treated as truncated: bootstrapped, not terminal).
* Gymnasium 1.x vector envs auto-reset on the *next* step: after a sub-env's episode ends, its next
  ``step`` ignores the action and returns the reset observation with reward 0. On-policy rollouts
  mark that step invalid (masked out of GAE and the loss); off-policy collection does not store it.
* A recurrent policy (recurrent PPO) carries one hidden state per sub-env through the rollout,
  stores it with each step (:class:`~agilerl_plugin_gym.engine.recurrent.RecurrentRolloutBuffer`)
  and zeroes it once the sub-env has auto-reset; the algorithm trains on sequences (truncated BPTT).
* Off-policy runs keep one replay buffer for the whole population (AgileRL's experience sharing);
  it and the exploration RNG are in the strategy's ``state_dict``
  (:class:`~agilerl_plugin_gym.engine.off_policy.ReplayState`), so resume continues with the same
  buffer contents and random stream.

GAE, the PPO update, the update schedule, target updates and noise are the engines'
(:mod:`agilerl_plugin_gym.engine`); the algorithms are reached only through
:mod:`agilerl_plugin_gym.protocols`.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from agilerl.strategies import TrainingStrategy
from agilerl_plugin_gym.buffers import ReplayBuffer, RolloutBuffer
from agilerl_plugin_gym.engine.common import EpisodeReturns, episode_seed
from agilerl_plugin_gym.engine.off_policy import ReplayState, UpdateSchedule, gradient_steps
from agilerl_plugin_gym.engine.on_policy import rollout_plan
from agilerl_plugin_gym.engine.recurrent import RecurrentRolloutBuffer, reset_rows
from agilerl_plugin_gym.engine.replay_per import (
    PrioritizedReplayBuffer,
    ReplaySettings,
    annealed_beta,
    with_priority_update,
)
from agilerl_plugin_gym.envs import make_gym_env
from agilerl_plugin_gym.observations import field_layout
from agilerl_plugin_gym.protocols import OFF_POLICY, ON_POLICY

if TYPE_CHECKING:
    from agilerl.models import TrainingManifest
    from agilerl.training.run import Run
    from agilerl_plugin_gym.protocols import OffPolicyAlgorithm, OnPolicyAlgorithm, RecurrentOnPolicyAlgorithm

log = logging.getLogger(__name__)

#: Evaluation uses at most this many parallel episodes (one sync vector env, no worker processes).
MAX_EVAL_ENVS = 10


class GymStrategy(TrainingStrategy):
    """Env creation and evaluation shared by both regimes."""

    paradigm = "single_agent"

    def make_env(self, manifest: TrainingManifest, *, seed: int | None) -> Any:
        env = make_gym_env(manifest.environment)
        if seed is not None:
            env.action_space.seed(seed)
        return env

    def make_eval_env(self, manifest: TrainingManifest, *, seed: int | None, train_env: Any) -> Any:
        spec = manifest.environment
        n = min(spec.num_envs, MAX_EVAL_ENVS)
        return make_gym_env(spec.model_copy(update={"num_envs": n, "sync": True}))

    def evaluate(self, agent: Any, run: Run) -> float:
        t = run.manifest.training
        seed = None if run.seed is None else run.seed + 10_000
        return float(agent.test(run.eval_env, max_steps=t.eval_steps, loop=t.eval_loop, seed=seed))


# --------------------------------------------------------------------------------------------------
# On-policy
# --------------------------------------------------------------------------------------------------


class OnPolicyStrategy(GymStrategy):
    """Rollouts of ``learn_step`` env steps (``learn_step // num_envs`` vector steps), then an update.

    Any :class:`~agilerl_plugin_gym.protocols.OnPolicyAlgorithm` (PPO, or a plugin's A2C) trains here.
    """

    regime = "on_policy"
    algorithm_protocol = ON_POLICY
    #: Every learn() resets the env from a seed of its own and uses no shared buffer.
    independent_members = True

    def __init__(self) -> None:
        #: Rollout buffers by layout; every rollout rewrites all of a buffer, so agents share them.
        self.buffers: dict[tuple[Any, ...], RolloutBuffer] = {}

    def rollout_buffer(self, agent: OnPolicyAlgorithm, steps: int, n: int, obs: Any) -> RolloutBuffer:
        layout = agent.rollout_layout()
        obs_shape, obs_dtype = field_layout("obs", obs)  # mappings for Dict/Tuple observations
        rec = recurrent(agent)
        state_size = rec.state_size if rec is not None else 0
        key = (steps, n, repr(obs_shape), repr(obs_dtype), layout, str(agent.device), state_size)
        buf = self.buffers.get(key)
        if buf is None:
            args = (steps, n, obs_shape, layout.action_shape)
            kw: dict[str, Any] = {"obs_dtype": obs_dtype, "action_dtype": layout.action_dtype, "device": agent.device}
            buf = (
                RecurrentRolloutBuffer(*args, state_size=state_size, **kw) if state_size else RolloutBuffer(*args, **kw)
            )
            self.buffers[key] = buf
        return buf

    def learn(self, agent: OnPolicyAlgorithm, run: Run, num_steps: int) -> dict[str, float]:
        env = run.env
        n = env.num_envs
        obs, _ = env.reset(seed=episode_seed(run.seed, agent.index, agent.steps))
        valid = np.ones(n, dtype=bool)
        episodes = EpisodeReturns(n)
        stats: dict[str, float] = {}
        # Recurrent policies: one hidden state per env, from zero (every learn() starts new episodes).
        rec = recurrent(agent)
        state = rec.initial_hidden_state(n) if rec is not None else None
        for steps in rollout_plan(num_steps, agent.learn_step, n):
            buf = self.rollout_buffer(agent, steps, n, obs)
            for t in range(steps):
                if rec is None:
                    action, log_prob, value = agent.act(agent.obs_tensor(obs))
                else:
                    assert state is not None
                    buf.hidden[t] = state.cpu().numpy()  # type: ignore[attr-defined]  # the state it acts from
                    action, log_prob, value, state = rec.act_recurrent(agent.obs_tensor(obs), state)
                    # An auto-reset step returns the next episode's first observation: start it from zero.
                    state = reset_rows(state, ~valid)
                buf.add(t, obs, action, log_prob, value, 0.0, 0.0, 0.0, valid)
                obs, reward, terminated, truncated, _ = env.step(agent.env_action(action))
                done = terminated | truncated
                buf.rewards[t] = reward
                buf.terminated[t] = terminated
                buf.dones[t] = done
                episodes.step(reward, done, valid)
                valid = ~done  # a finished sub-env spends its next step auto-resetting
            obs_t = agent.obs_tensor(obs)
            last_value = agent.value(obs_t) if rec is None else rec.value_recurrent(obs_t, state)
            buf.compute_returns_and_advantages(last_value, valid, agent.gamma, agent.gae_lambda)
            stats = dict(agent.learn(buf))
            agent.steps += steps * n
            agent.vec_steps += steps
            if rec is not None:
                rec.hidden_state = state
        return {**stats, **episodes.row()}


def recurrent(agent: OnPolicyAlgorithm) -> RecurrentOnPolicyAlgorithm | None:
    """``agent`` if its policy carries a hidden state (recurrent PPO), else None."""
    return agent if getattr(agent, "recurrent", False) else None  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# Off-policy
# --------------------------------------------------------------------------------------------------


class OffPolicyStrategy(ReplayState, GymStrategy):
    """Act, store in the shared replay buffer, and update every ``learn_step`` env steps."""

    regime = "off_policy"
    algorithm_protocol = OFF_POLICY

    @property
    def buffer(self) -> ReplayBuffer | None:
        """The population's replay buffer (``memory``)."""
        return self.memory  # type: ignore[no-any-return]

    def setup(self, run: Run) -> None:
        m = run.manifest
        rb = m.replay_buffer
        if rb is None:
            log.info("no replay_buffer section: using a 100,000-transition buffer")
        max_size = rb.max_size if rb is not None else 100_000
        # Rewards and done flags are stored as float32 so a sampled batch needs no conversion.
        dtypes = {"reward": np.float32, "done": np.float32}
        self.replay = ReplaySettings.from_manifest(m)  # prioritized replay / n-step returns
        self.init_replay(self.replay.make_buffer(max_size, device=run.device, seed=run.seed, dtypes=dtypes), run.seed)
        run.extras["memory"] = self.memory
        t = m.training
        for agent in run.population:
            agent.init_exploration(t)

    def after_selection(self, run: Run, population: list[Any]) -> None:
        for agent in population:
            agent.init_exploration(run.manifest.training)

    def learn(self, agent: OffPolicyAlgorithm, run: Run, num_steps: int) -> dict[str, float]:
        buf: ReplayBuffer = self.memory
        env, rng = run.env, self.rng
        n = env.num_envs
        schedule = UpdateSchedule(agent.learn_step, n, run.manifest.training.learning_delay or 0, agent.batch_size)
        obs, _ = env.reset(seed=episode_seed(run.seed, agent.index, agent.steps))
        agent.reset_noise(None)
        fresh = np.zeros(n, dtype=bool)  # sub-envs whose next step is an auto-reset
        episodes = EpisodeReturns(n)
        stats: dict[str, Any] = {}
        nstep = self.replay.collector(agent.gamma)
        per = isinstance(buf, PrioritizedReplayBuffer)
        max_steps = run.manifest.training.max_steps
        for _ in range(max(1, -(-num_steps // n))):
            stored_action, env_action = agent.explore(obs, rng, warmup=schedule.warming_up(agent.steps))
            next_obs, reward, terminated, truncated, _ = env.step(env_action)
            keep = ~fresh
            if nstep is None:
                buf.add(mask=keep, obs=obs, action=stored_action, reward=reward, next_obs=next_obs, done=terminated)
            else:
                rows = nstep.step(obs, stored_action, reward, next_obs, terminated, truncated, keep)
                if rows is not None:
                    buf.add(**rows)
            done = terminated | truncated
            episodes.step(reward, done, keep)
            agent.end_step(done)
            fresh = done
            obs = next_obs
            agent.steps += n
            agent.vec_steps += 1
            due = schedule.due(agent.vec_steps, agent.steps, len(buf))
            if due:
                if per:  # one batch at a time (priorities change after every step); beta from the step count
                    beta = annealed_beta(getattr(agent, "beta", 0.4), agent.steps, max_steps)
                    sample = partial(buf.sample, beta=beta)
                    learn = with_priority_update(agent.learn, buf)
                    stats = {**gradient_steps(due, sample, learn, agent.batch_size), "beta": beta}
                else:
                    stats = gradient_steps(due, buf.sample, agent.learn, agent.batch_size, buf.sample_many)
        if nstep is not None:  # the next learn call starts new episodes: end these windows (bootstrapped)
            rows = nstep.flush(obs)
            if rows is not None:
                buf.add(**rows)
        return {**{k: float(v) for k, v in stats.items()}, **agent.exploration_stats(), **episodes.row()}
