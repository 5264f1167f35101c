"""``LLMDatasetStrategy``: the core's evolutionary loop over a teacher-forced dataset env (SFT, DPO,
RewardModel: each spec names the function that builds its env, ``env_factory``).

One "step" is one training iteration on ``batch_size`` rows. The strategy builds the env (loading
the tokenizer from the model directory and applying ``chat_template_path``), feeds each agent
batches, and evaluates it on the held-out rows; the evaluation metrics (``eval/loss``,
``eval/accuracy`` for DPO, ...) go into the run's metrics next to the fitness. ``training.num_epochs``
bounds the run at that many passes over the training rows; ``training.evaluation_interval`` adds
held-out evaluation rows every that many iterations (:mod:`agilerl_plugin_llm.evaluation`).
"""

from __future__ import annotations

import time
from typing import Any

from agilerl.models.manifest import TrainingManifest
from agilerl.registry import resolve
from agilerl.strategies import TrainingStrategy
from agilerl.training.run import Run
from agilerl_plugin_llm.dataset.env import DatasetEnv, make_llm_env
from agilerl_plugin_llm.distributed import DataParallelStrategy, check_launch
from agilerl_plugin_llm.evaluation import evaluation_due, log_evaluation
from agilerl_plugin_llm.model import load_tokenizer


class LLMDatasetStrategy(DataParallelStrategy, TrainingStrategy):
    """Teacher-forced fine-tuning over dataset rows (SFT, DPO, RewardModel)."""

    paradigm = "llm"
    regime = "dataset"
    step_unit = "batch"

    def __init__(self) -> None:
        self._learn_stats: dict[int, dict[str, float]] = {}

    def make_env(self, manifest: TrainingManifest, *, seed: int | None) -> DatasetEnv:
        check_launch()  # a launch asking for what is not done here stops before any model loads
        algo = manifest.algorithm
        env_spec: Any = manifest.environment
        tokenizer = load_tokenizer(algo.pretrained_model_name_or_path, chat_template_path=env_spec.chat_template_path)  # type: ignore[attr-defined]
        if env_spec.objective is None:
            env_spec = env_spec.model_copy(update={"objective": getattr(type(algo), "objective", "sft")})
        make_env = resolve(getattr(type(algo), "env_factory", make_llm_env), f"{algo.name}'s dataset env")
        return make_env(  # type: ignore[no-any-return]
            env_spec,
            tokenizer,
            data_batch_size_per_gpu=algo.batch_size,  # type: ignore[attr-defined]
            max_context_length=algo.max_model_len,  # type: ignore[attr-defined]
            seed=seed if seed is not None else algo.seed,  # type: ignore[attr-defined]
        )

    def step_limit(self, run: Run) -> int:
        """``training.max_steps``, or fewer: ``training.num_epochs`` passes over the training rows
        (``ceil(rows / batch_size)`` iterations each), whichever ends the run first, as in AgileRL."""
        t = run.manifest.training
        if t.num_epochs is None:
            return t.max_steps
        batch_size = int(run.manifest.algorithm.batch_size)  # type: ignore[attr-defined]
        per_epoch = -(-len(run.env) // batch_size)
        return min(t.max_steps, t.num_epochs * per_epoch)

    def learn(self, agent: Any, run: Run, num_steps: int) -> dict[str, float]:
        totals: dict[str, float] = {}
        for i in range(num_steps):
            t0 = time.perf_counter()
            batch = run.env.next_batch(int(agent.spec.batch_size))
            for key, value in agent.learn(batch).items():
                totals[key] = totals.get(key, 0.0) + value
            totals["iteration_s"] = totals.get("iteration_s", 0.0) + time.perf_counter() - t0
            agent.steps += 1
            if evaluation_due(run, agent, steps_left=num_steps - i - 1):  # training.evaluation_interval
                log_evaluation(run, agent, agent.evaluate(run.eval_env))
        stats = {f"train/{k}": v / max(num_steps, 1) for k, v in totals.items()}
        # The loop logs this dict after evaluation: evaluate() adds the held-out metrics to it.
        self._learn_stats[agent.index] = stats
        return stats

    def evaluate(self, agent: Any, run: Run) -> float:
        metrics = agent.evaluate(run.eval_env)
        stats = self._learn_stats.pop(agent.index, None)
        if stats is not None:
            stats.update({f"eval/{k}": v for k, v in metrics.items()})
        else:
            log_evaluation(run, agent, metrics)
        return -float(metrics["loss"])

    def state_dict(self) -> dict[str, Any]:
        env = getattr(self, "_env", None)
        return {"env": env.state_dict()} if env is not None else {}

    def setup(self, run: Run) -> None:
        self._env = run.env
        if run.resume is None:
            # A baseline row: the held-out metrics before any training, so a run shows how far it moved.
            for agent in run.population:
                metrics = agent.evaluate(run.eval_env)
                run.logger.log({"generation": -1, "agent": agent.index, "steps": agent.steps,
                                **{f"eval/{k}": v for k, v in metrics.items()}})  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        env = getattr(self, "_env", None)
        if env is not None and state.get("env"):
            env.load_state_dict(state["env"])


__all__ = ["LLMDatasetStrategy"]
