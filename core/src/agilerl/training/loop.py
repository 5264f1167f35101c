"""The evolutionary training loop every paradigm shares by default.

One generation: each agent learns for ``evo_steps`` (the strategy's ``learn``), each agent is
evaluated (``evaluate``, appended to ``agent.fitness``), metrics are logged, a checkpoint is written
when due, the run stops at ``target_score`` or the step limit (``max_steps``); otherwise selection and mutation make
the next generation. The population returned is the one last evaluated, best first: never freshly
mutated, untrained offspring.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agilerl.errors import AgileRLError, TrainingInterrupted
from agilerl.hpo.selection import last_fitness
from agilerl.training.backend import LocalBackend, MemberFailedError, MemberResult
from agilerl.training.metrics import Progress, population_summary
from agilerl.training.runstate import (
    checkpoint_file,
    last_checkpoint,
    prune,
    restore_rng,
    resume_command,
    rng_state,
    write_checkpoint,
)

if TYPE_CHECKING:
    from agilerl.strategies import TrainingStrategy
    from agilerl.training.run import Run

log = logging.getLogger("agilerl")


@dataclass
class TrainResult:
    """What :meth:`LocalTrainer.train` returns. Unpacks as ``population, fitnesses``."""

    population: list[Any]
    fitnesses: list[float]
    run_dir: Path
    generations: int
    checkpoint_path: Path | None = None
    elite_path: Path | None = None
    #: ``best.pt`` (the best fitness ever) and ``last.pt`` (the last evaluated population).
    best_path: Path | None = None
    last_path: Path | None = None
    #: ``{"fitness", "generation", "member", "steps"}`` of the best agent ever evaluated.
    best_info: dict[str, Any] | None = None
    stopped_by: str = "max_steps"
    history: list[dict[str, Any]] = field(default_factory=list)
    #: True when a resumed run was already complete (resumed after its last checkpoint): nothing
    #: was trained, logged or rewritten.
    complete: bool = False

    def __iter__(self) -> Any:
        return iter((self.population, self.fitnesses))

    @property
    def best(self) -> Any:
        return self.population[0]


def _record_generation(
    run: Run, strategy: TrainingStrategy, population: list[Any], best: Any, elapsed: float, rate: float
) -> None:
    """Population metrics, the generation's log line, and ``best.pt`` when the best fitness ever improved."""
    fitness = last_fitness(best)
    previous = (run.best or {}).get("fitness")
    improved = math.isfinite(fitness) and (previous is None or fitness > previous)
    if improved:
        run.best = {"fitness": fitness, "generation": run.generation, "member": best.index, "steps": best.steps}
    summary = population_summary(run, population, best_ever=(run.best or {}).get("fitness"))
    summary.update(wall_s=round(elapsed, 3), steps_per_s=round(rate, 1))
    run.logger.log_population(summary)
    fit = ", ".join(f"{a.index}:{last_fitness(a):.4g}" for a in population)
    muts = ", ".join(f"{a.index}:{a.mut}" for a in population)
    log.log(
        logging.INFO if run.progress else logging.DEBUG,
        "generation %d: steps %d best %.4g mean %.4g (best ever %.4g) fitness {%s} mutations {%s}",
        run.generation, min(a.steps for a in population), summary["best"] if summary["best"] is not None else math.nan,
        summary["mean"] if summary["mean"] is not None else math.nan,
        summary["best_ever"] if summary["best_ever"] is not None else math.nan, fit, muts,
    )  # fmt: skip
    if improved and run.manifest.training.save_elite:
        best_run = replace(run, population=[best])
        write_checkpoint(best_run, strategy, run.run_dir / "best.pt", phase="evaluated")


class _DeferredInterrupt:
    """Holds a first SIGINT (Ctrl-C) until the loop reaches a point where the state is consistent.

    The loop checks :attr:`requested` after each member's train-and-evaluate step and between
    generations, and then raises ``KeyboardInterrupt`` itself, so the interrupted checkpoint resumes
    exactly where the run stopped. A second SIGINT stops at once (:attr:`forced`): no checkpoint is
    written then, so none written before can be damaged. Installed only in the main thread.
    """

    def __init__(self, agree: Callable[[bool], bool] = bool) -> None:
        self.agree = agree  # every process of a multi-process run stops at the same check
        self.requested = False
        self.forced = False
        self.previous: Any = None
        self.installed = threading.current_thread() is threading.main_thread()
        if self.installed:
            self.previous = signal.signal(signal.SIGINT, self.handle)

    def handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            self.forced = True
            raise KeyboardInterrupt
        self.requested = True

    def check(self) -> None:
        if self.agree(self.requested):
            self.requested = True
            raise KeyboardInterrupt

    def restore(self) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, self.previous)
            self.installed = False


