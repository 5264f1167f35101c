"""LocalTrainer: manifest in, trained population out. ``agilerl train`` is a thin wrapper."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import agilerl.checkpoint as checkpoint
from agilerl.builders import select_builder
from agilerl.errors import AgileRLError
from agilerl.models.manifest import TrainingManifest, load_manifest
from agilerl.strategies import check_algorithm, select_strategy
from agilerl.training.assembly import assemble_run, resolve_device
from agilerl.training.backend import make_backend
from agilerl.training.loop import TrainResult, evolutionary_loop
from agilerl.training.metrics import MetricsLogger, SilentMetricsLogger, ensure_console_logging
from agilerl.training.processes import is_main_process, require_multi_process, world_size
from agilerl.training.resume import require_trust
from agilerl.training.run import Run
from agilerl.training.rundir import RunDirLock, claim, resume_point, run_dir_of, truncate_records
from agilerl.training.runstate import last_generation_recorded, write_checkpoint


class LocalTrainer:
    """Train a population described by a manifest, on this machine.

    ``LocalTrainer.from_manifest("m.yaml").train()`` = validate -> make env -> build ``pop_size``
    agents with the selected builder -> run the selected strategy's loop -> return the population
    (best first) and its fitnesses.
    """

    def __init__(
        self,
        manifest: TrainingManifest,
        *,
        resume_from: str | os.PathLike[str] | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        progress: bool | None = None,
        device: str | None = None,
        overwrite: bool = False,
        resume_payload: dict[str, Any] | None = None,
    ) -> None:
        self.manifest = manifest
        self.resume_from = Path(resume_from) if resume_from is not None else None
        self._resume: dict[str, Any] | None = resume_payload
        if self.resume_from is not None and self._resume is None:  # a checkpoint, or a run dir's newest
            self.resume_from, self._resume = resume_point(self.resume_from)
        if self._resume is not None:  # no agents, another algorithm's population: say so, not KeyError
            checkpoint.check_has_agents(self.resume_from or "the checkpoint", self._resume)
            checkpoint.check_same_algorithm(self.resume_from or "the checkpoint", self._resume.get("manifest"),
                                            manifest.to_dict())  # fmt: skip
        t = manifest.training
        self.device = resolve_device(device or t.device)
        self.progress = t.progress if progress is None else progress
        #: replace a run already in ``run_dir`` (otherwise a fresh run there is refused)
        self.overwrite = overwrite
        self.run_dir = Path(run_dir or self._resumed_run_dir() or t.run_dir or self._default_run_dir())
        self.builder = select_builder(manifest.algorithm)
        self.strategy = select_strategy(manifest.algorithm)
        check_algorithm(manifest.algorithm, self.strategy)  # a plugin's missing method, named before anything is built
        # Started in several processes (torchrun, accelerate launch, agilerl train --num-processes):
        # only a strategy that splits its work may run so.
        require_multi_process(self.strategy, manifest.algorithm.name, world_size())

    def _resumed_run_dir(self) -> str | Path | None:
        """Where a resumed run writes, unless ``run_dir`` says: a ``training.run_dir`` that differs
        from the one the checkpoint's manifest had (the manifest given, ``--set``); else the run
        directory the checkpoint lies in (``--resume RUN_DIR`` continues in ``RUN_DIR``, a copy of a
        run dir in the copy); else the run directory stored in the checkpoint."""
        if self._resume is None:
            return None

        t = self.manifest.training
        stored_dir = self._resume.get("run_dir")
        stored_run_dir = ((self._resume.get("manifest") or {}).get("training") or {}).get("run_dir")
        if t.run_dir and (t.run_dir != stored_run_dir or not stored_dir):
            return t.run_dir
        here = run_dir_of(self.resume_from) if self.resume_from is not None else None
        return here or stored_dir

    @classmethod
    def from_manifest(
        cls, source: str | os.PathLike[str] | dict[str, Any] | TrainingManifest, **kwargs: Any
    ) -> LocalTrainer:
        return cls(load_manifest(source), **kwargs)

    @classmethod
    def from_checkpoint(
        cls, path: str | os.PathLike[str], *, trust_checkpoint: bool = False, **kwargs: Any
    ) -> LocalTrainer:
        """Continue the run saved in ``path`` with the manifest stored in it.

        A stored manifest that names code (an env entrypoint, factory, path, wrappers, a rubric
        file) is refused unless ``trust_checkpoint``: pass the manifest you trust instead
        (``LocalTrainer(load_manifest(path_to_yaml), resume_from=path)``).
        """
        found, payload = resume_point(Path(path))
        require_trust(str(found), payload["manifest"], trusted=trust_checkpoint)
        return cls(load_manifest(payload["manifest"]), resume_from=found, resume_payload=payload, **kwargs)

    def _default_run_dir(self) -> str:
        label = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.manifest.algorithm.name}-{self.manifest.environment.label}")
        return str(Path("runs") / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}")

    def train(self) -> TrainResult:
        """Train with the run directory locked: a second run into it is refused while this one runs."""
        with RunDirLock(self.run_dir):
            claim(self.run_dir, resume=self._resume is not None, overwrite=self.overwrite)
            if self._resume is not None:
                # Rows logged after the checkpoint (a kill between logging and checkpointing) are
                # logged again by the resumed run: cut every record file back first, so none is
                # duplicated.
                truncate_records(self.run_dir, last_generation_recorded(self._resume))
            return self._train()

    def _train(self) -> TrainResult:
        manifest = self.manifest
        t = manifest.training
        strategy = self.strategy
        backend = make_backend(t)  # before torch, any env or model: a missing Ray or a dead address fails here
        loop = strategy.get_training_loop(manifest.algorithm)
        if backend.name != "local" and loop is not evolutionary_loop:
            raise AgileRLError(
                f"training.backend: {backend.name}: {type(strategy).__name__} trains with its own loop "
                f"({getattr(loop, '__qualname__', loop)}), which does not run members through a backend; "
                "use backend: local"
            )
        run, _ = assemble_run(
            manifest,
            device=self.device,
            run_dir=self.run_dir,
            logger=self._make_logger,
            strategy=strategy,
            resume=self._resume,
            progress=self.progress,
            backend=backend,
            source=self.resume_from or "the checkpoint",
        )
        logger = run.logger
        kwargs = strategy.get_trainer_kwargs(
            manifest.algorithm, training=t, env_spec=manifest.environment, memory=run.extras.get("memory")
        )
        try:
            backend.start(run, strategy)
            result: TrainResult = loop(run, strategy, **kwargs)
        finally:
            backend.close()
            strategy.close(run)
            logger.close()
        if t.save_elite and result.population:
            self._save_final(run, strategy, result)
        return result

    def _save_final(self, run: Run, strategy: Any, result: TrainResult) -> None:
        """``elite.pt``: the best of the last generation; ``last.pt``: that whole generation
        (resumable); ``best.pt`` (written by the loop): the best fitness ever, with its generation.
        A complete run resumed keeps the files it wrote (they are rewritten only when missing)."""
        elite, last = self.run_dir / "elite.pt", self.run_dir / "last.pt"
        if not (result.complete and elite.is_file() and last.is_file()):
            elite_run = Run(**{**run.__dict__, "population": [result.population[0]]})
            write_checkpoint(elite_run, strategy, elite, phase="evaluated")
            last_run = Run(**{**run.__dict__, "population": list(result.population)})
            write_checkpoint(last_run, strategy, last, phase="evaluated")
        result.elite_path, result.last_path = elite, last
        best_path = self.run_dir / "best.pt"
        result.best_path = best_path if best_path.is_file() else None
        result.best_info = run.best

    def _make_logger(self) -> MetricsLogger:
        if self.progress:
            ensure_console_logging()
        sinks = self.manifest.logging
        wandb = None
        if sinks is not None and sinks.wandb is not None:
            wandb = {**sinks.wandb.model_dump(exclude_none=True), "config": self.manifest.to_dict()}
        if not is_main_process():
            return SilentMetricsLogger()  # rank 0 writes the metrics of a multi-process run
        return MetricsLogger(self.run_dir, tensorboard=sinks is None or sinks.tensorboard, wandb=wandb)


def train(source: str | os.PathLike[str] | dict[str, Any] | TrainingManifest, **kwargs: Any) -> TrainResult:
    """Shorthand for ``LocalTrainer.from_manifest(source, **kwargs).train()``."""
    return LocalTrainer.from_manifest(source, **kwargs).train()


__all__ = ["AgileRLError", "LocalTrainer", "TrainResult", "train"]
