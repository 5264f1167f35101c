"""The off-policy engine: collection, the learn loop, and what DQN, DDPG, TD3, MADDPG and MATD3 share.

As Stable-Baselines3's ``OffPolicyAlgorithm``: the engine acts, steps the env, stores transitions
in the replay buffer and runs gradient steps on the schedule; the algorithm owns only its loss,
networks and exploration (``explore``/``get_actions``). Two env APIs, one schedule:

* :class:`OffPolicyEngine` — a gymnasium vector env and an
  :class:`~agilerl_plugin_gym.protocols.OffPolicyAlgorithm` (DQN, RainbowDQN, DDPG, TD3), with
  prioritized replay and n-step returns (:mod:`.replay_per`) when the manifest asks for them;
* :class:`MultiAgentOffPolicyEngine` — a PettingZoo vector env and a
  :class:`~agilerl_plugin_gym.protocols.MultiAgentOffPolicyAlgorithm` (MADDPG, MATD3): a copy that
  reset in a step stores the episode's last observation, an agent that did not act a terminal no-op.

Their parts:

* :class:`~agilerl_plugin_gym.networks.targets.TargetSync` — target networks that track online
  ones (re-exported from :mod:`agilerl_plugin_gym.networks.targets`).
* :class:`ExplorationNoise` — Gaussian or Ornstein-Uhlenbeck action noise, one row per sub-env,
  drawn from a generator the caller owns (never the global ``np.random``), reset per sub-env at
  episode end.
* :class:`UpdateSchedule` — when gradient steps run: after ``learning_delay`` env steps of the
  agent and once the buffer holds a batch, at AgileRL's ``learn_step`` rate (env steps over all
  sub-envs per gradient step), counted on the agent's persistent vector-step counter so a resumed
  run updates on the very same steps.
* :func:`gradient_steps` — sample from a replay buffer and call ``agent.learn`` as often as the
  schedule says (several batches of one env step in one draw).
* :class:`ReplayState` — the population's replay buffer and exploration generator, which the
  strategies keep and checkpoint and pass to the engines.

The strategies make the env, derive each ``learn`` call's reset seed
(:func:`~agilerl_plugin_gym.engine.common.episode_seed`) and hand both to an engine; the engines
import no strategy or algorithm, only the public algorithm protocol
(:mod:`agilerl_plugin_gym.protocols`). The replay buffer itself is
:class:`agilerl_plugin_gym.buffers.ReplayBuffer` (its sampling RNG is checkpointed with it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from agilerl.errors import AgileRLError
from agilerl.training.heap import HeapTrimmer
from agilerl_plugin_gym import fast
from agilerl_plugin_gym.buffers import numpy_rng_state, set_numpy_rng_state
from agilerl_plugin_gym.engine.common import EpisodeReturns, env_rows, episode_scores
from agilerl_plugin_gym.engine.replay_per import (
    PrioritizedReplayBuffer,
    ReplaySettings,
    annealed_beta,
    with_priority_update,
)
from agilerl_plugin_gym.her import HerReplayBuffer
from agilerl_plugin_gym.masking import MaskSource, check_masking, strip_mask_key
from agilerl_plugin_gym.networks.targets import TargetSync, lerp_params
from agilerl_plugin_gym.normalization import agent_normalizer

if TYPE_CHECKING:
    from agilerl_plugin_gym.buffers import ReplayBuffer
    from agilerl_plugin_gym.multi_agent.buffer import MultiAgentReplayBuffer
    from agilerl_plugin_gym.protocols import MultiAgentOffPolicyAlgorithm, OffPolicyAlgorithm

__all__ = [
    "ExplorationNoise",
    "MultiAgentOffPolicyEngine",
    "OffPolicyEngine",
    "ReplayState",
    "TargetSync",
    "UpdateSchedule",
    "gradient_steps",
    "lerp_params",
]


@dataclass
class NoiseSettings:
    """The exploration-noise hyperparameters (read from the algorithm each step: HPO may mutate them)."""

    ou: bool
    scale: float
    mean: float = 0.0
    theta: float = 0.15
    dt: float = 0.01


class ExplorationNoise:
    """Additive action noise with one row of state per sub-env.

    Gaussian: ``N(mean, scale)``. Ornstein-Uhlenbeck:
    ``x <- x + theta (mean - x) dt + scale sqrt(dt) N(0, 1)``, temporally correlated, which explores
    better in momentum-driven physics. The state of a sub-env is zeroed when its episode ends
    (:meth:`reset`). Random numbers come from the ``rng`` passed to :meth:`sample` (a seeded,
    checkpointed generator owned by the strategy), so a resumed run draws the same noise.
    """

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self.state = np.zeros((0, self.dim))

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Zero the OU state of the sub-envs in ``mask`` (all when None)."""
        if mask is None:
            self.state = np.zeros((0, self.dim))
        elif self.state.shape[0] == mask.shape[0]:
            self.state[mask] = 0.0

    def sample(self, n: int, rng: np.random.Generator, s: NoiseSettings) -> np.ndarray:
        """Noise for ``n`` sub-envs, shape ``(n, dim)``."""
        if not s.ou:
            return s.mean + s.scale * rng.standard_normal((n, self.dim))
        if self.state.shape[0] != n:
            self.state = np.zeros((n, self.dim))
        self.state += s.theta * (s.mean - self.state) * s.dt + s.scale * math.sqrt(s.dt) * rng.standard_normal(
            (n, self.dim)
        )
        return self.state