class EvolutionaryLoop:
    """One run's generations, step by step: :meth:`learn`, :meth:`record`, :meth:`stop`, :meth:`evolve`.

    :func:`evolutionary_loop` is ``EvolutionaryLoop(run, strategy).run()``. The steps share the
    loop's state (the population, the members done in an interrupted generation, their learn
    metrics and parents); :meth:`run` orders them and turns Ctrl-C and a failed member into a
    checkpoint that resumes exactly.
    """

    def __init__(self, run: Run, strategy: TrainingStrategy) -> None:
        self.run = run
        self.strategy = strategy
        self.population = run.population
        self.max_steps = strategy.step_limit(run)  # training.max_steps, or a tighter bound the strategy reads
        self.progress = Progress(
            self.max_steps * len(self.population),
            enabled=run.progress,
            unit=strategy.step_unit,
            initial=sum(min(a.steps, self.max_steps) for a in self.population),
        )
        self.last_ckpt_steps = min(a.steps for a in self.population)
        self.checkpoint_path: Path | None = None
        self.history: list[dict[str, Any]] = []
        resume = run.resume or {}
        #: "evaluated": the restored population was evaluated, next is the stop check, then evolution
        self.resumed_evaluated = resume.get("phase") == "evaluated"
        # An interrupted generation resumes where it stopped: members that finished their
        # train-and-evaluate step in it are neither trained nor evaluated again.
        interrupted = resume.get("progress") if resume.get("phase") == "trained" else None
        self.parents: dict[int, int] = {}  # agent index -> index of the agent it was cloned from
        self.done: set[int] = set()  # members whose step of this generation is complete
        self.learn_stats: dict[int, dict[str, float]] = {}  # their learn metrics (kept through Ctrl-C)
        if interrupted:
            self.parents = {int(k): int(v) for k, v in (interrupted.get("parents") or {}).items()}
            self.done = {int(i) for i in interrupted.get("done") or []}
            self.learn_stats = {int(k): dict(v) for k, v in (interrupted.get("learn_stats") or {}).items()}
        self.last_good = last_checkpoint(run)
        self.t0 = time.perf_counter()
        self.backend = run.backend if run.backend is not None else LocalBackend()
        self.stage = "evaluated" if self.resumed_evaluated else "learn"  # "evaluated": next is evolution
        self.interrupt = _DeferredInterrupt(lambda requested: strategy.agree_to_stop(run, requested))

    # --- the steps ------------------------------------------------------------------------------
    def learn(self) -> None:
        """Train and evaluate each member not done yet (in this process or on workers: the backend's)."""
        run, max_steps, evo_steps = self.run, self.max_steps, self.run.manifest.evo_steps
        todo = [a for a in self.population if a.index not in self.done]
        budgets = [min(evo_steps, max(max_steps - a.steps, 0)) for a in todo]
        local = isinstance(self.backend, LocalBackend)

        def on_member(pos: int, before: int, result: MemberResult) -> None:
            self.progress.update(min(result.agent.steps, max_steps) - min(before, max_steps))
            if local:  # members are updated in place here; on workers they come back at the end
                self.done.add(result.agent.index)
                self.learn_stats[result.agent.index] = result.stats
                self.interrupt.check()

        results = self.backend.train_generation(run, self.strategy, todo, budgets, on_member)
        trained = {r.agent.index: r for r in results}
        for r in results:
            self.learn_stats[r.agent.index] = r.stats
        self.population = [trained[a.index].agent if a.index in trained else a for a in self.population]
        run.population = self.population

    def record(self) -> Any:
        """Log each member's row and the population's; mark non-finite members unfit. Returns the best member."""
        run, population = self.run, self.population
        unfit = mark_unfit(population, self.learn_stats)
        best = max(population, key=last_fitness)
        self.progress.update(0, best_fitness=last_fitness(best), generation=run.generation)
        elapsed = time.perf_counter() - self.t0
        for agent in population:
            row = {
                "generation": run.generation,
                "agent": agent.index,
                "steps": agent.steps,
                "fitness": agent.fitness[-1],
                "mutation": agent.mut,
                "parent": self.parents.get(agent.index),
                "wall_s": round(elapsed, 3),
                "steps_per_s": round(self.progress.rate(), 1),
                "member": agent.index,  # the id selection keeps (same as "agent")
                **{f"hp/{k}": _hp(agent, k) for k in _hp_names(run)},
                **self.learn_stats.get(agent.index, {}),
                **({"unfit": unfit[agent.index]} if agent.index in unfit else {}),
            }
            run.logger.log(row)
            self.history.append(row)
        self.done.clear()
        self.learn_stats, self.stage = {}, "evaluated"
        for index, reason in unfit.items():
            log.warning(
                "generation %d: agent %d is unfit (%s); it ranks last and is replaced at the next selection",
                run.generation, index, reason,
            )  # fmt: skip
        if unfit and len(unfit) == len(population):
            raise NonFiniteTrainingError(run, unfit, self.last_good)
        _record_generation(run, self.strategy, population, best, elapsed, self.progress.rate())
        return best

    def stop_reason(self) -> str | None:
        """Why the run stops after this evaluated generation (``None``: it goes on)."""
        t = self.run.manifest.training
        best = max(self.population, key=last_fitness)
        if t.target_score is not None and last_fitness(best) >= t.target_score:
            return "target_score"
        if all(a.steps >= self.max_steps for a in self.population):
            # step_limit: a bound the strategy reads (e.g. passes over a training set)
            return "step_limit" if self.max_steps < t.max_steps else "max_steps"
        # training.max_wall_seconds: checked between generations (a generation always finishes).
        if t.max_wall_seconds is not None and time.perf_counter() - self.t0 >= t.max_wall_seconds:
            return "max_wall_seconds"
        return None

    def stop(self) -> str | None:
        """Checkpoint when due (always when stopping); return why the run stops, or None."""
        t = self.run.manifest.training
        reason = self.stop_reason()
        if t.checkpoint_steps is not None:
            steps_now = min(a.steps for a in self.population)
            if steps_now - self.last_ckpt_steps >= t.checkpoint_steps or reason is not None:
                path = write_checkpoint(self.run, self.strategy, checkpoint_file(self.run), phase="evaluated")
                self.checkpoint_path = self.last_good = path
                self.last_ckpt_steps = steps_now
                prune(self.run, path)
        if reason is None and all(a.steps == 0 for a in self.population):
            raise RuntimeError("the strategy's learn() advanced no agent's steps; the run cannot progress")
        return reason

    def evolve(self) -> None:
        """Selection and mutation make the next generation (an interrupt before this commits saves the
        evaluated generation)."""
        run, manifest = self.run, self.run.manifest
        offspring, new_parents = self.population, self.parents
        if run.selection is not None:
            _, offspring = run.selection.select(self.population)
            new_parents = dict(zip([a.index for a in offspring], run.selection.parents, strict=False))
        if run.mutations is not None:
            keep_elite = run.selection is not None and run.selection.elitism
            mutate_elite = manifest.mutation is None or manifest.mutation.mutate_elite
            skip = {0} if keep_elite and not mutate_elite else None
            selection_skip = getattr(run.selection, "mutation_skip", None)  # MF-PBT: only winner clones
            if callable(selection_skip):
                skip = selection_skip()
            run.mutations.mutate(offspring, skip=skip)
        self.population, self.parents = offspring, new_parents
        run.population = self.population
        self.strategy.after_selection(run, self.population)
        run.generation, self.stage = run.generation + 1, "learn"

    # --- the order of the steps, and its faults ----------------------------------------------------
    def run_loop(self) -> TrainResult:
        run = self.run
        try:
            if self.resumed_evaluated and (reason := self.stop_reason()) in ("target_score", "max_steps", "step_limit"):
                # Resumed after its last checkpoint: nothing to train, nothing rewritten.
                log.info("the run in %s is complete (stopped by %s at generation %d); nothing to train",
                         run.run_dir, reason, run.generation)  # fmt: skip
                return self.result(reason, complete=True)
            skip_learn = self.resumed_evaluated  # the restored population was evaluated: straight to evolution
            while True:
                self.interrupt.check()
                if not skip_learn:
                    self.learn()
                    self.record()
                    reason = self.stop()
                    if reason is not None:
                        return self.result(reason)
                skip_learn = False
                self.interrupt.check()
                self.evolve()
        except MemberFailedError as exc:
            # run.population is still the population as it was before this generation: resuming redoes it.
            path = write_checkpoint(run, self.strategy, checkpoint_file(run, interrupted=True), phase="trained")
            self.progress.close()
            raise MemberFailedError(
                f"{exc}; checkpoint written to {path}. Resume with: {resume_command(run, path)}"
            ) from None
        except KeyboardInterrupt:
            self.progress.close()
            if self.interrupt.forced:  # a second Ctrl-C: stop now, write nothing (every checkpoint stays as it was)
                latest = last_checkpoint(run)
                where = (
                    f"; the last checkpoint is {latest}. Resume with: {resume_command(run, latest)}" if latest else ""
                )
                raise TrainingInterrupted(f"stopped by a second Ctrl-C, without writing a checkpoint{where}") from None
            # The members of an unfinished generation that completed their step are kept as they are,
            # with their learn metrics (the row a resumed run logs for them is the uninterrupted one).
            phase = "trained" if self.stage == "learn" else "evaluated"
            extra = {"progress": {"done": sorted(self.done),
                                  "learn_stats": {str(k): v for k, v in self.learn_stats.items()},
                                  "parents": {str(k): v for k, v in self.parents.items()}}}  # fmt: skip
            path = write_checkpoint(
                run, self.strategy, checkpoint_file(run, interrupted=True), phase=phase, extra=extra
            )
            raise TrainingInterrupted(
                f"stopped by Ctrl-C, as you asked; checkpoint written to {path}. "
                f"Resume with: {resume_command(run, path)}"
            ) from None
        finally:
            self.interrupt.restore()
            self.progress.close()

    def result(self, stopped_by: str, *, complete: bool = False) -> TrainResult:
        """The last evaluated population, best first."""
        self.population.sort(key=last_fitness, reverse=True)
        self.run.population = self.population
        return TrainResult(
            population=self.population,
            fitnesses=[last_fitness(a) for a in self.population],
            run_dir=self.run.run_dir,
            generations=self.run.generation + 1,
            checkpoint_path=self.checkpoint_path,
            stopped_by=stopped_by,
            history=self.history,
            complete=complete,
        )


