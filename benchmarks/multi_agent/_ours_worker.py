"""Benchmark worker (this project): train MADDPG from a manifest and print one JSON line.

Run by bench_maddpg.py with this repo's virtualenv; argv[1] is a JSON config (see bench_maddpg.py).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    cfg = json.loads(sys.argv[1])
    import torch

    torch.set_num_threads(1)
    from agilerl.training.trainer import LocalTrainer

    manifest = {
        "algorithm": {
            "name": "MADDPG",
            "batch_size": cfg["batch_size"],
            "lr_actor": cfg["lr_actor"],
            "lr_critic": cfg["lr_critic"],
            "learn_step": cfg["learn_step"],
            "gamma": cfg["gamma"],
            "tau": cfg["tau"],
            "O_U_noise": True,
            "expl_noise": cfg["expl_noise"],
            "theta": 0.15,
            "dt": 0.01,
            "max_grad_norm": 0,  # off: AgileRL's MADDPG does not clip gradients
        },
        "environment": {
            "name": cfg["env"],
            "num_envs": cfg["num_envs"],
            "sync": bool(cfg.get("sync", False)),
            "env_config": {"continuous_actions": False, "max_cycles": cfg["max_cycles"]},
        },
        "network": {
            "latent_dim": cfg["hidden"],
            "encoder_config": {"arch": "mlp", "hidden_size": [cfg["hidden"]], "layer_norm": False},
            "head_config": {"hidden_size": [cfg["hidden"]], "layer_norm": False},
        },
        "replay_buffer": {"max_size": cfg["memory_size"]},
        "training": {
            "max_steps": cfg["steps"],
            "evo_steps": cfg["steps"],
            "eval_loop": 1,
            "seed": cfg["seed"],
            "progress": False,
            "save_elite": False,
            "run_dir": cfg["run_dir"],
        },
    }
    t0 = time.perf_counter()
    result = LocalTrainer.from_manifest(manifest).train()
    wall = time.perf_counter() - t0
    steps = result.population[0].steps
    print(json.dumps({"side": "ours_sync" if cfg.get("sync") else "ours", "steps": steps, "wall_s": wall, "steps_per_s": steps / wall,
                      "fitness": result.fitnesses[0]}))  # fmt: skip


if __name__ == "__main__":
    main()
