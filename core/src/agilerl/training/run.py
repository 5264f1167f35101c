"""The state of one training run, shared by the loop and the strategy."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agilerl.builders import AlgorithmBuilder
    from agilerl.hpo.mfpbt import MultiFrequencySelection
    from agilerl.hpo.mutation import Mutations
    from agilerl.hpo.selection import TournamentSelection
    from agilerl.models.manifest import TrainingManifest
    from agilerl.training.metrics import MetricsLogger


#: The evaluation env and every evaluation episode are seeded ``training.seed + EVAL_SEED_OFFSET``
#: (so evaluation never replays the training env's episodes).
EVAL_SEED_OFFSET = 10_000


def eval_seed(seed: int | None) -> int | None:
    """The seed of evaluation for a run seeded ``seed`` (None: unseeded)."""
    return None if seed is None else seed + EVAL_SEED_OFFSET


@dataclass
class Run:
    manifest: TrainingManifest
    population: list[Any]
    env: Any
    eval_env: Any
    builder: type[AlgorithmBuilder]
    run_dir: Path
    rng: random.Random
    logger: MetricsLogger
    device: str = "cpu"
    seed: int | None = None
    selection: TournamentSelection | MultiFrequencySelection | None = None
    mutations: Mutations | None = None
    generation: int = 0
    #: Free-form per-run state for strategies (buffers, env iterators, ...).
    extras: dict[str, Any] = field(default_factory=dict)
    #: Resume payload, if the run continues a checkpoint.
    resume: dict[str, Any] | None = None
    progress: bool = True
    #: Where members train between tournaments (:mod:`agilerl.training.backend`); None: in this process.
    backend: Any = None
    #: The best fitness seen in this run: ``{"fitness", "generation", "member", "steps"}`` (``best.pt``).
    best: dict[str, Any] | None = None

    @property
    def eval_seed(self) -> int | None:
        """The seed of every evaluation (``training.seed + 10_000``; None when the run is unseeded)."""
        return eval_seed(self.seed)