def evolutionary_loop(run: Run, strategy: TrainingStrategy) -> TrainResult:
    """Train ``run``'s population generation by generation (see :class:`EvolutionaryLoop`)."""
    return EvolutionaryLoop(run, strategy).run_loop()


def _hp_names(run: Run) -> list[str]:
    if run.mutations is not None:
        return sorted(run.mutations.hp_ranges)
    return []


def _hp(agent: Any, name: str) -> Any:
    try:
        v = agent.get_hyperparameter(name)
    except Exception:
        return None
    return v if not isinstance(v, float) or math.isfinite(v) else None


# --------------------------------------------------------------------------------------------------
# faults: non-finite members, retention, resume command
# --------------------------------------------------------------------------------------------------


def _non_finite_reason(fitness: float, stats: dict[str, Any]) -> str | None:
    bad = [f"{k}={v}" for k, v in stats.items() if "loss" in k and isinstance(v, float) and not math.isfinite(v)]
    if bad:
        return "non-finite loss: " + ", ".join(bad)
    if not math.isfinite(fitness):
        return f"non-finite fitness: {fitness}"
    return None


def mark_unfit(population: list[Any], learn_stats: dict[int, dict[str, Any]]) -> dict[int, str]:
    """Members whose loss or fitness is NaN/inf this generation: their fitness becomes NaN, which
    ranks last in selection (so the next tournament replaces them). Returns index -> reason."""
    unfit: dict[int, str] = {}
    for agent in population:
        reason = _non_finite_reason(float(agent.fitness[-1]), learn_stats.get(agent.index, {}))
        if reason is not None:
            agent.fitness[-1] = float("nan")
            unfit[agent.index] = reason
    return unfit


class NonFiniteTrainingError(AgileRLError):
    """Every member of the population has a NaN/inf loss or fitness: training cannot go on."""

    def __init__(self, run: Run, unfit: dict[int, str], last_good: Path | None) -> None:
        shown = "; ".join(f"agent {i}: {r}" for i, r in list(unfit.items())[:4])
        msg = (
            f"every member of the population ({len(unfit)}) has a non-finite loss or fitness at generation "
            f"{run.generation} ({shown}); training stopped. "
        )
        if last_good is not None:
            msg += (
                f"The last checkpoint before this, {last_good}, is intact: resume from it with other "
                f"hyperparameters, e.g. agilerl train --resume {last_good} --set algorithm.<field>=<value>"
            )
        else:
            msg += "No checkpoint was written before it (set training.checkpoint_steps to keep one)."
        self.last_good = last_good
        super().__init__(msg)


__all__ = [
    "EvolutionaryLoop",
    "NonFiniteTrainingError",
    "TrainResult",
    "evolutionary_loop",
    "mark_unfit",
    "restore_rng",
    "resume_command",
    "rng_state",
    "write_checkpoint",
]
