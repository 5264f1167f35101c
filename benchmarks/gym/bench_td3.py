"""TD3 throughput on Pendulum-v1 (8 sync envs, 1 torch thread), this project only.

Used to compare the gym plugin before and after a change: run it with each checkout's code on the
path (``PYTHONPATH=<checkout>/core/src:<checkout>/plugins/gym/src``), interleaved.

    python benchmarks/gym/bench_td3.py --steps 20000 --repeats 2

Prints one JSON line per run: env steps per wall second and per CPU second.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    record = benchlib.Record("gym/bench_td3")
    runs = []
    import torch

    torch.set_num_threads(1)
    from agilerl.training.trainer import LocalTrainer

    manifest = {
        "algorithm": {"name": "TD3", "batch_size": 128, "lr_actor": 1e-3, "lr_critic": 1e-3, "learn_step": 8,
                      "tau": 0.005, "policy_freq": 2},
        "environment": {"name": "Pendulum-v1", "num_envs": 8, "sync": True},
        "network": {"latent_dim": 64, "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False},
                    "head_config": {"hidden_size": [64], "layer_norm": False}},
        "replay_buffer": {"max_size": 50_000},
        "training": {"max_steps": args.steps, "evo_steps": args.steps, "learning_delay": 1000, "seed": 0,
                     "progress": False, "save_elite": False, "eval_loop": 1, "eval_steps": 1},
    }  # fmt: skip
    for rep in range(args.repeats):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        result = LocalTrainer.from_manifest(manifest, run_dir=tempfile.mkdtemp()).train()
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        steps = result.population[0].steps
        runs.append({"repeat": rep, "steps": steps, "steps_per_s": round(steps / wall, 1),
                     "steps_per_cpu_s": round(steps / cpu, 1)})  # fmt: skip
        print(json.dumps(runs[-1]), flush=True)
    record.save({"runs": runs})


if __name__ == "__main__":
    main()
