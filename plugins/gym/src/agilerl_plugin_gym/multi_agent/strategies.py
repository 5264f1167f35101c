"""Strategies ``multi_agent/on_policy`` (IPPO) and ``multi_agent/off_policy`` (MADDPG, MATD3).

Both plug into the core's evolutionary loop: ``learn`` trains one population member for a number of
env steps on the shared vectorised env (counting every env copy's step, as AgileRL does), and
``evaluate`` runs the member deterministically on a separate in-process eval env, reset with a
fixed seed. The off-policy strategy keeps one replay buffer for the whole population (AgileRL's
experience sharing) and the exploration generator, both checkpointed. Every ``learn`` call resets
the env with a seed derived from checkpointed state (``engine.common.episode_seed``), so a resumed
run continues exactly. The training logic is the engines' (:mod:`agilerl_plugin_gym.engine`);
only the PettingZoo env loop is here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from agilerl.strategies import TrainingStrategy
from agilerl_plugin_gym.buffers import RolloutBuffer
from agilerl_plugin_gym.engine.common import EpisodeReturns, episode_seed
from agilerl_plugin_gym.engine.off_policy import ReplayState, UpdateSchedule, gradient_steps
from agilerl_plugin_gym.engine.on_policy import rollout_plan
from agilerl_plugin_gym.multi_agent.buffer import MultiAgentReplayBuffer
from agilerl_plugin_gym.multi_agent.vec_env import PettingZooEnvError, PettingZooVecEnv, make_pz_env
from agilerl_plugin_gym.protocols import MULTI_AGENT_OFF_POLICY, MULTI_AGENT_ON_POLICY

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest
    from agilerl.training.run import Run
    from agilerl_plugin_gym.protocols import MultiAgentOffPolicyAlgorithm, MultiAgentOnPolicyAlgorithm

#: Eval env copies at most (each eval round runs every copy to the end of one episode).
EVAL_ENVS = 8
DEFAULT_BUFFER_SIZE = 100_000


class MultiAgentStrategy(TrainingStrategy):
    """Env creation, seeded evaluation and shutdown shared by both multi-agent regimes."""

    paradigm = "multi_agent"

    def make_env(self, manifest: TrainingManifest, *, seed: int | None) -> PettingZooVecEnv:
        env = manifest.environment
        if env.env_type != "gym":
            raise PettingZooEnvError(f"multi-agent algorithms need env_type 'gym' (PettingZoo); got {env.env_type!r}")
        return make_pz_env(env)

    def make_eval_env(self, manifest: TrainingManifest, *, seed: int | None, train_env: Any) -> PettingZooVecEnv:
        n = min(int(getattr(manifest.environment, "num_envs", 1)), EVAL_ENVS)
        return make_pz_env(manifest.environment, sync=True, num_envs=n)

    def evaluate(self, agent: Any, run: Run) -> float:
        # Seeded per evaluation (not a continuing env stream), so a resumed run evaluates alike.
        t = run.manifest.training
        seed = None if run.seed is None else run.seed + 10_000
        return float(agent.test(run.eval_env, max_steps=t.eval_steps, loop=t.eval_loop, seed=seed))

    def close(self, run: Run) -> None:
        for env in {id(run.env): run.env, id(run.eval_env): run.eval_env}.values():
            if env is not None:
                env.close()


def _scores(agent: Any, rewards: dict[str, np.ndarray]) -> np.ndarray:
    """Per-copy score of one vector step's rewards (sum or mean over agents: ``sum_scores``)."""
    return agent.episode_score(np.stack([rewards[a] for a in agent.agent_ids], axis=1))  # type: ignore[no-any-return]


