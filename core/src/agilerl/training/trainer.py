"""LocalTrainer: manifest in, trained population out. ``agilerl train`` is a thin wrapper."""

from __future__ import annotations

import importlib.util
import os
import random
import re
import time
from pathlib import Path
from typing import Any

from agilerl import checkpoint
from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.errors import AgileRLError
from agilerl.hpo.mfpbt import MultiFrequencySelection
from agilerl.hpo.mutation import Mutations, resolve_hp_ranges
from agilerl.hpo.selection import TournamentSelection
from agilerl.models.manifest import TrainingManifest, load_manifest
from agilerl.models.sections import MultiFrequencySelectionSpec
from agilerl.strategies import check_algorithm, select_strategy
from agilerl.training.backend import make_backend
from agilerl.training.loop import TrainResult, evolutionary_loop, restore_rng
from agilerl.training.metrics import MetricsLogger, SilentMetricsLogger, ensure_console_logging
from agilerl.training.processes import is_main_process, require_multi_process, world_size
from agilerl.training.run import Run


def _seed_everything(seed: int | None, threads: int | None, device: str) -> None:
    if seed is not None:
        random.seed(seed)
    if importlib.util.find_spec("numpy") is not None and seed is not None:
        import numpy as np

        np.random.seed(seed % (2**32))
    if importlib.util.find_spec("torch") is not None:
        import torch

        if threads is not None or device == "cpu":
            torch.set_num_threads(threads or 1)
        if seed is not None:
            torch.manual_seed(seed)


