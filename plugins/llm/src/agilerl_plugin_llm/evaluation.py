"""``training.evaluation_interval`` for the LLM strategies: a held-out evaluation every N steps.

AgileRL's LLM loops evaluate on the held-out split every ``evaluation_interval`` training iterations.
Here the end of every generation is evaluated anyway (that evaluation is the fitness selection ranks);
``evaluation_interval`` adds a held-out evaluation whenever a member's ``steps`` reach a multiple of
it, logged as its own metrics row: ``generation``, ``agent``, ``steps`` and the ``eval/...`` metrics,
without ``fitness`` (selection never sees it). A multiple that ends the member's training for the
generation is not evaluated twice: the generation's own evaluation runs on the same weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agilerl_plugin_llm.training_fields import llm_training

if TYPE_CHECKING:
    from agilerl.training.run import Run


def evaluation_due(run: Run, agent: Any, *, steps_left: int) -> bool:
    """Whether ``agent`` (whose ``steps`` were just advanced) is evaluated now, with ``steps_left``
    more steps to take before the generation's evaluation."""
    interval = llm_training(run.manifest).evaluation_interval
    return interval is not None and steps_left > 0 and agent.steps % interval == 0


def log_evaluation(run: Run, agent: Any, metrics: Mapping[str, float]) -> None:
    """One metrics row of held-out metrics for ``agent`` at its current step count."""
    run.logger.log({"generation": run.generation, "agent": agent.index, "steps": agent.steps,
                    **{f"eval/{k}": float(v) for k, v in metrics.items()}})  # fmt: skip


__all__ = ["evaluation_due", "log_evaluation"]