def _rows(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``mask`` (num_envs,) broadcastable against ``like`` (num_envs, ...)."""
    return mask.reshape((-1,) + (1,) * (like.ndim - 1))


class MultiAgentOffPolicyStrategy(ReplayState, MultiAgentStrategy):
    """Off-policy multi-agent training (MADDPG, MATD3) with a shared multi-agent replay buffer."""

    regime = "off_policy"
    algorithm_protocol = MULTI_AGENT_OFF_POLICY

    def setup(self, run: Run) -> None:
        rb = run.manifest.replay_buffer
        size = rb.max_size if rb is not None else DEFAULT_BUFFER_SIZE
        self.init_replay(
            MultiAgentReplayBuffer(size, run.env.possible_agents, device=run.device, seed=run.seed), run.seed
        )
        run.extras["memory"] = self.memory

    def learn(self, agent: MultiAgentOffPolicyAlgorithm, run: Run, num_steps: int) -> dict[str, float]:
        env: PettingZooVecEnv = run.env
        memory: MultiAgentReplayBuffer = self.memory
        n = env.num_envs
        schedule = UpdateSchedule(agent.learn_step, n, run.manifest.training.learning_delay or 0, agent.batch_size)
        obs, _ = env.reset(seed=episode_seed(run.seed, agent.index, agent.steps))
        agent.reset_noise(n)
        episodes = EpisodeReturns(n, key="train_score")
        losses: dict[str, list[float]] = {}
        for _ in range(max(1, -(-num_steps // n))):
            env_actions, stored = agent.get_actions(obs, explore=True, rng=self.rng)
            next_obs, rewards, terms, _, infos = env.step(env_actions)
            episode_done = infos["episode_done"]
            store_next = next_obs
            if episode_done.any():
                # The copy was reset in this step: its transition ends in the episode's last observation.
                store_next = {
                    a: np.where(_rows(episode_done, o), infos["final_obs"][a], o) for a, o in next_obs.items()
                }
            acted = infos["acted"]
            # An agent that did not act (it left the episode early) contributes a terminal no-op.
            dones = {a: (terms[a] | ~acted[a]).astype(np.float32) for a in agent.agent_ids}
            mask = np.any(np.stack([acted[a] for a in agent.agent_ids]), axis=0)
            memory.add(obs, stored, rewards, store_next, dones, mask=mask)
            episodes.step(_scores(agent, rewards), episode_done)
            obs = next_obs
            agent.steps += n
            agent.vec_steps += 1
            due = schedule.due(agent.vec_steps, agent.steps, len(memory))
            if due:
                stats = gradient_steps(due, memory.sample, agent.learn, agent.batch_size, record=True)
                for k, v in stats.items():
                    losses.setdefault(k, []).extend(v)
        out = {k: float(np.mean(v)) for k, v in losses.items()}
        return {**out, **episodes.row()}


class MultiAgentOnPolicyStrategy(MultiAgentStrategy):
    """On-policy multi-agent training (IPPO): collect ``learn_step`` env steps, update, repeat.

    Each agent's steps go to its own :class:`~agilerl_plugin_gym.buffers.RolloutBuffer` (the
    single-agent one); GAE and the PPO update are the on-policy engine's. An agent's row of a step
    is valid only where it acted; a trajectory cut without termination (time limit, or the episode
    ending around a live agent) is bootstrapped by adding ``gamma * V(last obs)`` to its reward, then
    treated as ended.
    """

    regime = "on_policy"
    algorithm_protocol = MULTI_AGENT_ON_POLICY

    def __init__(self) -> None:
        self.buffers: dict[tuple[Any, ...], RolloutBuffer] = {}

    def _buffer(self, agent_id: str, layout: Any, steps: int, obs: np.ndarray, device: Any) -> RolloutBuffer:
        key = (agent_id, steps, obs.shape, obs.dtype.str, layout, str(device))
        buf = self.buffers.get(key)
        if buf is None:
            buf = RolloutBuffer(
                steps, obs.shape[0], tuple(obs.shape[1:]), layout.action_shape,
                obs_dtype=obs.dtype, action_dtype=layout.action_dtype, device=device,
            )  # fmt: skip
            self.buffers[key] = buf
        return buf

    def learn(self, agent: MultiAgentOnPolicyAlgorithm, run: Run, num_steps: int) -> dict[str, float]:
        env: PettingZooVecEnv = run.env
        n = env.num_envs
        obs, _ = env.reset(seed=episode_seed(run.seed, agent.index, agent.steps))
        layouts = agent.rollout_layouts()
        episodes = EpisodeReturns(n, key="train_score")
        stats: dict[str, list[float]] = {}
        ids = agent.agent_ids
        for steps in rollout_plan(num_steps, agent.learn_step, n):
            bufs = {a: self._buffer(a, layouts[a], steps, np.asarray(obs[a]), agent.device) for a in ids}
            for t in range(steps):
                out, env_actions = agent.act_for_rollout(obs)
                for a in ids:
                    o = out[a]
                    bufs[a].add(t, obs[a], o["action"], o["log_prob"], o["value"], 0.0, 0.0, 0.0, 0.0)
                next_obs, rewards, terms, truncs, infos = env.step(env_actions)
                episode_done = infos["episode_done"]
                acted = infos["acted"]
                ended = {a: terms[a] | truncs[a] | episode_done for a in ids}
                cut = {a: acted[a] & ended[a] & ~terms[a] for a in ids}
                need = [a for a in ids if cut[a].any()]
                boot: dict[str, np.ndarray] = {}
                if need:
                    final = infos.get("final_obs")
                    last = {
                        a: next_obs[a] if final is None else np.where(_rows(episode_done, next_obs[a]), final[a], next_obs[a])
                        for a in need
                    }  # fmt: skip
                    boot = agent.values(last, need)
                for a in ids:
                    b = bufs[a]
                    reward = rewards[a].astype(np.float32)
                    if a in boot:
                        reward = reward + agent.gamma * boot[a] * cut[a]
                    b.rewards[t] = reward
                    stop = ended[a] | ~acted[a]
                    b.terminated[t] = stop  # a cut was bootstrapped through the reward above
                    b.dones[t] = stop
                    b.valid[t] = acted[a]
                episodes.step(_scores(agent, rewards), episode_done)
                obs = next_obs
            last_values = agent.values(obs)
            ones = np.ones(n, dtype=np.float32)
            for a in ids:
                bufs[a].compute_returns_and_advantages(last_values[a], ones, agent.gamma, agent.gae_lambda)
            for k, v in agent.learn({a: bufs[a].flat() for a in ids}).items():
                stats.setdefault(k, []).append(v)
            agent.steps += steps * n
            agent.vec_steps += steps
        out = {k: float(np.mean(v)) for k, v in stats.items()}
        return {**out, **episodes.row()}


__all__ = ["MultiAgentOffPolicyStrategy", "MultiAgentOnPolicyStrategy", "MultiAgentStrategy"]
