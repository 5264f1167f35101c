"""The ``single_agent/offline`` strategy: train on a fixed dataset, evaluate in the env (CQN).

* :meth:`OfflineStrategy.setup` reads the dataset (:func:`~agilerl_plugin_gym.offline.datasets.read_dataset`,
  checked against the env's spaces) into the population's shared
  :class:`~agilerl_plugin_gym.buffers.ReplayBuffer` (``replay_buffer.max_size`` rows; a larger
  dataset keeps its last rows, as AgileRL's buffer does).
* :meth:`OfflineStrategy.learn` never steps the env: a step is one tick of the off-policy engine's
  :class:`~agilerl_plugin_gym.engine.off_policy.UpdateSchedule` (``learn_step`` steps per gradient
  step, none before ``training.learning_delay`` steps), and each gradient step samples a batch
  from the buffer (:func:`~agilerl_plugin_gym.engine.off_policy.gradient_steps`).
* The env (``min(num_envs, 10)`` sub-envs, sync or async as ``sync`` says) is made once and only
  evaluates the agents.
* Checkpoints hold the buffer's sampling RNG and the dataset's sha256, not the data: a resume
  reads the file again and refuses to continue if it changed, so it continues exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agilerl.errors import AgileRLError
from agilerl_plugin_gym.buffers import ReplayBuffer, numpy_rng_state, set_numpy_rng_state
from agilerl_plugin_gym.denormals import flush_denormals
from agilerl_plugin_gym.engine.off_policy import ReplayState, UpdateSchedule, gradient_steps
from agilerl_plugin_gym.envs import make_gym_env
from agilerl_plugin_gym.offline.datasets import read_dataset
from agilerl_plugin_gym.offline.specs import OfflineEnvSpec
from agilerl_plugin_gym.sections.training import rl_training
from agilerl_plugin_gym.single_agent.strategies import MAX_EVAL_ENVS, GymStrategy

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest
    from agilerl.training.run import Run
    from agilerl_plugin_gym.protocols import OffPolicyAlgorithm

__all__ = ["OfflineStrategy"]

log = logging.getLogger(__name__)


class OfflineStrategy(ReplayState, GymStrategy):
    """Gradient steps on batches of a dataset; the env only evaluates (see module docstring)."""

    regime = "offline"

    def __init__(self) -> None:
        self.fingerprint: str | None = None

    def make_env(self, manifest: TrainingManifest, *, seed: int | None) -> Any:
        # Nothing trains in the env: the one env made is the evaluation env (``sync`` as the
        # manifest says: async workers for envs whose step is expensive).
        spec = manifest.environment
        if not isinstance(spec, OfflineEnvSpec):
            raise AgileRLError(f"environment: the offline strategy needs env_type: offline, not {spec.env_type!r}")
        return make_gym_env(spec.model_copy(update={"num_envs": min(spec.num_envs, MAX_EVAL_ENVS)}))

    def make_eval_env(self, manifest: TrainingManifest, *, seed: int | None, train_env: Any) -> Any:
        return train_env

    def setup(self, run: Run) -> None:
        m = run.manifest
        env = run.env
        data = read_dataset(m.environment, env.single_observation_space, env.single_action_space)  # type: ignore[arg-type]
        rb = m.replay_buffer
        max_size = rb.max_size if rb is not None else 100_000
        if len(data) > max_size:
            log.warning(
                "the dataset has %d transitions; replay_buffer.max_size %d keeps the last %d",
                len(data), max_size, max_size,
            )  # fmt: skip
        buffer = ReplayBuffer(max_size, device=run.device, seed=run.seed)
        buffer.add(**data.fields)
        self.init_replay(buffer, run.seed)
        self.fingerprint = data.fingerprint()
        run.extras["memory"] = buffer
        behaviour = "" if data.behaviour_return is None else f", mean episode return {data.behaviour_return:.4g}"
        log.info("offline dataset %s: %d transitions%s", data.source, len(data), behaviour)

    def learn(self, agent: OffPolicyAlgorithm, run: Run, num_steps: int) -> dict[str, float]:
        buf: ReplayBuffer = self.memory
        delay = rl_training(run.manifest).learning_delay or 0
        schedule = UpdateSchedule(agent.spec.learn_step, 1, delay, agent.spec.batch_size)
        stats: Mapping[str, Any] = {}
        updates = 0
        for _ in range(num_steps):
            agent.steps += 1
            agent.vec_steps += 1
            # The dataset is all there from the start; a batch_size mutated past its size is drawn
            # with replacement (the buffer samples that way) rather than stopping learning.
            due = schedule.due(agent.vec_steps, agent.steps, max(len(buf), agent.spec.batch_size))
            if due:
                with flush_denormals():  # as the online strategies learn (agilerl_plugin_gym.denormals)
                    stats = gradient_steps(due, buf.sample, agent.learn, agent.spec.batch_size)
                updates += due
        return {**{k: float(v) for k, v in stats.items()}, "gradient_steps": float(updates)}

    def after_selection(self, run: Run, population: list[Any]) -> None:
        """Nothing to reset: offline agents have no exploration state."""

    # --- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self.memory is None:
            return {}
        return {"dataset_sha256": self.fingerprint, "sampler": numpy_rng_state(self.memory.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("dataset_sha256")
        if saved is not None and self.fingerprint is not None and saved != self.fingerprint:
            raise AgileRLError(
                "environment: the dataset differs from the one the checkpoint trained on (its sha256 changed); "
                "a resumed offline run must read the same data: restore the file, or start a new run"
            )
        if self.memory is not None and "sampler" in state:
            set_numpy_rng_state(self.memory.rng, state["sampler"])
