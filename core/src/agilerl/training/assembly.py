"""A run is assembled here, once: seeding, envs, evolution, members and resumed state.

:func:`assemble_run` is the one place a manifest becomes a :class:`~agilerl.training.run.Run`.
:class:`~agilerl.training.trainer.LocalTrainer` calls it for the driver (members, selection,
mutation, resumed state), a Ray worker (:class:`~agilerl.training.ray_backend.MemberWorker`) for
its envs and strategy only (``members=False``), and :func:`build_member` builds the one agent
``agilerl eval``, ``export-policy`` and :func:`agilerl.load` read from a checkpoint. The order
below is part of the contract: the global generators are seeded first, then the training env,
then the evaluation env (seeded with :func:`eval_seed`), then the members in index order, so
every process that assembles the same manifest draws the same random numbers.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.checkpoint import CheckpointMismatchError, check_has_agents
from agilerl.hpo.mfpbt import MultiFrequencySelection
from agilerl.hpo.mutation import Mutations, resolve_hp_ranges
from agilerl.hpo.selection import TournamentSelection
from agilerl.models.sections import MultiFrequencySelectionSpec
from agilerl.strategies import select_strategy
from agilerl.training.run import EVAL_SEED_OFFSET, Run, eval_seed
from agilerl.training.runstate import restore_rng

if TYPE_CHECKING:
    from agilerl.hpo.mfpbt import MultiFrequencySelection
    from agilerl.hpo.mutation import Mutations
    from agilerl.hpo.selection import TournamentSelection
    from agilerl.models.manifest import TrainingManifest
    from agilerl.strategies import TrainingStrategy


def seed_everything(seed: int | None, threads: int | None, device: str) -> None:
    """Seed Python's, NumPy's and torch's global generators; set torch's thread count (one on CPU
    unless ``training.torch_threads`` says otherwise). NumPy and torch only when installed."""
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


def resolve_device(device: str) -> str:
    """``auto``: CUDA when torch sees a GPU, else CPU; any other name unchanged."""
    if device != "auto":
        return device
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return "cuda"
    return "cpu"


def evolution_seed(manifest: TrainingManifest) -> int | None:
    """Seed of selection and mutation: ``mutation.rand_seed`` when the manifest sets it, else
    ``training.seed`` (so runs with different seeds evolve differently), else the default 42."""
    mutation = manifest.mutation
    if mutation is not None and "rand_seed" in mutation.model_fields_set:
        return mutation.rand_seed
    if manifest.training.seed is not None:
        return manifest.training.seed
    return mutation.rand_seed if mutation is not None else None


def hp_config(manifest: TrainingManifest) -> dict[str, tuple[float, float]]:
    """The resolved mutable-hyperparameter ranges ``name -> (min, max)`` a builder receives."""
    if manifest.mutation is None:
        return {}

    return {k: (r.min, r.max) for k, r in resolve_hp_ranges(manifest.algorithm, manifest.mutation).items()}


def make_evolution(
    manifest: TrainingManifest,
) -> tuple[TournamentSelection | MultiFrequencySelection | None, Mutations | None]:
    """Selection and mutation of a run with HPO (``(None, None)`` without), on two seeded streams."""
    if not manifest.hpo:
        return None, None

    t = manifest.training
    sel = manifest.tournament_selection
    evo_seed = evolution_seed(manifest)
    # Two independent seeded streams: selection's draws must not mirror mutation's.
    selection_rng = random.Random(None if evo_seed is None else f"selection:{evo_seed}")
    selection: TournamentSelection | MultiFrequencySelection
    if isinstance(sel, MultiFrequencySelectionSpec):
        hp_names = sorted(resolve_hp_ranges(manifest.algorithm, manifest.mutation)) if manifest.mutation else []
        selection = MultiFrequencySelection.from_spec(sel, t.pop_size, hp_names=hp_names, rng=selection_rng)
    else:
        selection = TournamentSelection(
            sel.tournament_size if sel else 2, sel.elitism if sel else True, rng=selection_rng
        )
    mutations = None
    if manifest.mutation is not None:
        mutations = Mutations(manifest.mutation, manifest.algorithm, rng=random.Random(evo_seed))
    return selection, mutations


def changed_hyperparameters(manifest: TrainingManifest, resume: dict[str, Any] | None) -> dict[str, Any]:
    """Algorithm hyperparameters ``manifest`` sets differently from the one stored in ``resume``
    (``--set`` on ``--resume``): applied to every resumed member."""
    if resume is None:
        return {}
    stored = dict((resume.get("manifest") or {}).get("algorithm") or {})
    spec = manifest.algorithm
    fields = type(spec).model_fields
    changed = {}
    for name, value in spec.hyperparameters().items():
        if name == "num_envs" or name not in fields:
            continue
        if stored.get(name, fields[name].default) != value:
            changed[name] = value
    return changed


def member_runtime(
    manifest: TrainingManifest,
    *,
    index: int,
    device: str,
    seed: int | None,
    state: dict[str, Any] | None = None,
    hp_config: dict[str, tuple[float, float]] | None = None,
) -> AlgorithmBuildRuntime:
    """The build inputs of one member: the one place a member's runtime is set up, for a run's
    population (:func:`build_members`) and for the agent a checkpoint gives (:func:`build_member`)."""
    return AlgorithmBuildRuntime(
        index=index, device=device, seed=seed, hp_config=dict(hp_config or {}), resume_state=state, manifest=manifest
    )


def load_member_state(agent: Any, state: dict[str, Any], manifest: TrainingManifest, source: str | Path) -> None:
    """Load a checkpointed agent ``state`` into the freshly built ``agent``; a state that does not fit
    it (another architecture, another algorithm's state) raises
    :class:`~agilerl.checkpoint.CheckpointMismatchError` naming ``source`` and what is missing."""
    try:
        agent.load_state_dict(state)
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError, IndexError) as exc:
        if isinstance(exc, KeyError) and exc.args:
            what = f"the saved state has no {exc.args[0]!r}, which it needs"
        else:
            first = (str(exc).strip().splitlines() or [""])[0]
            what = f"{type(exc).__name__}: {first}"
        raise CheckpointMismatchError(
            f"{source}: its saved agent (member {state.get('index', '?')}) does not fit a {manifest.algorithm.name} "
            f"built from this manifest ({what}); use the manifest it was trained with, or start a new run"
        ) from exc


def build_members(
    manifest: TrainingManifest,
    *,
    env: Any,
    device: str,
    seed: int | None,
    resume: dict[str, Any] | None,
    source: str | Path = "the checkpoint",
) -> list[Any]:
    """The population: ``pop_size`` members (or as many as ``resume`` holds, with their states loaded).

    Member ``i`` is built with seed ``seed + i`` (distinct initial weights). A resumed state that does
    not fit the member the manifest builds raises :class:`~agilerl.checkpoint.CheckpointMismatchError`
    naming ``source``; a checkpoint holding no agent state is refused.
    """
    builder = select_builder(manifest.algorithm)
    if resume is not None:
        check_has_agents(source, resume)
    saved = None if resume is None else resume.get("agents")
    ranges = hp_config(manifest)
    runtimes = [
        member_runtime(
            manifest,
            index=i,
            device=device,
            seed=None if seed is None else seed + i,
            state=saved[i] if saved else None,
            hp_config=ranges,
        )
        for i in range(len(saved) if saved else manifest.training.pop_size)
    ]
    population = builder.build_population(manifest.algorithm, env=env, manifest=manifest, runtimes=runtimes)
    changed = changed_hyperparameters(manifest, resume)
    for agent, runtime in zip(population, runtimes, strict=True):
        if runtime.resume_state is not None:
            load_member_state(agent, runtime.resume_state, manifest, source)
            for name, value in changed.items():
                if hasattr(agent, "set_hyperparameter"):
                    try:
                        agent.set_hyperparameter(name, value)
                    except KeyError:  # not a hyperparameter this agent has
                        continue
    return population


def assemble_run(
    manifest: TrainingManifest,
    *,
    device: str,
    run_dir: Path,
    logger: Callable[[], Any],
    strategy: TrainingStrategy | None = None,
    members: bool = True,
    resume: dict[str, Any] | None = None,
    progress: bool = True,
    backend: Any = None,
    source: str | Path = "the checkpoint",
) -> tuple[Run, TrainingStrategy]:
    """Assemble a run from ``manifest``: the one path of the driver, a worker and a resume.

    :param logger: called once, after the members are built, for the run's metrics logger.
    :param members: build the population, selection and mutation (the driver); False gives a
        worker's run: envs and strategy only, members arrive with each generation.
    :param resume: a checkpoint payload whose members, generation, best, strategy state and
        random streams the run continues.
    :param source: where ``resume`` was read from, for the error a state that does not fit names.
    :returns: the run (its strategy ``setup`` done) and its strategy.
    """
    t = manifest.training
    seed = t.seed
    strategy = strategy if strategy is not None else select_strategy(manifest.algorithm)
    seed_everything(seed, t.torch_threads, device)
    env = strategy.make_env(manifest, seed=seed)
    eval_env = strategy.make_eval_env(manifest, seed=eval_seed(seed), train_env=env)
    selection, mutations = make_evolution(manifest) if members else (None, None)
    population = (
        build_members(manifest, env=env, device=device, seed=seed, resume=resume, source=source) if members else []
    )
    run = Run(
        manifest=manifest,
        population=population,
        env=env,
        eval_env=eval_env,
        builder=select_builder(manifest.algorithm),
        run_dir=run_dir,
        rng=random.Random(seed),
        logger=logger(),
        device=device,
        seed=seed,
        selection=selection,
        mutations=mutations,
        resume=resume if members else None,
        progress=progress,
        backend=backend,
    )
    strategy.setup(run)
    if members and resume is not None:
        run.generation = int(resume.get("generation", 0))
        run.best = resume.get("best")
        strategy.load_state_dict(resume.get("strategy", {}))
        restore_rng(run, resume["rng"])
        load_selection = getattr(selection, "load_state_dict", None)  # MF-PBT's counters
        if "selection" in resume and callable(load_selection):
            load_selection(resume["selection"])
    return run, strategy


def build_member(
    manifest: TrainingManifest, state: dict[str, Any], *, device: str, source: str | Path = "the checkpoint"
) -> Any:
    """One member from its checkpointed ``state``, for inference (``agilerl eval``, :func:`agilerl.load`).

    A builder's ``build_for_inference(spec, *, manifest, runtime)`` builds it without an env;
    otherwise the strategy's evaluation env (or its training env) is made, unseeded, for the build
    and closed again. A state that does not fit the built agent raises
    :class:`~agilerl.checkpoint.CheckpointMismatchError` naming ``source``.
    """
    builder = select_builder(manifest.algorithm)
    # Seeded with training.seed whatever the member's index (not seed + index as in build_members):
    # kept, not a bug. What a member's seed shapes (initial weights, its own generators) the state
    # loaded below replaces; a builder that also seeds torch's global generator leaves the same
    # stream for evaluation as before, whichever member is loaded.
    runtime = member_runtime(
        manifest, index=int(state.get("index", 0)), device=device, seed=manifest.training.seed, state=state
    )
    build_for_inference = getattr(builder, "build_for_inference", None)
    if callable(build_for_inference):
        agent = build_for_inference(manifest.algorithm, manifest=manifest, runtime=runtime)
    else:
        strategy = select_strategy(manifest.algorithm)
        env = strategy.make_eval_env(manifest, seed=None, train_env=None)
        if env is None:
            env = strategy.make_env(manifest, seed=None)
        try:
            agent = builder.build_for_run(manifest.algorithm, env=env, manifest=manifest, runtime=runtime)
        finally:
            close = getattr(env, "close", None)
            if callable(close):
                close()
    load_member_state(agent, state, manifest, source)
    return agent


__all__ = [
    "EVAL_SEED_OFFSET",
    "assemble_run",
    "build_member",
    "build_members",
    "changed_hyperparameters",
    "eval_seed",
    "evolution_seed",
    "hp_config",
    "load_member_state",
    "make_evolution",
    "member_runtime",
    "resolve_device",
    "seed_everything",
]
