"""LLMRolloutStrategy: how the core's evolutionary loop drives GRPO and LLMREINFORCE.

* ``make_env``: the policy's tokenizer, then :func:`~agilerl_plugin_llm.rollout.env.make_rollout_envs`
  (train and held-out harness factories). Rubric files and env entrypoints are loaded and probed
  here, so their mistakes stop the run before any model is built.
* ``learn(agent, run, n)``: ``n`` iterations (collect a batch of episodes, optimizer steps), each
  advancing ``agent.steps`` by one.
* ``evaluate``: mean greedy return on held-out episodes (``agent.test``; ``training.eval_prompts`` of
  them, default every held-out row up to 128; ``training.eval_greedy``,
  ``eval_samples_per_task`` add or choose sampled decoding), its ``eval/...`` metrics added to the
  generation's row; with
  ``training.evaluation_interval`` also every that many iterations, as its own metrics row
  (:mod:`agilerl_plugin_llm.evaluation`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.strategies import TrainingStrategy
from agilerl_plugin_llm.distributed import DataParallelStrategy, check_launch
from agilerl_plugin_llm.evaluation import evaluation_due, log_evaluation
from agilerl_plugin_llm.model import load_tokenizer
from agilerl_plugin_llm.rollout.completions_log import write_completions
from agilerl_plugin_llm.rollout.env import make_rollout_envs
from agilerl_plugin_llm.rollout.generation import VLLMEngineDied
from agilerl_plugin_llm.rollout.reward_funcs import RewardFunctionError
from agilerl_plugin_llm.rollout.sources import RolloutSourceError
from agilerl_plugin_llm.training_fields import eval_prompt_count, llm_training

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest
    from agilerl.training.run import Run


@contextmanager
def engine_death_is_resumable(agent: Any) -> Iterator[None]:
    """A vLLM engine that dies mid-run, or a reward function (``reward_funcs``) that fails, fails the
    member's step the way a lost worker does: the loop writes a checkpoint of the population as it
    stood (an iteration whose rollout failed took no optimizer step) and says how to resume."""
    from agilerl.training.backend import MemberFailedError

    try:
        yield
    except VLLMEngineDied as exc:
        raise MemberFailedError(
            f"agent {agent.index} at iteration {agent.steps}: {exc}. The engine cannot be restarted in this "
            "process; resuming starts a new one"
        ) from exc
    except RewardFunctionError as exc:  # scoring comes before the update: the iteration changed nothing
        raise MemberFailedError(
            f"agent {agent.index} at iteration {agent.steps}: {exc}. Fix the reward function, then resume"
        ) from exc


class LLMRolloutStrategy(DataParallelStrategy, TrainingStrategy):
    """Generative rollout fine-tuning (GRPO, LLMREINFORCE). One loop for every rollout regime:
    single-turn reasoning is ``max_turns = 1``."""

    paradigm: ClassVar[str] = "llm"
    regime: ClassVar[str] = "rollout"
    step_unit: ClassVar[str] = "iteration"

    def __init__(self) -> None:
        self._learn_stats: dict[int, dict[str, float]] = {}

    def make_env(self, manifest: TrainingManifest, *, seed: int | None) -> Any:
        check_launch()  # a launch asking for what is not done here stops before any model loads

        algo: Any = manifest.algorithm  # an LLM rollout spec (RolloutLLMSpec)
        env_spec = manifest.environment
        tokenizer = load_tokenizer(
            algo.pretrained_model_name_or_path or "", chat_template_path=getattr(env_spec, "chat_template_path", None)
        )
        envs = make_rollout_envs(
            env_spec,
            tokenizer,
            max_model_len=algo.max_model_len,
            max_output_tokens=getattr(algo, "new_tokens", None),
            seed=seed,
        )
        # Validation checks a local file's held-out rows; rows read only now (a Hub dataset, a directory,
        # Parquet) are checked here, before any model loads.
        asked = llm_training(manifest).eval_prompts
        if asked is not None and envs.eval_rows is not None and asked > envs.eval_rows:
            raise RolloutSourceError(
                f"training.eval_prompts: {asked} is more than the {envs.eval_rows} held-out rows of the dataset "
                f"(environment.train_test_split holds them out); lower eval_prompts to at most {envs.eval_rows}, "
                "or hold out more rows"
            )
        return envs

    def learn(self, agent: Any, run: Run, num_steps: int) -> dict[str, float]:
        with engine_death_is_resumable(agent):
            return self._learn(agent, run, num_steps)

    def _learn(self, agent: Any, run: Run, num_steps: int) -> dict[str, float]:
        totals: dict[str, float] = {}
        for i in range(int(num_steps)):
            stats = agent.learn_iteration(run.env)
            agent.steps += 1
            records, agent.pending_completions = getattr(agent, "pending_completions", None), None
            if records:  # log_completions_steps: completions.jsonl, TensorBoard text, a W&B table
                write_completions(run, records)
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + float(value)
            if evaluation_due(run, agent, steps_left=int(num_steps) - i - 1):  # training.evaluation_interval
                self.evaluate(agent, run)
                log_evaluation(run, agent, agent.last_eval)
        n = max(int(num_steps), 1)
        stats = {f"train/{k}": v / n for k, v in totals.items()}
        # The loop logs this dict after evaluation: evaluate() adds the held-out metrics to it.
        self._learn_stats[agent.index] = stats
        return stats

    def evaluate(self, agent: Any, run: Run) -> float:
        with engine_death_is_resumable(agent):
            fitness = _test(agent, run)
        stats = self._learn_stats.pop(agent.index, None)
        if stats is not None:
            stats.update({f"eval/{k}": float(v) for k, v in agent.last_eval.items()})
        return fitness

    def setup(self, run: Run) -> None:
        if run.resume is None:
            # The step-0 point: held-out reward before any training, so a run shows how far it moved.
            for agent in run.population:
                fitness = _test(agent, run)
                run.logger.log({"generation": -1, "agent": agent.index, "steps": agent.steps, "fitness": fitness,
                                **{f"eval/{k}": v for k, v in agent.last_eval.items()}})  # fmt: skip

    def close(self, run: Run) -> None:
        seen: set[int] = set()
        for agent in run.population:
            backend = getattr(agent, "_backend", None)
            if backend is not None and id(backend) not in seen:
                seen.add(id(backend))
                backend.close()


def _test(agent: Any, run: Run) -> float:
    """The held-out evaluation as the manifest sets it: ``eval_prompts`` prompts (default every held-out
    row up to 128; ``eval_loop x batch_size`` where the manifest gives ``eval_loop``), decoded as
    ``eval_greedy`` / ``eval_samples_per_task`` say."""
    t = run.manifest.training
    fields = llm_training(run.manifest)
    prompts = eval_prompt_count(run.manifest, getattr(run.eval_env, "eval_rows", None))
    return float(agent.test(run.eval_env, max_steps=t.eval_steps, seed=t.seed, prompts=prompts,
                            samples_per_prompt=fields.eval_samples_per_task, greedy=fields.eval_greedy))  # fmt: skip


__all__ = ["LLMRolloutStrategy"]
