"""Strategies ``multi_agent/on_policy`` (IPPO) and ``multi_agent/off_policy`` (MADDPG, MATD3).

Both plug into the core's evolutionary loop: ``learn`` trains one population member for a number of
env steps on the shared vectorised env (counting every env copy's step, as AgileRL does), and
``evaluate`` runs the member deterministically on a separate in-process eval env. The off-policy
strategy keeps one replay buffer for the whole population (AgileRL's experience sharing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from agilerl.strategies import TrainingStrategy
from agilerl_plugin_gym.multi_agent.buffer import MultiAgentReplayBuffer
from agilerl_plugin_gym.multi_agent.vec_env import PettingZooEnvError, PettingZooVecEnv, make_pz_env

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest
    from agilerl.training.run import Run

#: Eval env copies at most (each eval round runs every copy to the end of one episode).
EVAL_ENVS = 8
DEFAULT_BUFFER_SIZE = 100_000


class _MultiAgentStrategy(TrainingStrategy):
    paradigm = "multi_agent"

    def make_env(self, manifest: TrainingManifest, *, seed: int | None) -> PettingZooVecEnv:
        env = manifest.environment
        if env.env_type != "gym":
            raise PettingZooEnvError(f"multi-agent algorithms need env_type 'gym' (PettingZoo); got {env.env_type!r}")
        return make_pz_env(env)

    def make_eval_env(self, manifest: TrainingManifest, *, seed: int | None, train_env: Any) -> PettingZooVecEnv:
        n = min(int(getattr(manifest.environment, "num_envs", 1)), EVAL_ENVS)
        env = make_pz_env(manifest.environment, sync=True, num_envs=n)
        env.reset(seed=seed)
        return env

    def _reset_seed(self, run: Run) -> int | None:
        """The first reset of a run is seeded; later ones continue the envs' own RNG streams."""
        if run.extras.get("env_seeded") or run.seed is None:
            return None
        run.extras["env_seeded"] = True
        return int(run.seed)

    def close(self, run: Run) -> None:
        for env in {id(run.env): run.env, id(run.eval_env): run.eval_env}.values():
            if env is not None:
                env.close()


class _EpisodeTracker:
    """Running per-copy returns; ``done(mask)`` banks the scores of finished episodes."""

    def __init__(self, agent: Any, num_envs: int) -> None:
        self.agent = agent
        self.returns = np.zeros((num_envs, len(agent.agent_ids)))
        self.scores: list[float] = []

    def step(self, rewards: dict[str, np.ndarray], episode_done: np.ndarray) -> None:
        self.returns += np.stack([rewards[a] for a in self.agent.agent_ids], axis=1)
        if episode_done.any():
            self.scores.extend(self.agent.episode_score(self.returns[episode_done]).tolist())
            self.returns[episode_done] = 0.0


class MultiAgentOffPolicyStrategy(_MultiAgentStrategy):
    """Off-policy multi-agent training (MADDPG, MATD3) with a shared multi-agent replay buffer."""

    regime = "off_policy"

    def setup(self, run: Run) -> None:
        rb = run.manifest.replay_buffer
        size = rb.max_size if rb is not None else DEFAULT_BUFFER_SIZE
        self.memory = MultiAgentReplayBuffer(size, run.env.possible_agents, device=run.device, seed=run.seed)
        run.extras["memory"] = self.memory

    def learn(self, agent: Any, run: Run, num_steps: int) -> dict[str, float]:
        env: PettingZooVecEnv = run.env
        memory: MultiAgentReplayBuffer = run.extras["memory"]
        n = env.num_envs
        warmup = max(agent.batch_size, run.manifest.training.learning_delay or 0)
        obs, _ = env.reset(seed=self._reset_seed(run))
        agent.reset_noise(n)
        tracker = _EpisodeTracker(agent, n)
        losses: dict[str, list[float]] = {}
        vec_steps = getattr(agent, "_vec_steps", 0)
        done_steps = 0
        while done_steps < num_steps:
            env_actions, stored = agent.get_actions(obs, explore=True)
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
            tracker.step(rewards, episode_done)
            obs = next_obs
            done_steps += n
            agent.steps += n
            vec_steps += 1
            if len(memory) >= warmup:
                for _ in range(_updates_due(agent.learn_step, n, vec_steps)):
                    for k, v in agent.learn(memory.sample(agent.batch_size)).items():
                        losses.setdefault(k, []).append(v)
        agent._vec_steps = vec_steps
        out = {k: float(np.mean(v)) for k, v in losses.items()}
        if tracker.scores:
            out["train_score"] = float(np.mean(tracker.scores))
        return out

    def state_dict(self) -> dict[str, Any]:
        memory = getattr(self, "memory", None)
        return {"memory": memory.state_dict()} if memory is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        memory = getattr(self, "memory", None)
        if memory is not None and "memory" in state:
            memory.load_state_dict(state["memory"])


def _updates_due(learn_step: int, num_envs: int, vec_steps: int) -> int:
    """Gradient updates after a vector step, with AgileRL's semantics for ``learn_step``.

    ``learn_step`` counts env steps over all copies: when it exceeds ``num_envs`` one update runs
    every ``learn_step // num_envs`` vector steps, otherwise ``num_envs // learn_step`` run per
    vector step (same update-to-data ratio as AgileRL, so hyperparameters carry over).
    """
    if learn_step > num_envs:
        return 1 if vec_steps % (learn_step // num_envs) == 0 else 0
    return num_envs // learn_step


def _rows(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``mask`` (num_envs,) broadcastable against ``like`` (num_envs, ...)."""
    return mask.reshape((-1,) + (1,) * (like.ndim - 1))


class MultiAgentOnPolicyStrategy(_MultiAgentStrategy):
    """On-policy multi-agent training (IPPO): collect ``learn_step`` env steps, update, repeat."""

    regime = "on_policy"

    def learn(self, agent: Any, run: Run, num_steps: int) -> dict[str, float]:
        env: PettingZooVecEnv = run.env
        n = env.num_envs
        obs, infos = env.reset(seed=self._reset_seed(run))
        active = infos["active"]
        tracker = _EpisodeTracker(agent, n)
        stats: dict[str, list[float]] = {}
        done_steps = 0
        while done_steps < num_steps:
            rollout_len = max(1, -(-agent.learn_step // n))
            obs, active, rollout = agent.collect_rollout(env, obs, active, rollout_len, tracker)
            done_steps += rollout_len * n
            agent.steps += rollout_len * n
            for k, v in agent.learn(rollout).items():
                stats.setdefault(k, []).append(v)
        out = {k: float(np.mean(v)) for k, v in stats.items()}
        if tracker.scores:
            out["train_score"] = float(np.mean(tracker.scores))
        return out


__all__ = ["MultiAgentOffPolicyStrategy", "MultiAgentOnPolicyStrategy"]
