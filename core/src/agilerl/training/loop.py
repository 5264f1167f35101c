"""The evolutionary training loop every paradigm shares by default.

One generation: each agent learns for ``evo_steps`` (the strategy's ``learn``), each agent is
evaluated (``evaluate``, appended to ``agent.fitness``), metrics are logged, a checkpoint is written
when due, the run stops at ``target_score`` or ``max_steps``; otherwise selection and mutation make
the next generation. The population returned is the one last evaluated, best first: never freshly
mutated, untrained offspring.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agilerl import checkpoint
from agilerl.errors import AgileRLError, TrainingInterrupted
from agilerl.hpo.selection import last_fitness
from agilerl.training.metrics import Progress

if TYPE_CHECKING:
    from agilerl.strategies import TrainingStrategy
    from agilerl.training.run import Run


@dataclass
class TrainResult:
    """What :meth:`LocalTrainer.train` returns. Unpacks as ``population, fitnesses``."""

    population: list[Any]
    fitnesses: list[float]
    run_dir: Path
    generations: int
    checkpoint_path: Path | None = None
    elite_path: Path | None = None
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
    """Write the whole population and run state atomically to ``path``."""
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
    }
    return checkpoint.save(path, payload)


def evolutionary_loop(run: Run, strategy: TrainingStrategy) -> TrainResult:
    manifest = run.manifest
    t = manifest.training
    evo_steps = manifest.evo_steps
    population = run.population
    start_steps = min(a.steps for a in population)
    progress = Progress(
        t.max_steps * len(population),
        enabled=run.progress,
        unit=strategy.step_unit,
        initial=sum(min(a.steps, t.max_steps) for a in population),
    )
    last_ckpt_steps = start_steps
    checkpoint_path: Path | None = None
    stopped_by = "max_steps"
    history: list[dict[str, Any]] = []
    resume = run.resume or {}
    resume_phase = resume.get("phase")
    # An interrupted generation resumes where it stopped: agents that finished learning in it are
    # not trained again (their start-of-generation steps and learn metrics are in the checkpoint).
    interrupted = resume.get("progress") if resume_phase == "trained" else None
    parents: dict[int, int] = {}  # agent index -> index of the agent it was cloned from
    if interrupted:
        parents = {int(k): int(v) for k, v in (interrupted.get("parents") or {}).items()}
    gen_start: dict[int, int] = {}
    fit_len: dict[int, int] = {}
    learn_stats: dict[int, dict[str, float]] = {}
    stage = "learn"  # "evaluated" once this generation's fitnesses are logged, until evolution commits
    last_good = _last_checkpoint(run)
    t0 = time.perf_counter()
    try:
        while True:
            if resume_phase == "evaluated":
                resume_phase = None  # the restored population was evaluated: go straight to evolution
                stage = "evaluated"
            else:
                stage = "learn"
                fit_len = {a.index: len(a.fitness) for a in population}
                if interrupted:
                    gen_start = {int(k): int(v) for k, v in (interrupted.get("start_steps") or {}).items()}
                    learn_stats = {int(k): dict(v) for k, v in (interrupted.get("learn_stats") or {}).items()}
                    interrupted = None
                else:
                    gen_start, learn_stats = {}, {}
                for agent in population:
                    gen_start.setdefault(agent.index, agent.steps)
                resume_phase = None
                # --- learn ---
                for agent in population:
                    before = agent.steps
                    done_in_gen = agent.steps - gen_start[agent.index]
                    budget = max(min(evo_steps - done_in_gen, t.max_steps - agent.steps), 0)
                    if budget > 0:
                        learn_stats[agent.index] = strategy.learn(agent, run, budget)
                    else:
                        learn_stats.setdefault(agent.index, {})
                    progress.update(min(agent.steps, t.max_steps) - min(before, t.max_steps))
                # --- evaluate ---
                for agent in population:
                    agent.fitness.append(float(strategy.evaluate(agent, run)))
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
                        **{f"hp/{k}": _hp(agent, k) for k in _hp_names(run)},
                        **learn_stats.get(agent.index, {}),
                        **({"unfit": unfit[agent.index]} if agent.index in unfit else {}),
                    }
                    run.logger.log(row)
                    history.append(row)
                stage = "evaluated"
                for index, reason in unfit.items():
                    print(f"[agilerl] generation {run.generation}: agent {index} is unfit ({reason}); "
                          "it ranks last and is replaced at the next selection", file=sys.stderr, flush=True)  # fmt: skip
                if unfit and len(unfit) == len(population):
                    raise NonFiniteTrainingError(run, unfit, last_good)
                if run.progress:
                    fit = ", ".join(f"{a.index}:{last_fitness(a):.4g}" for a in population)
                    muts = ", ".join(f"{a.index}:{a.mut}" for a in population)
                    print(f"[agilerl] generation {run.generation}: steps {min(a.steps for a in population)} "
                          f"fitness {{{fit}}} mutations {{{muts}}}", flush=True)  # fmt: skip
                # --- stop? ---
                done_steps = all(a.steps >= t.max_steps for a in population)
                target_hit = t.target_score is not None and last_fitness(best) >= t.target_score
                if t.checkpoint_steps is not None:
                    steps_now = min(a.steps for a in population)
                    if steps_now - last_ckpt_steps >= t.checkpoint_steps or done_steps or target_hit:
                        checkpoint_path = write_checkpoint(run, strategy, _checkpoint_file(run), phase="evaluated")
                        last_ckpt_steps = steps_now
                        last_good = checkpoint_path
                        _prune(run, checkpoint_path)
                if target_hit:
                    stopped_by = "target_score"
                    break
                if done_steps:
                    break
                if all(a.steps == 0 for a in population):
                    raise RuntimeError("the strategy's learn() advanced no agent's steps; the run cannot progress")
            # --- evolve ---
            offspring = population
            new_parents = parents
            if run.selection is not None:
                _, offspring = run.selection.select(population)
                new_parents = dict(zip([a.index for a in offspring], run.selection.parents, strict=False))
            if run.mutations is not None:
                keep_elite = run.selection is not None and run.selection.elitism
                mutate_elite = manifest.mutation is None or manifest.mutation.mutate_elite
                skip = {0} if keep_elite and not mutate_elite else None
                run.mutations.mutate(offspring, skip=skip)
            # commit the next generation (a Ctrl-C before this line saves the evaluated one)
            population, parents = offspring, new_parents
            run.population, run.generation, stage = population, run.generation + 1, "learn"
            gen_start, fit_len, learn_stats = {a.index: a.steps for a in population}, {}, {}
            strategy.after_selection(run, population)
    except KeyboardInterrupt:
        # A second Ctrl-C while this checkpoint is written stops at once: the temp file is removed
        # and every checkpoint written before stays intact.
        extra: dict[str, Any] | None = None
        if stage == "evaluated":
            phase = "evaluated"
        else:
            phase = "trained"
            for agent in run.population:  # fitnesses of a generation not fully evaluated are redone
                del agent.fitness[fit_len.get(agent.index, len(agent.fitness)) :]
            extra = {"progress": {"start_steps": {str(k): v for k, v in gen_start.items()},
                                  "learn_stats": {str(k): v for k, v in learn_stats.items()},
                                  "parents": {str(k): v for k, v in parents.items()}}}  # fmt: skip
        path = write_checkpoint(run, strategy, _checkpoint_file(run, interrupted=True), phase=phase, extra=extra)
        progress.close()
        raise TrainingInterrupted(
            f"interrupted; checkpoint written to {path}. Resume with: {resume_command(run, path)}"
        ) from None
    finally:
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
                f"hyperparameters, e.g. agilerl train --resume {last_good} --set algorithm.lr=<smaller>"
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
    if not t.overwrite_checkpoints and keep:
        prune_checkpoints(newest.with_name(_checkpoint_file(run, final=True).stem), keep, protect=newest)


def resume_command(run: Run, path: Path) -> str:
    """The command that resumes from ``path`` (with ``--trust-checkpoint`` when the manifest names code)."""
    from agilerl.training.resume import code_references

    cmd = f"agilerl train --resume {path}"
    if code_references(run.manifest.to_dict()):
        cmd += " --trust-checkpoint"
    return cmd