class UpdateSchedule:
    """When gradient steps run, with AgileRL's meaning of ``learn_step``.

    ``learn_step`` counts env steps over all sub-envs: at or above ``num_envs`` one update runs
    every ``learn_step // num_envs`` vector steps, below it ``num_envs // learn_step`` run per vector
    step (the same update-to-data ratio as AgileRL, so hyperparameters carry over).

    ``burst`` (DQN's ``update_burst``, SB3's ``gradient_steps``) takes the updates in bursts at the
    same ratio: ``burst`` of them every ``learn_step * burst`` env steps (at least one vector step).
    """

    def __init__(self, learn_step: int, num_envs: int, learning_delay: int, batch_size: int, burst: int = 1) -> None:
        self.learn_step, self.num_envs = int(learn_step), int(num_envs)
        self.learning_delay, self.batch_size = int(learning_delay), int(batch_size)
        self.burst = int(burst)

    def warming_up(self, agent_steps: int) -> bool:
        """True while the agent has taken fewer than ``learning_delay`` env steps."""
        return agent_steps < self.learning_delay

    def due(self, vec_steps: int, agent_steps: int, buffer_size: int) -> int:
        """Gradient steps to run after the agent's ``vec_steps``-th vector step (counted from 1)."""
        if self.warming_up(agent_steps) or buffer_size < self.batch_size:
            return 0
        if self.burst > 1:
            period = max(1, self.learn_step * self.burst // self.num_envs)  # vector steps per burst
            return period * self.num_envs // self.learn_step if vec_steps % period == 0 else 0
        if self.learn_step >= self.num_envs:
            return 1 if vec_steps % (self.learn_step // self.num_envs) == 0 else 0
        return self.num_envs // self.learn_step


def gradient_steps(
    count: int,
    sample: Callable[[int], Any],
    learn: Callable[[Any], Mapping[str, Any]],
    batch_size: int,
    sample_many: Callable[[int, int], Iterable[Any]] | None = None,
    *,
    record: bool = False,
) -> Mapping[str, Any]:
    """Run ``count`` gradient steps on fresh batches.

    Returns the last step's stats (the mapping ``learn`` returned, read or not:
    :class:`~agilerl_plugin_gym.engine.common.LazyStats` computes only what is read), or with
    ``record`` every step's (``{name: [value, ...]}``). ``sample_many`` (when given) draws all
    batches of one env step in a single gather.
    """
    batches: Iterable[Any]
    if count > 1 and sample_many is not None:
        batches = sample_many(batch_size, count)
    else:
        batches = (sample(batch_size) for _ in range(count))
    stats: Mapping[str, Any] = {}
    recorded: dict[str, list[Any]] = {}
    for batch in batches:
        step = learn(batch)
        if record:
            for k, v in step.items():
                recorded.setdefault(k, []).append(v)
        else:
            stats = step
    return recorded if record else stats


class ReplayState:
    """What an off-policy strategy keeps for the whole population, checkpointed with the run.

    ``memory`` is the shared replay buffer (AgileRL's experience sharing; its sampling RNG is part
    of its state) and ``rng`` the exploration generator (epsilon draws, action noise), seeded
    from the run seed. Strategies inherit this, call :meth:`init_replay` in ``setup`` and pass
    both to the engine's ``learn``.
    """

    memory: Any = None
    rng: np.random.Generator = np.random.default_rng()

    def init_replay(self, memory: Any, run_seed: int | None) -> None:
        self.memory = memory
        self.rng = np.random.default_rng(None if run_seed is None else run_seed + 1)

    def state_dict(self) -> dict[str, Any]:
        if self.memory is None:
            return {}
        return {"memory": self.memory.state_dict(), "rng": numpy_rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        memory = state.get("memory", state.get("buffer"))  # "buffer": single-agent checkpoints before the engines
        if self.memory is not None and memory is not None:
            self.memory.load_state_dict(memory)
        if "rng" in state:
            set_numpy_rng_state(self.rng, state["rng"])


class OffPolicyEngine:
    """Act, store, update on a gymnasium vector env (see the module docstring).

    :param replay: prioritized replay / n-step returns (:class:`~.replay_per.ReplaySettings`).
    :param learning_delay: env steps of an agent before its first gradient step.
    :param max_steps: the run's step budget (prioritized replay anneals ``beta`` to 1 over it).

    Gymnasium 1.x vector envs auto-reset on the *next* step: after a sub-env's episode ends, its
    next ``step`` ignores the action and returns the reset observation with reward 0; that
    transition is not stored.
    """

    def __init__(self, replay: ReplaySettings, learning_delay: int, max_steps: int | None) -> None:
        self.replay = replay
        self.learning_delay = learning_delay
        self.max_steps = max_steps

    def learn(
        self,
        agent: OffPolicyAlgorithm,
        env: Any,
        buf: ReplayBuffer,
        rng: np.random.Generator,
        num_steps: int,
        seed: int | None,
    ) -> dict[str, float]:
        """Collect ``num_steps`` env steps into ``buf`` from ``env.reset(seed=seed)``, updating as
        the schedule says; the last update's stats, the exploration stats and the training
        episodes' returns."""
        n = env.num_envs
        burst = getattr(agent.spec, "update_burst", 1)  # DQN's; the other algorithms spread their updates
        schedule = UpdateSchedule(agent.spec.learn_step, n, self.learning_delay, agent.spec.batch_size, burst)
        obs, info = env.reset(seed=seed)
        # Action masks (masking.py): read when the algorithm asks for them, an error when it does not.
        source = MaskSource.of(env, obs, info)
        masking = bool(getattr(agent.spec, "action_masking", False))
        supported = "action_masking" in getattr(type(agent.spec), "model_fields", {})
        check_masking(source, masking, type(agent).__name__, supported=supported)
        action_mask = source.read(env, obs, info)
        obs = strip_mask_key(obs)
        # environment.normalize: the agent acts on normalised observations; the shared buffer keeps
        # raw transitions and each sampled batch is normalised with this agent's statistics.
        norm = agent_normalizer(agent)
        net_obs = obs
        if norm is not None:
            norm.start_episodes(n)
            net_obs = norm.train_obs(obs)
        agent.reset_noise(None)
        fresh = np.zeros(n, dtype=bool)  # sub-envs whose next step is an auto-reset
        episodes = EpisodeReturns(n)
        stats: Mapping[str, Any] = {}
        nstep = self.replay.collector(agent.spec.gamma)
        if masking and nstep is not None and nstep.one_step:
            raise AgileRLError("algorithm.action_masking: not supported with combined_reward yet")
        per = buf if isinstance(buf, PrioritizedReplayBuffer) else None
        her = buf if isinstance(buf, HerReplayBuffer) else None  # stores whole episodes, relabels goals
        max_steps = self.max_steps
        # The fast room's explore and learn where the networks qualify (agilerl_plugin_gym.fast).
        explore = fast.select(agent, "explore") or agent.explore
        agent_learn = fast.select(agent, "learn") or agent.learn
        # environment.normalize: each raw replay batch normalised before the (fast or autograd) update.
        learn_fn = agent_learn if norm is None else norm.wrap_learn(agent_learn)
        if masking and her is not None:
            raise AgileRLError("algorithm.action_masking: not supported with HER (replay_buffer.her) yet")
        heap = HeapTrimmer()  # the updates' freed tensors fragment the C heap: its free pages go back
        for _ in range(max(1, -(-num_steps // n))):
            masks = {} if action_mask is None else {"action_mask": action_mask}
            stored_action, env_action = explore(net_obs, rng, warmup=schedule.warming_up(agent.steps), **masks)
            next_obs, reward, terminated, truncated, info = env.step(env_action)
            action_mask = source.read(env, next_obs, info)  # the next state's: the bootstrap's choices
            next_obs = strip_mask_key(next_obs)
            if norm is not None:  # the return statistics (rewards are scaled when sampled)
                norm.train_reward(reward, terminated | truncated)
            keep = ~fresh
            if her is not None:
                her.add_step(obs=obs, action=stored_action, reward=reward, next_obs=next_obs,
                             terminated=terminated, truncated=truncated, keep=keep)  # fmt: skip
            elif nstep is None:
                stored = {} if action_mask is None else {"next_action_mask": action_mask}
                buf.add(mask=keep, obs=obs, action=stored_action, reward=reward, next_obs=next_obs, done=terminated,
                        **stored)  # fmt: skip
            else:
                rows = nstep.step(obs, stored_action, reward, next_obs, terminated, truncated, keep, action_mask)
                if rows is not None:
                    buf.add(**rows)
            done = terminated | truncated
            episodes.step(reward, done, keep)
            agent.end_step(done)
            fresh = done
            obs = next_obs
            net_obs = obs if norm is None else norm.train_obs(obs)
            agent.steps += n
            agent.vec_steps += 1
            due = schedule.due(agent.vec_steps, agent.steps, len(buf))
            if due:
                if per is not None:  # one batch at a time (priorities change after each); beta from the steps
                    beta = annealed_beta(getattr(agent.spec, "beta", 0.4), agent.steps, max_steps)
                    sample = partial(per.sample, beta=beta)
                    learn = with_priority_update(learn_fn, per)
                    stats = {**gradient_steps(due, sample, learn, agent.spec.batch_size), "beta": beta}
                else:
                    stats = gradient_steps(due, buf.sample, learn_fn, agent.spec.batch_size, buf.sample_many)
                heap.tick()
        if her is not None:  # the next learn call starts new episodes: store these as they are
            her.close_episodes()
        if nstep is not None:  # the next learn call starts new episodes: end these windows (bootstrapped)
            rows = nstep.flush(obs, action_mask)
            if rows is not None:
                buf.add(**rows)
        return {**{k: float(v) for k, v in stats.items()}, **agent.exploration_stats(), **episodes.row()}


class MultiAgentOffPolicyEngine:
    """Act, store, update on a PettingZoo vector env (MADDPG, MATD3; see the module docstring).

    :param learning_delay: env steps of an agent before its first gradient step.

    A PettingZoo vector env resets a finished copy in the same step and reports ``final_obs``,
    ``acted`` and ``episode_done``: the stored transition ends in the episode's last observation,
    and an agent that did not act (it left the episode early) stores a terminal no-op.
    """

    def __init__(self, learning_delay: int) -> None:
        self.learning_delay = learning_delay

    def learn(
        self,
        agent: MultiAgentOffPolicyAlgorithm,
        env: Any,
        memory: MultiAgentReplayBuffer,
        rng: np.random.Generator,
        num_steps: int,
        seed: int | None,
    ) -> dict[str, float]:
        """Collect ``num_steps`` env steps into ``memory`` from ``env.reset(seed=seed)``, updating
        as the schedule says; the mean of the updates' stats and the training episodes' scores."""
        n = env.num_envs
        schedule = UpdateSchedule(agent.spec.learn_step, n, self.learning_delay, agent.spec.batch_size)
        obs, _ = env.reset(seed=seed)
        agent.check_masks(env.mask_kind)  # a masked env is refused: these actors do not mask
        agent.reset_noise(n)
        episodes = EpisodeReturns(n, key="train_score")
        losses: dict[str, list[float]] = {}
        heap = HeapTrimmer()  # as the single-agent engine's
        for _ in range(max(1, -(-num_steps // n))):
            env_actions, stored = agent.get_actions(obs, explore=True, rng=rng)
            next_obs, rewards, terms, _, infos = env.step(env_actions)
            episode_done = infos["episode_done"]
            store_next = next_obs
            if episode_done.any():
                # The copy was reset in this step: its transition ends in the episode's last observation.
                store_next = {
                    a: np.where(env_rows(episode_done, o), infos["final_obs"][a], o) for a, o in next_obs.items()
                }
            acted = infos["acted"]
            # An agent that did not act (it left the episode early) contributes a terminal no-op.
            dones = {a: (terms[a] | ~acted[a]).astype(np.float32) for a in agent.agent_ids}
            mask = np.any(np.stack([acted[a] for a in agent.agent_ids]), axis=0)
            memory.add(obs, stored, rewards, store_next, dones, mask=mask)
            episodes.step(episode_scores(agent, rewards), episode_done)
            obs = next_obs
            agent.steps += n
            agent.vec_steps += 1
            due = schedule.due(agent.vec_steps, agent.steps, len(memory))
            if due:
                stats = gradient_steps(due, memory.sample, agent.learn, agent.spec.batch_size, record=True)
                for k, v in stats.items():
                    losses.setdefault(k, []).extend(v)
                heap.tick()
        out = {k: float(np.mean(v)) for k, v in losses.items()}
        return {**out, **episodes.row()}
