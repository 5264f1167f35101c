"""A run's state on disk: where checkpoints go, what they hold, and how a run resumes from them.

A checkpoint holds the whole population, the strategy's shared state, every random stream of the
driver (Python's, selection's, mutation's, torch's), the generation and the best fitness ever, so
a checkpoint alone resumes a run exactly. Its ``phase`` says where the resumed run re-enters:
``"evaluated"`` (the generation is complete: next is the stop check, then evolution) or
``"trained"`` (an interrupted generation: the members listed in ``progress.done`` keep their step).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import agilerl.checkpoint as checkpoint
from agilerl.training.processes import is_main_process, world_size
from agilerl.training.resume import code_references
from agilerl.training.rundir import numbered_checkpoints, prune_checkpoints

if TYPE_CHECKING:
    from agilerl.strategies import TrainingStrategy
    from agilerl.training.run import Run


def checkpoint_file(run: Run, final: bool = False, interrupted: bool = False) -> Path:
    """``checkpoint_<steps>.pt`` (or ``training.checkpoint_path``'s stem), ``checkpoint.pt`` when
    checkpoints overwrite, ``checkpoint_interrupted.pt`` after Ctrl-C or a failed member."""
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


def last_generation_recorded(payload: dict[str, Any]) -> int:
    """The last generation whose records (metrics rows, population row) belong to ``payload``'s run:
    its own generation when it was evaluated, the one before when it resumes mid-generation."""
    generation = int(payload.get("generation", 0))
    return generation if payload.get("phase") == "evaluated" else generation - 1


def last_checkpoint(run: Run) -> Path | None:
    """The newest numbered (or final) checkpoint this run wrote, if any."""
    base = checkpoint_file(run, final=True).with_suffix("")
    files = numbered_checkpoints(base)
    if files:
        return files[-1][1]
    final = base.with_suffix(".pt")
    return final if final.exists() else None


def prune(run: Run, newest: Path) -> None:
    """Keep ``training.keep_checkpoints`` numbered checkpoints (never ``newest``)."""
    t = run.manifest.training
    keep = getattr(t, "keep_checkpoints", None)
    if not t.overwrite_checkpoints and keep and is_main_process():
        prune_checkpoints(newest.with_name(checkpoint_file(run, final=True).stem), keep, protect=newest)


def resume_command(run: Run, path: Path) -> str:
    """The command that resumes from ``path`` (with ``--trust-checkpoint`` when the manifest names code)."""
    cmd = f"agilerl train --resume {path}"
    if world_size() > 1:
        cmd += f" --num-processes {world_size()}"
    if code_references(run.manifest.to_dict()):
        cmd += " --trust-checkpoint"
    return cmd


__all__ = [
    "checkpoint_file",
    "last_checkpoint",
    "last_generation_recorded",
    "prune",
    "restore_rng",
    "resume_command",
    "rng_state",
    "write_checkpoint",
]