def _evolution_seed(manifest: TrainingManifest) -> int | None:
    """Seed of selection and mutation: ``mutation.rand_seed`` when the manifest sets it, else
    ``training.seed`` (so runs with different seeds evolve differently), else the default 42."""
    mutation = manifest.mutation
    if mutation is not None and "rand_seed" in mutation.model_fields_set:
        return mutation.rand_seed
    if manifest.training.seed is not None:
        return manifest.training.seed
    return mutation.rand_seed if mutation is not None else None


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return "cuda"
    return "cpu"


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
        if self.resume_from is not None and self.resume_from.is_dir():  # a run dir: its newest checkpoint
            from agilerl.training.rundir import latest_checkpoint

            self.resume_from = latest_checkpoint(self.resume_from)
        self._resume: dict[str, Any] | None = resume_payload
        if self.resume_from is not None and self._resume is None:
            self._resume = checkpoint.load(self.resume_from)
        t = manifest.training
        self.device = resolve_device(device or t.device)
        self.progress = t.progress if progress is None else progress
        #: replace a run already in ``run_dir`` (otherwise a fresh run there is refused)
        self.overwrite = overwrite
        # A resumed run writes to its own directory unless told otherwise: by `run_dir`, or by a
        # training.run_dir that differs from the one the checkpoint's manifest had.
        stored_dir = (self._resume or {}).get("run_dir")
        stored_run_dir = ((self._resume or {}).get("manifest") or {}).get("training", {}).get("run_dir")
        manifest_dir = t.run_dir if t.run_dir != stored_run_dir or not stored_dir else None
        self.run_dir = Path(run_dir or manifest_dir or stored_dir or self._default_run_dir())
        self.builder = select_builder(manifest.algorithm)
        self.strategy = select_strategy(manifest.algorithm)
        check_algorithm(manifest.algorithm, self.strategy)  # a plugin's missing method, named before anything is built
        # Started in several processes (torchrun, accelerate launch, agilerl train --num-processes):
        # only a strategy that splits its work may run so.
        require_multi_process(self.strategy, manifest.algorithm.name, world_size())

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
        from agilerl.training.resume import require_trust

        payload = checkpoint.load(path)
        require_trust(str(path), payload["manifest"], trusted=trust_checkpoint)
        return cls(load_manifest(payload["manifest"]), resume_from=path, resume_payload=payload, **kwargs)

    def _default_run_dir(self) -> str:
        label = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.manifest.algorithm.name}-{self.manifest.environment.label}")
        return str(Path("runs") / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}")

    def train(self) -> TrainResult:
        """Train with the run directory locked: a second run into it is refused while this one runs."""
        from agilerl.training.rundir import RunDirLock, claim, truncate_metrics

        with RunDirLock(self.run_dir):
            claim(self.run_dir, resume=self._resume is not None, overwrite=self.overwrite)
            if self._resume is not None:
                # Rows logged after the checkpoint (a kill between logging and checkpointing) are
                # logged again by the resumed run: drop them first so none is duplicated.
                gen = int(self._resume.get("generation", 0))
                last = gen if self._resume.get("phase") == "evaluated" else gen - 1
                truncate_metrics(self.run_dir, lambda row: int(row.get("generation", -1)) <= last)
            return self._train()

    def _resumed_hyperparameters(self) -> dict[str, Any]:
        """Algorithm hyperparameters the resuming manifest sets differently from the stored one."""
        if self._resume is None:
            return {}
        stored = dict((self._resume.get("manifest") or {}).get("algorithm") or {})
        spec = self.manifest.algorithm
        fields = type(spec).model_fields
        changed = {}
        for name, value in spec.hyperparameters().items():
            if name == "num_envs" or name not in fields:
                continue
            before = stored.get(name, fields[name].default)
            if before != value:
                changed[name] = value
        return changed

    def _train(self) -> TrainResult:
        manifest = self.manifest
        t = manifest.training
        seed = t.seed
        backend = make_backend(t)  # before torch, any env or model: a missing Ray or a dead address fails here
        _seed_everything(seed, t.torch_threads, self.device)
        strategy = self.strategy
        loop = strategy.get_training_loop(manifest.algorithm)
        if backend.name != "local" and loop is not evolutionary_loop:
            raise AgileRLError(
                f"training.backend: {backend.name}: {type(strategy).__name__} trains with its own loop "
                f"({getattr(loop, '__qualname__', loop)}), which does not run members through a backend; "
                "use backend: local"
            )
        env = strategy.make_env(manifest, seed=seed)
        eval_env = strategy.make_eval_env(manifest, seed=None if seed is None else seed + 10_000, train_env=env)
        rng = random.Random(seed)
        selection: TournamentSelection | MultiFrequencySelection | None = None
        mutations = None
        if manifest.hpo:
            sel = manifest.tournament_selection
            evo_seed = _evolution_seed(manifest)
            # Two independent seeded streams: selection's draws must not mirror mutation's.
            selection_rng = random.Random(None if evo_seed is None else f"selection:{evo_seed}")
            if isinstance(sel, MultiFrequencySelectionSpec):
                hp_names = sorted(resolve_hp_ranges(manifest.algorithm, manifest.mutation)) if manifest.mutation else []
                selection = MultiFrequencySelection.from_spec(sel, t.pop_size, hp_names=hp_names, rng=selection_rng)
            else:
                selection = TournamentSelection(
                    sel.tournament_size if sel else 2, sel.elitism if sel else True, rng=selection_rng
                )
            if manifest.mutation is not None:
                mutations = Mutations(manifest.mutation, manifest.algorithm, rng=random.Random(evo_seed))
        hp_config: dict[str, tuple[float, float]] = {}
        if manifest.mutation is not None:
            hp_config = {k: (r.min, r.max) for k, r in resolve_hp_ranges(manifest.algorithm, manifest.mutation).items()}
        saved_agents = (self._resume or {}).get("agents")
        pop_size = len(saved_agents) if saved_agents else t.pop_size
        population = []
        for i in range(pop_size):
            runtime = AlgorithmBuildRuntime(
                index=i,
                device=self.device,
                seed=None if seed is None else seed + i,
                hp_config=hp_config,
                resume_state=saved_agents[i] if saved_agents else None,
                manifest=manifest,
            )
            agent = self.builder.build_for_run(manifest.algorithm, env=env, manifest=manifest, runtime=runtime)
            if runtime.resume_state is not None:
                agent.load_state_dict(runtime.resume_state)
                for name, value in self._resumed_hyperparameters().items():  # --set on --resume
                    if hasattr(agent, "set_hyperparameter") and hasattr(agent, name):
                        agent.set_hyperparameter(name, value)
            population.append(agent)
        if self.progress:
            ensure_console_logging()
        sinks = manifest.logging
        wandb = None
        if sinks is not None and sinks.wandb is not None:
            wandb = {**sinks.wandb.model_dump(exclude_none=True), "config": manifest.to_dict()}
        logger = (
            MetricsLogger(self.run_dir, tensorboard=sinks is None or sinks.tensorboard, wandb=wandb)
            if is_main_process()
            else SilentMetricsLogger()  # rank 0 writes the metrics of a multi-process run
        )
        run = Run(
            manifest=manifest,
            population=population,
            env=env,
            eval_env=eval_env,
            builder=self.builder,
            run_dir=self.run_dir,
            rng=rng,
            logger=logger,
            device=self.device,
            seed=seed,
            selection=selection,
            mutations=mutations,
            resume=self._resume,
            progress=self.progress,
            backend=backend,
        )
        strategy.setup(run)
        if self._resume is not None:
            run.generation = int(self._resume.get("generation", 0))
            run.best = self._resume.get("best")
            strategy.load_state_dict(self._resume.get("strategy", {}))
            restore_rng(run, self._resume["rng"])
            if "selection" in self._resume and isinstance(selection, MultiFrequencySelection):
                selection.load_state_dict(self._resume["selection"])
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
            from agilerl.training.loop import write_checkpoint

            # elite.pt: the best of the last generation; last.pt: that whole generation (resumable);
            # best.pt (written by the loop): the best fitness ever, with its generation.
            elite_run = Run(**{**run.__dict__, "population": [result.population[0]]})
            result.elite_path = write_checkpoint(elite_run, strategy, self.run_dir / "elite.pt", phase="evaluated")
            last_run = Run(**{**run.__dict__, "population": list(result.population)})
            result.last_path = write_checkpoint(last_run, strategy, self.run_dir / "last.pt", phase="evaluated")
            best_path = self.run_dir / "best.pt"
            result.best_path = best_path if best_path.is_file() else None
            result.best_info = run.best
        return result


def train(source: str | os.PathLike[str] | dict[str, Any] | TrainingManifest, **kwargs: Any) -> TrainResult:
    """Shorthand for ``LocalTrainer.from_manifest(source, **kwargs).train()``."""
    return LocalTrainer.from_manifest(source, **kwargs).train()


__all__ = ["AgileRLError", "LocalTrainer", "TrainResult", "train"]
