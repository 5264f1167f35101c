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
* Off-policy runs keep one replay buffer for the whole population (AgileRL's experience sharing);
  it and the exploration RNG are in :meth:`OffPolicyStrategy.state_dict`, so resume continues
  with the same buffer contents and random stream.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from agilerl.errors import AgileRLError
from agilerl.strategies import TrainingStrategy
from agilerl_plugin_gym.buffers import ReplayBuffer, RolloutBuffer, numpy_rng_state, set_numpy_rng_state
from agilerl_plugin_gym.envs import make_gym_env

if TYPE_CHECKING:
    from agilerl.models import TrainingManifest
    from agilerl.training.run import Run

log = logging.getLogger(__name__)

#: Evaluation uses at most this many parallel episodes (one sync vector env, no worker processes).
MAX_EVAL_ENVS = 10


def _episode_seed(run: Run, agent: Any) -> int | None:
    if run.seed is None:
        return None
    return (run.seed * 1_000_003 + agent.index * 7_919 + agent.steps) % (2**31 - 1)


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


class _EpisodeStats:
    """Returns of episodes finished during a ``learn`` call (for the metrics row)."""

    def __init__(self, n: int) -> None:
        self.running = np.zeros(n)
        self.finished: list[float] = []

    def step(self, reward: np.ndarray, done: np.ndarray, valid: np.ndarray) -> None:
        self.running += reward * valid
        if done.any():
            self.finished.extend(self.running[done].tolist())
            self.running[done] = 0.0

    def row(self) -> dict[str, float]:
        if not self.finished:
            return {}
        return {"train_return": float(np.mean(self.finished)), "train_episodes": float(len(self.finished))}


# --------------------------------------------------------------------------------------------------
# On-policy
# --------------------------------------------------------------------------------------------------


class OnPolicyStrategy(GymStrategy):
    """Rollouts of ``learn_step`` env steps (``learn_step // num_envs`` vector steps), then a PPO update."""

    regime = "on_policy"
    #: Every learn() resets the env from a seed of its own and uses no shared buffer.
    independent_members = True

    def _rollout_buffer(self, agent: Any, steps: int, n: int, obs: np.ndarray) -> RolloutBuffer:
        cached = getattr(agent, "_cache_rollout", None)
        if cached is not None and cached.num_steps == steps and cached.num_envs == n:
            return cached  # type: ignore[no-any-return]
        action_shape = () if agent.kind == "discrete" else tuple(agent.action_space.shape)
        action_dtype = np.float32 if agent.kind == "continuous" else np.int64
        obs_dtype = np.asarray(obs).dtype
        buf = RolloutBuffer(
            steps,
            n,
            tuple(obs.shape[1:]),
            action_shape,
            obs_dtype=obs_dtype,
            action_dtype=action_dtype,
            device=agent.device,
        )
        agent._cache_rollout = buf
        return buf

    def learn(self, agent: Any, run: Run, num_steps: int) -> dict[str, float]:
        env = run.env
        n = env.num_envs
        steps = max(1, agent.learn_step // n)
        rollouts = max(1, math.ceil(num_steps / (steps * n)))
        obs, _ = env.reset(seed=_episode_seed(run, agent))
        buf = self._rollout_buffer(agent, steps, n, obs)
        valid = np.ones(n, dtype=bool)
        episodes = _EpisodeStats(n)
        stats: dict[str, float] = {}
        for _ in range(rollouts):
            for t in range(steps):
                action, log_prob, value = agent.act(agent.obs_tensor(obs))
                buf.add(t, obs, action, log_prob, value, 0.0, 0.0, 0.0, valid)
                obs, reward, terminated, truncated, _ = env.step(agent.env_action(action))
                done = terminated | truncated
                buf.rewards[t] = reward
                buf.terminated[t] = terminated
                buf.dones[t] = done
                episodes.step(reward, done, valid)
                valid = ~done  # a finished sub-env spends its next step auto-resetting
            last_value = agent.value(agent.obs_tensor(obs))
            buf.compute_returns_and_advantages(last_value, valid, agent.gamma, agent.gae_lambda)
            stats = agent.learn(buf)
            agent.steps += steps * n
        return {**stats, **episodes.row()}


# --------------------------------------------------------------------------------------------------
# Off-policy
# --------------------------------------------------------------------------------------------------


class OffPolicyStrategy(GymStrategy):
    """Act, store in the shared replay buffer, and update every ``learn_step`` env steps."""

    regime = "off_policy"

    def __init__(self) -> None:
        self.buffer: ReplayBuffer | None = None
        self.rng = np.random.default_rng()

    def setup(self, run: Run) -> None:
        m = run.manifest
        rb = m.replay_buffer
        if rb is None:
            log.info("no replay_buffer section: using a 100,000-transition buffer")
        elif rb.per_buffer or rb.n_step_buffer:
            raise AgileRLError("replay_buffer: per_buffer and n_step_buffer are not supported by this plugin yet")
        max_size = rb.max_size if rb is not None else 100_000
        # Rewards and done flags are stored as float32 so a sampled batch needs no conversion.
        dtypes = {"reward": np.float32, "done": np.float32}
        self.buffer = ReplayBuffer(max_size, device=run.device, seed=run.seed, dtypes=dtypes)
        self.rng = np.random.default_rng(None if run.seed is None else run.seed + 1)
        run.extras["memory"] = self.buffer
        t = m.training
        for agent in run.population:
            agent.init_exploration(t)

    def after_selection(self, run: Run, population: list[Any]) -> None:
        for agent in population:
            agent.init_exploration(run.manifest.training)

    def state_dict(self) -> dict[str, Any]:
        assert self.buffer is not None
        return {"buffer": self.buffer.state_dict(), "rng": numpy_rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            return
        assert self.buffer is not None
        self.buffer.load_state_dict(state["buffer"])
        set_numpy_rng_state(self.rng, state["rng"])

    def learn(self, agent: Any, run: Run, num_steps: int) -> dict[str, float]:
        assert self.buffer is not None
        env, buf, rng = run.env, self.buffer, self.rng
        n = env.num_envs
        delay = run.manifest.training.learning_delay or 0
        # learn_step env steps per gradient step: below num_envs that is several per vector step.
        if agent.learn_step >= n:
            every, per_step = agent.learn_step // n, 1
        else:
            every, per_step = 1, n // agent.learn_step
        obs, _ = env.reset(seed=_episode_seed(run, agent))
        agent.reset_noise(None)
        fresh = np.zeros(n, dtype=bool)  # sub-envs whose next step is an auto-reset
        episodes = _EpisodeStats(n)
        stats: dict[str, float] = {}
        for i in range(max(1, math.ceil(num_steps / n))):
            warmup = agent.steps < delay
            stored_action, env_action = agent.explore(obs, rng, warmup=warmup)
            next_obs, reward, terminated, truncated, _ = env.step(env_action)
            keep = ~fresh
            buf.add(mask=keep, obs=obs, action=stored_action, reward=reward, next_obs=next_obs, done=terminated)
            done = terminated | truncated
            episodes.step(reward, done, keep)
            agent.end_step(done)
            fresh = done
            obs = next_obs
            agent.steps += n
            if not warmup and len(buf) >= agent.batch_size and i % every == 0:
                if per_step == 1:
                    stats = agent.learn(buf.sample(agent.batch_size))
                else:  # all batches of this env step in one draw and gather
                    for batch in buf.sample_many(agent.batch_size, per_step):
                        stats = agent.learn(batch)
        return {**{k: float(v) for k, v in stats.items()}, **agent.exploration_stats(), **episodes.row()}
