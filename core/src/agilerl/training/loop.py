"""The evolutionary training loop every paradigm shares by default.

One generation: each agent learns for ``evo_steps`` (the strategy's ``learn``), each agent is
evaluated (``evaluate``, appended to ``agent.fitness``), metrics are logged, a checkpoint is written
when due, the run stops at ``target_score`` or ``max_steps``; otherwise selection and mutation make
the next generation. The population returned is the one last evaluated, best first: never freshly
mutated, untrained offspring.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agilerl import checkpoint
from agilerl.errors import TrainingInterrupted
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


class _DeferredInterrupt:
    """Holds a first SIGINT (Ctrl-C) until the loop reaches a point where the state is consistent.

    The loop checks :attr:`requested` between agents' ``learn`` calls and between generations and
    then raises ``KeyboardInterrupt`` itself, so the interrupted checkpoint resumes exactly where the
    run stopped. A second SIGINT interrupts at once, as without this. Installed only in the main
    thread (signal handlers cannot be set elsewhere).
    """

    def __init__(self) -> None:
        self.requested = False
        self.previous: Any = None
        self.installed = threading.current_thread() is threading.main_thread()
        if self.installed:
            self.previous = signal.signal(signal.SIGINT, self.handle)

    def handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def restore(self) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, self.previous)
            self.installed = False


def write_checkpoint(
    run: Run, strategy: TrainingStrategy, path: Path, *, phase: str, learned: list[int] | None = None
) -> Path:
    """Write the whole population and run state atomically to ``path``.

    ``learned``: with phase ``"trained"``, the agents that finished this generation's ``learn``
    (resume skips them).
    """
    payload = {
        "format": checkpoint.FORMAT,
        "phase": phase,  # "evaluated": next is selection; "trained": resume re-enters training
        "manifest": run.manifest.to_dict(),
        "generation": run.generation,
        "agents": [agent.state_dict() for agent in run.population],
        "strategy": strategy.state_dict(),
        "rng": rng_state(run),
        "learned": list(learned or []),
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
    resume_phase = (run.resume or {}).get("phase")
    parents: dict[int, int] = {}  # agent index -> index of the agent it was cloned from
    # Agents that finished this generation's learn (restored from an interrupted checkpoint).
    learned: set[int] = set((run.resume or {}).get("learned", [])) if resume_phase == "trained" else set()
    t0 = time.perf_counter()
    interrupt = _DeferredInterrupt()
    try:
        while True:
            interrupt.check()
            if resume_phase == "evaluated":
                resume_phase = None  # the restored population was evaluated: go straight to evolution
            else:
                # --- learn ---
                learn_stats: dict[int, dict[str, float]] = {}
                for agent in population:
                    if agent.index in learned:
                        continue
                    before = agent.steps
                    budget = min(evo_steps, max(t.max_steps - agent.steps, 0))
                    learn_stats[agent.index] = strategy.learn(agent, run, budget) if budget > 0 else {}
                    progress.update(min(agent.steps, t.max_steps) - min(before, t.max_steps))
                    learned.add(agent.index)
                    interrupt.check()
                learned = set()
                # --- evaluate ---
                for agent in population:
                    agent.fitness.append(float(strategy.evaluate(agent, run)))
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
                    }
                    run.logger.log(row)
                    history.append(row)
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
                if target_hit:
                    stopped_by = "target_score"
                    break
                if done_steps:
                    break
                if all(a.steps == 0 for a in population):
                    raise RuntimeError("the strategy's learn() advanced no agent's steps; the run cannot progress")
            # --- evolve ---
            if run.selection is not None:
                _, population = run.selection.select(population)
                parents = dict(zip([a.index for a in population], run.selection.parents, strict=False))
            if run.mutations is not None:
                keep_elite = run.selection is not None and run.selection.elitism
                mutate_elite = manifest.mutation is None or manifest.mutation.mutate_elite
                skip = {0} if keep_elite and not mutate_elite else None
                run.mutations.mutate(population, skip=skip)
            run.population = population
            strategy.after_selection(run, population)
            run.generation += 1
    except KeyboardInterrupt:
        path = write_checkpoint(
            run, strategy, _checkpoint_file(run, interrupted=True), phase="trained", learned=sorted(learned)
        )
        progress.close()
        raise TrainingInterrupted(
            f"interrupted; checkpoint written to {path}. Resume with: agilerl train --resume {path}"
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
