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

from agilerl import checkpoint
from agilerl.errors import AgileRLError, TrainingInterrupted
from agilerl.hpo.selection import last_fitness
from agilerl.training.backend import LocalBackend, MemberFailedError
from agilerl.training.metrics import Progress, population_summary
from agilerl.training.processes import is_main_process, world_size

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

    def __iter__(self) -> Any:
        return iter((self.population, self.fitnesses))

    @property
    def best(self) -> Any:
        return self.population[0]


def _checkpoint_file(run: Run, final: bool = False, interrupted: bool = False) -> Path:
    t = run.manifest.training
    base = Path(t.checkpoint_path) if t.checkpoint_path else run.run_dir / "checkpoint"
    if base.suffix == ".pt":
        base = base.with_suffix("")
    if interrupted:
        return base.parent / f"{base.name}_interrupted.pt"
    if t.overwrite_checkpoints or final:
        return base.parent / f"{base.name}.pt"
    steps = max((a.steps for a in run.population), default=0)
    return base.parent / f"{base.name}_{steps}.pt"


def rng_state(run: Run) -> dict[str, Any]:
    state: dict[str, Any] = {"python": list(run.rng.getstate()[1]), "python_version": run.rng.getstate()[0]}
    gauss = run.rng.getstate()[2]
    state["python_gauss"] = gauss
    if run.mutations is not None:
        m = run.mutations.rng.getstate()
        state["mutation"] = [m[0], list(m[1]), m[2]]
    if run.selection is not None:
        s = run.selection.rng.getstate()
        state["selection"] = [s[0], list(s[1]), s[2]]
    try:
        import torch

        state["torch"] = torch.get_rng_state()
    except ImportError:
        pass
    return state


def restore_rng(run: Run, state: dict[str, Any]) -> None:
    run.rng.setstate((state["python_version"], tuple(state["python"]), state.get("python_gauss")))
    if run.mutations is not None and "mutation" in state:
        v, s, g = state["mutation"]
        run.mutations.rng.setstate((v, tuple(s), g))
    if run.selection is not None and "selection" in state:
        v, s, g = state["selection"]
        run.selection.rng.setstate((v, tuple(s), g))
    if "torch" in state:
        import torch

        torch.set_rng_state(state["torch"])


def write_checkpoint(
    run: Run, strategy: TrainingStrategy, path: Path, *, phase: str, extra: dict[str, Any] | None = None
) -> Path:
    """Write the whole population and run state atomically to ``path`` (rank 0 alone in a
    multi-process run: every rank holds the same state)."""
    if not is_main_process():
        for agent in run.population:
            if getattr(agent, "state_dict_is_collective", False):
                agent.state_dict()  # a sharded agent gathers its weights with every process's help
        return path
    payload = {
        **(extra or {}),
        "run_dir": str(run.run_dir),
        "format": checkpoint.FORMAT,
        "phase": phase,  # "evaluated": next is selection; "trained": resume re-enters training
        "manifest": run.manifest.to_dict(),
        "generation": run.generation,
        "agents": [agent.state_dict() for agent in run.population],
        "strategy": strategy.state_dict(),
        "rng": rng_state(run),
        "best": run.best,
    }
    selection_state = getattr(run.selection, "state_dict", None)  # MF-PBT's counters
    if callable(selection_state):
        payload["selection"] = selection_state()
    return checkpoint.save(path, payload)


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


