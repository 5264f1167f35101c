"""Runs in agilerl's own environment: our NeuralUCB on iris through the plugin's training loop.

Builds the env and agent from a manifest exactly as `agilerl train` does, then times
`BanditStrategy.learn` (the loop `agilerl train` runs) for the whole budget. Prints one JSON line.
"""

from __future__ import annotations

import json
import random
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch

from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.models import load_manifest
from agilerl.strategies import select_strategy


def main() -> None:
    cfg = json.loads(sys.argv[1])
    torch.set_num_threads(1)
    random.seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    manifest = load_manifest(
        {
            "algorithm": {
                "name": cfg.get("algorithm", "NeuralUCB"),
                "gamma": cfg["gamma"],
                "lamb": cfg["lamb"],
                "reg": cfg["reg"],
                "lr": cfg["lr"],
                "batch_size": cfg["batch_size"],
                "learn_step": cfg["learn_step"],
            },
            "environment": {"env_type": "bandit", "features": cfg["features"], "targets": cfg["targets"]},
            "network": {"encoder_config": {"arch": "mlp", "hidden_size": cfg["hidden_size"]}},
            "replay_buffer": {"max_size": 10_000},
            "training": {"seed": cfg["seed"]},
        }
    )
    strategy = select_strategy(manifest.algorithm)
    env = strategy.make_env(manifest, seed=cfg["seed"])
    runtime = AlgorithmBuildRuntime(seed=cfg["seed"], manifest=manifest)
    agent = select_builder(manifest.algorithm).build_for_run(
        manifest.algorithm, env=env, manifest=manifest, runtime=runtime
    )
    run = SimpleNamespace(env=env, manifest=manifest)
    t0, c0 = time.perf_counter(), time.process_time()
    strategy.learn(agent, run, cfg["steps"])  # type: ignore[arg-type]
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"steps_per_s": cfg["steps"] / elapsed, "regret": agent.cumulative_regret,
                      "last500": agent.recent_mean_reward(), "params": agent.net.num_params, "seconds": elapsed,
                      "cpu_steps_per_s": cfg["steps"] / cpu}))  # fmt: skip


if __name__ == "__main__":
    main()
