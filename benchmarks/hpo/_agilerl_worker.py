"""Runs inside the AgileRL virtualenv: AgileRL 2.58's own ``LocalTrainer.from_manifest(...).train()``
on the manifest given as JSON (population, tournament selection, mutations: its evolutionary HPO).

Per generation (``Population.increment_evo_step``, called once after every evaluation) we record the
wall time, the population's best latest fitness and the env steps of the most trained agent. The
instrumentation only reads state. Prints one JSON line.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from typing import Any

import numpy as np
import torch


def main() -> None:
    cfg = json.loads(sys.argv[1])
    torch.set_num_threads(1)
    random.seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    logging.disable(logging.WARNING)

    from agilerl.population import Population
    from agilerl.training.trainer import LocalTrainer

    rows: list[dict[str, float]] = []
    original = Population.increment_evo_step
    t0 = time.perf_counter()

    def record(self: Any) -> None:
        fits = [float(a.fitness[-1]) for a in self.agents if len(a.fitness)]
        steps = max(int(a.steps[-1]) if isinstance(a.steps, list) else int(a.steps) for a in self.agents)
        rows.append({"wall_s": time.perf_counter() - t0, "best": max(fits), "steps": steps})
        original(self)

    Population.increment_evo_step = record  # type: ignore[method-assign]
    trainer = LocalTrainer.from_manifest(cfg["manifest"])
    t0 = time.perf_counter()
    trainer.train(verbose=False)
    wall = time.perf_counter() - t0
    print(json.dumps({"wall_s": wall, "generations": rows}))


if __name__ == "__main__":
    main()