def evolutionary_loop(run: Run, strategy: TrainingStrategy) -> TrainResult:
    manifest = run.manifest
    t = manifest.training
    evo_steps = manifest.evo_steps
    population = run.population
    start_steps = min(a.steps for a in population)
    max_steps = strategy.step_limit(run)  # training.max_steps, or a tighter bound the strategy reads
    progress = Progress(
        max_steps * len(population),
        enabled=run.progress,
        unit=strategy.step_unit,
        initial=sum(min(a.steps, max_steps) for a in population),
    )
    last_ckpt_steps = start_steps
    checkpoint_path: Path | None = None
    stopped_by = "max_steps"
    history: list[dict[str, Any]] = []
    resume = run.resume or {}
    resume_phase = resume.get("phase")
    # An interrupted generation resumes where it stopped: members that finished their
    # train-and-evaluate step in it are neither trained nor evaluated again.
    interrupted = resume.get("progress") if resume_phase == "trained" else None
    parents: dict[int, int] = {}  # agent index -> index of the agent it was cloned from
    done: set[int] = set()  # members whose step of this generation is complete
    learn_stats: dict[int, dict[str, float]] = {}
    if interrupted:
        parents = {int(k): int(v) for k, v in (interrupted.get("parents") or {}).items()}
        done = {int(i) for i in interrupted.get("done") or []}
        learn_stats = {int(k): dict(v) for k, v in (interrupted.get("learn_stats") or {}).items()}
    last_good = _last_checkpoint(run)
    t0 = time.perf_counter()
    backend = run.backend if run.backend is not None else LocalBackend()
    stage = "evaluated" if resume_phase == "evaluated" else "learn"  # "evaluated": next is evolution
    local = isinstance(backend, LocalBackend)
    interrupt = _DeferredInterrupt(lambda requested: strategy.agree_to_stop(run, requested))
    try:
        while True:
            interrupt.check()
            if resume_phase == "evaluated":
                resume_phase = None  # the restored population was evaluated: go straight to evolution
            else:
                resume_phase = None
                # --- learn and evaluate each member (in this process or on workers: the backend's) ---
                todo = [a for a in population if a.index not in done]
                budgets = [min(evo_steps, max(max_steps - a.steps, 0)) for a in todo]

                def on_member(pos: int, before: int, agent: Any) -> None:
                    progress.update(min(agent.steps, max_steps) - min(before, max_steps))
                    if local:  # members are updated in place here; on workers they come back at the end
                        done.add(agent.index)
                        interrupt.check()

                results = backend.train_generation(run, strategy, todo, budgets, on_member)
                trained = {r.agent.index: r for r in results}
                for r in results:
                    learn_stats[r.agent.index] = r.stats
                population = [trained[a.index].agent if a.index in trained else a for a in population]
                run.population = population
                unfit = mark_unfit(population, learn_stats)
                best = max(population, key=last_fitness)
                progress.update(0, best_fitness=last_fitness(best), generation=run.generation)
                elapsed = time.perf_counter() - t0
                for agent in population:
                    row = {
                        "generation": run.generation,
                        "agent": agent.index,
                        "steps": agent.steps,
                        "fitness": agent.fitness[-1],
                        "mutation": agent.mut,
                        "parent": parents.get(agent.index),
                        "wall_s": round(elapsed, 3),
                        "steps_per_s": round(progress.rate(), 1),
                        "member": agent.index,  # the id selection keeps (same as "agent")
                        **{f"hp/{k}": _hp(agent, k) for k in _hp_names(run)},
                        **learn_stats.get(agent.index, {}),
                        **({"unfit": unfit[agent.index]} if agent.index in unfit else {}),
                    }
                    run.logger.log(row)
                    history.append(row)
                done.clear()
                learn_stats, stage = {}, "evaluated"
                for index, reason in unfit.items():
                    log.warning(
                        "generation %d: agent %d is unfit (%s); it ranks last and is replaced at the next selection",
                        run.generation, index, reason,
                    )  # fmt: skip
                if unfit and len(unfit) == len(population):
                    raise NonFiniteTrainingError(run, unfit, last_good)
                _record_generation(run, strategy, population, best, elapsed, progress.rate())
                # --- stop? ---
                done_steps = all(a.steps >= max_steps for a in population)
                target_hit = t.target_score is not None and last_fitness(best) >= t.target_score
                # training.max_wall_seconds: checked between generations (a generation always finishes).
                out_of_time = t.max_wall_seconds is not None and time.perf_counter() - t0 >= t.max_wall_seconds
                if t.checkpoint_steps is not None:
                    steps_now = min(a.steps for a in population)
                    due = steps_now - last_ckpt_steps >= t.checkpoint_steps
                    if due or done_steps or target_hit or out_of_time:
                        checkpoint_path = write_checkpoint(run, strategy, _checkpoint_file(run), phase="evaluated")
                        last_ckpt_steps = steps_now
                        last_good = checkpoint_path
                        _prune(run, checkpoint_path)
                if target_hit:
                    stopped_by = "target_score"
                    break
                if done_steps:
                    if max_steps < t.max_steps:  # a bound the strategy reads (e.g. passes over a training set)
                        stopped_by = "step_limit"
                    break
                if out_of_time:
                    stopped_by = "max_wall_seconds"
                    break
                if all(a.steps == 0 for a in population):
                    raise RuntimeError("the strategy's learn() advanced no agent's steps; the run cannot progress")
            # --- evolve (an interrupt before the commit below saves the evaluated generation) ---
            interrupt.check()
            offspring, new_parents = population, parents
            if run.selection is not None:
                _, offspring = run.selection.select(population)
                new_parents = dict(zip([a.index for a in offspring], run.selection.parents, strict=False))
            if run.mutations is not None:
                keep_elite = run.selection is not None and run.selection.elitism
                mutate_elite = manifest.mutation is None or manifest.mutation.mutate_elite
                skip = {0} if keep_elite and not mutate_elite else None
                selection_skip = getattr(run.selection, "mutation_skip", None)  # MF-PBT: only winner clones
                if callable(selection_skip):
                    skip = selection_skip()
                run.mutations.mutate(offspring, skip=skip)
            population, parents = offspring, new_parents
            run.population = population
            strategy.after_selection(run, population)
            run.generation, stage = run.generation + 1, "learn"
    except MemberFailedError as exc:
        # run.population is still the population as it was before this generation: resuming redoes it.
        path = write_checkpoint(run, strategy, _checkpoint_file(run, interrupted=True), phase="trained")
        progress.close()
        raise MemberFailedError(
            f"{exc}; checkpoint written to {path}. Resume with: {resume_command(run, path)}"
        ) from None
    except KeyboardInterrupt:
        progress.close()
        if interrupt.forced:  # a second Ctrl-C: stop now, write nothing (every checkpoint stays as it was)
            latest = _last_checkpoint(run)
            where = f"; the last checkpoint is {latest}. Resume with: {resume_command(run, latest)}" if latest else ""
            raise TrainingInterrupted(f"interrupted twice: stopped without writing a checkpoint{where}") from None
        # The members of an unfinished generation that completed their step are kept as they are.
        phase = "trained" if stage == "learn" else "evaluated"
        extra = {"progress": {"done": sorted(done),
                              "learn_stats": {str(k): v for k, v in learn_stats.items()},
                              "parents": {str(k): v for k, v in parents.items()}}}  # fmt: skip
        path = write_checkpoint(run, strategy, _checkpoint_file(run, interrupted=True), phase=phase, extra=extra)
        raise TrainingInterrupted(
            f"interrupted; checkpoint written to {path}. Resume with: {resume_command(run, path)}"
        ) from None
    finally:
        interrupt.restore()
        progress.close()
    population.sort(key=last_fitness, reverse=True)
    run.population = population
    return TrainResult(
        population=population,
        fitnesses=[last_fitness(a) for a in population],
        run_dir=run.run_dir,
        generations=run.generation + 1,
        checkpoint_path=checkpoint_path,
        stopped_by=stopped_by,
        history=history,
    )


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


def _last_checkpoint(run: Run) -> Path | None:
    from agilerl.training.rundir import _numbered

    base = _checkpoint_file(run, final=True).with_suffix("")
    files = _numbered(base)
    if files:
        return files[-1][1]
    final = base.with_suffix(".pt")
    return final if final.exists() else None


def _prune(run: Run, newest: Path) -> None:
    from agilerl.training.rundir import prune_checkpoints

    t = run.manifest.training
    keep = getattr(t, "keep_checkpoints", None)
    if not t.overwrite_checkpoints and keep and is_main_process():
        prune_checkpoints(newest.with_name(_checkpoint_file(run, final=True).stem), keep, protect=newest)


def resume_command(run: Run, path: Path) -> str:
    """The command that resumes from ``path`` (with ``--trust-checkpoint`` when the manifest names code)."""
    from agilerl.training.resume import code_references

    cmd = f"agilerl train --resume {path}"
    if world_size() > 1:
        cmd += f" --num-processes {world_size()}"
    if code_references(run.manifest.to_dict()):
        cmd += " --trust-checkpoint"
    return cmd
