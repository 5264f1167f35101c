"""Strategies ``multi_agent/on_policy`` (IPPO) and ``multi_agent/off_policy`` (MADDPG, MATD3).

Both plug into the core's evolutionary loop: ``learn`` trains one population member for a number of
env steps on the shared vectorised env (counting every env copy's step, as AgileRL does), and
``evaluate`` runs the member deterministically on a separate in-process eval env, reset with a
fixed seed. The off-policy strategy keeps one replay buffer for the whole population (AgileRL's
experience sharing) and the exploration generator, both checkpointed. Every ``learn`` call resets
the env with a seed derived from checkpointed state (``engine.common.episode_seed``), so a resumed
run continues exactly. Collection and the learn loop are the engines'
(:class:`~agilerl_plugin_gym.engine.on_policy.MultiAgentOnPolicyEngine`,
:class:`~agilerl_plugin_gym.engine.off_policy.MultiAgentOffPolicyEngine`); here are the env, the
seed and the shared buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agilerl.strategies import TrainingStrategy
from agilerl_plugin_gym.denormals import flush_denormals
from agilerl_plugin_gym.engine.common import episode_seed
from agilerl_plugin_gym.engine.evaluation import evaluate_bounded
from agilerl_plugin_gym.engine.off_policy import MultiAgentOffPolicyEngine, ReplayState
from agilerl_plugin_gym.engine.on_policy import MultiAgentOnPolicyEngine
from agilerl_plugin_gym.multi_agent.buffer import MultiAgentReplayBuffer
from agilerl_plugin_gym.multi_agent.vec_env import PettingZooEnvError, PettingZooVecEnv, make_pz_env
from agilerl_plugin_gym.protocols import MULTI_AGENT_OFF_POLICY, MULTI_AGENT_ON_POLICY
from agilerl_plugin_gym.sections.training import rl_training

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
        return evaluate_bounded(agent, run, vars(self).setdefault("eval_cap_said", set()))

    def close(self, run: Run) -> None:
        for env in {id(run.env): run.env, id(run.eval_env): run.eval_env}.values():
            if env is not None:
                env.close()


class MultiAgentOffPolicyStrategy(ReplayState, MultiAgentStrategy):
    """Off-policy multi-agent training (MADDPG, MATD3) on the off-policy engine
    (:class:`~agilerl_plugin_gym.engine.off_policy.MultiAgentOffPolicyEngine`) with a shared
    multi-agent replay buffer."""

    regime = "off_policy"
    algorithm_protocol = MULTI_AGENT_OFF_POLICY

    def setup(self, run: Run) -> None:
        rb = run.manifest.replay_buffer
        size = rb.max_size if rb is not None else DEFAULT_BUFFER_SIZE
        self.init_replay(
            MultiAgentReplayBuffer(size, run.env.possible_agents, device=run.device, seed=run.seed), run.seed
        )
        run.extras["memory"] = self.memory
        self.engine = MultiAgentOffPolicyEngine(rl_training(run.manifest).learning_delay or 0)

    def learn(self, agent: MultiAgentOffPolicyAlgorithm, run: Run, num_steps: int) -> dict[str, float]:
        seed = episode_seed(run.seed, agent.index, agent.steps)
        with flush_denormals():
            return self.engine.learn(agent, run.env, self.memory, self.rng, num_steps, seed)


class MultiAgentOnPolicyStrategy(MultiAgentStrategy):
    """On-policy multi-agent training (IPPO) on the on-policy engine
    (:class:`~agilerl_plugin_gym.engine.on_policy.MultiAgentOnPolicyEngine`)."""

    regime = "on_policy"
    algorithm_protocol = MULTI_AGENT_ON_POLICY

    def __init__(self) -> None:
        self.engine = MultiAgentOnPolicyEngine()

    def learn(self, agent: MultiAgentOnPolicyAlgorithm, run: Run, num_steps: int) -> dict[str, float]:
        with flush_denormals():
            return self.engine.learn(agent, run.env, num_steps, episode_seed(run.seed, agent.index, agent.steps))


__all__ = ["MultiAgentOffPolicyStrategy", "MultiAgentOnPolicyStrategy", "MultiAgentStrategy"]
