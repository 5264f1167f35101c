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
* On-policy collection (rollouts, recurrent hidden states, GAE) is the on-policy engine's
  (:class:`~agilerl_plugin_gym.engine.on_policy.OnPolicyEngine`); the strategy passes it the env
  and the seed.
* Off-policy collection (act, store, update on the schedule; prioritized replay, n-step returns) is
  the off-policy engine's (:class:`~agilerl_plugin_gym.engine.off_policy.OffPolicyEngine`); the
  strategy keeps one replay buffer for the whole population (AgileRL's experience sharing) and the
  exploration RNG, both in its ``state_dict``
  (:class:`~agilerl_plugin_gym.engine.off_policy.ReplayState`), so resume continues with the same
  buffer contents and random stream, and passes them to the engine with the env and the seed.
* Every ``learn`` call runs with denormal floats flushed to zero (:mod:`agilerl_plugin_gym.denormals`:
  Adam moments stuck in the denormal range made DQN's updates up to 2x slower on x86).

GAE, the update schedule, target updates and noise are the engines' (:mod:`agilerl_plugin_gym.engine`),
the PPO update is PPO's (:mod:`agilerl_plugin_gym.ppo_update`); the algorithms are reached only through
:mod:`agilerl_plugin_gym.protocols`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from agilerl.strategies import TrainingStrategy
from agilerl_plugin_gym.buffers import ReplayBuffer
from agilerl_plugin_gym.denormals import flush_denormals
from agilerl_plugin_gym.engine.common import episode_seed
from agilerl_plugin_gym.engine.evaluation import evaluate_bounded
from agilerl_plugin_gym.engine.off_policy import OffPolicyEngine, ReplayState
from agilerl_plugin_gym.engine.on_policy import OnPolicyEngine
from agilerl_plugin_gym.engine.replay_per import ReplaySettings
from agilerl_plugin_gym.envs import make_gym_env
from agilerl_plugin_gym.her import HerReplayBuffer, HerSettings, goal_reward_function
from agilerl_plugin_gym.protocols import OFF_POLICY, ON_POLICY
from agilerl_plugin_gym.sections.training import rl_training

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest
    from agilerl.training.run import Run
    from agilerl_plugin_gym.protocols import OffPolicyAlgorithm, OnPolicyAlgorithm

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
        return evaluate_bounded(agent, run, vars(self).setdefault("eval_cap_said", set()))


# --------------------------------------------------------------------------------------------------
# On-policy
# --------------------------------------------------------------------------------------------------


class OnPolicyStrategy(GymStrategy):
    """On-policy training on the on-policy engine (:class:`~agilerl_plugin_gym.engine.on_policy.OnPolicyEngine`).

    Any :class:`~agilerl_plugin_gym.protocols.OnPolicyAlgorithm` (PPO, or a plugin's A2C) trains here.
    """

    regime = "on_policy"
    algorithm_protocol = ON_POLICY
    #: Every learn() resets the env from a seed of its own and uses no shared buffer.
    independent_members = True

    def __init__(self) -> None:
        self.engine = OnPolicyEngine()

    def learn(self, agent: OnPolicyAlgorithm, run: Run, num_steps: int) -> dict[str, float]:
        with flush_denormals():
            return self.engine.learn(agent, run.env, num_steps, episode_seed(run.seed, agent.index, agent.steps))


# --------------------------------------------------------------------------------------------------
# Off-policy
# --------------------------------------------------------------------------------------------------


class OffPolicyStrategy(ReplayState, GymStrategy):
    """Off-policy training on the off-policy engine (:class:`~agilerl_plugin_gym.engine.off_policy.OffPolicyEngine`:
    act, store in the shared replay buffer, update every ``learn_step`` env steps).

    Any :class:`~agilerl_plugin_gym.protocols.OffPolicyAlgorithm` (DQN, RainbowDQN, DDPG, TD3) trains here.
    """

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
        replay = ReplaySettings.from_manifest(m)  # prioritized replay / n-step returns
        her = HerSettings.from_manifest(m)  # hindsight experience replay (goal-conditioned envs)
        if her is not None:
            memory: Any = HerReplayBuffer(
                max_size, compute_reward=goal_reward_function(m.environment), settings=her,
                device=run.device, seed=run.seed, dtypes=dtypes,
            )  # fmt: skip
        else:
            memory = replay.make_buffer(max_size, device=run.device, seed=run.seed, dtypes=dtypes)
        self.init_replay(memory, run.seed)
        run.extras["memory"] = self.memory
        self.engine = OffPolicyEngine(replay, rl_training(m).learning_delay or 0, m.training.max_steps)
        t = m.training
        for agent in run.population:
            agent.init_exploration(t)

    def after_selection(self, run: Run, population: list[Any]) -> None:
        for agent in population:
            agent.init_exploration(run.manifest.training)

    def learn(self, agent: OffPolicyAlgorithm, run: Run, num_steps: int) -> dict[str, float]:
        seed = episode_seed(run.seed, agent.index, agent.steps)
        with flush_denormals():
            return self.engine.learn(agent, run.env, self.memory, self.rng, num_steps, seed)
