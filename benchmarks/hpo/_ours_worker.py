"""Runs in this repo's environment: ``agilerl`` (ours) ``LocalTrainer`` on the manifest given as JSON.

Per generation we take the wall time, the population's best fitness and the env steps of the most
trained agent from the rows the core logs (``TrainResult.history``); ``generation_s`` is each
generation's own wall time from the loop's clock (which starts once the backend's workers are up,
so ``startup_s`` is the rest of the run: Ray, worker processes, envs). Also: the final fitnesses,
every member's fitness history (to compare backends), total env steps and the load average.
Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import torch


def main() -> None:
    cfg = json.loads(sys.argv[1])
    torch.set_num_threads(1)
    from agilerl import LocalTrainer

    manifest = cfg["manifest"]
    manifest["training"].update(seed=cfg["seed"], progress=False, save_elite=False)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        result = LocalTrainer.from_manifest(manifest, run_dir=tmp).train()
        wall = time.perf_counter() - t0
    by_gen: dict[int, dict[str, float]] = {}
    for row in result.history:
        g = by_gen.setdefault(row["generation"], {"wall_s": 0.0, "best": float("-inf"), "steps": 0})
        g["wall_s"] = max(g["wall_s"], row["wall_s"])
        g["best"] = max(g["best"], row["fitness"])
        g["steps"] = max(g["steps"], row["steps"])
    gens = [by_gen[k] for k in sorted(by_gen)]
    ends = [g["wall_s"] for g in gens]
    print(json.dumps({
        "wall_s": wall,
        "generations": gens,
        "startup_s": wall - (ends[-1] if ends else 0.0),
        "generation_s": [b - a for a, b in zip([0.0, *ends[:-1]], ends, strict=True)],
        "best_per_generation": [g["best"] for g in gens],
        "fitnesses": result.fitnesses,
        "histories": sorted([a.index, a.fitness] for a in result.population),
        "total_env_steps": sum(a.steps for a in result.population),
        "load_average_1min": os.getloadavg()[0],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
