"""Benchmark worker (AgileRL from PyPI): train AgileRL's MADDPG and print one JSON line.

Runs inside the separate AgileRL virtualenv that bench_maddpg.py creates; argv[1] is the shared JSON
config. Uses AgileRL's own AsyncPettingZooVecEnv, MADDPG, ReplayBuffer and
train_multi_agent_off_policy, set up as in AgileRL's MADDPG tutorial.
"""

from __future__ import annotations

import importlib
import json
import sys
import time


def main() -> None:
    cfg = json.loads(sys.argv[1])
    import numpy as np
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    from agilerl.algorithms import MADDPG
    from agilerl.components.replay_buffer import ReplayBuffer
    from agilerl.training.train_multi_agent_off_policy import train_multi_agent_off_policy
    from agilerl.vector.pz_async_vec_env import AsyncPettingZooVecEnv

    module = importlib.import_module(cfg["env"])

    def make_env():  # type: ignore[no-untyped-def]
        return module.parallel_env(continuous_actions=False, max_cycles=cfg["max_cycles"])

    t0 = time.perf_counter()
    env = AsyncPettingZooVecEnv([make_env for _ in range(cfg["num_envs"])])
    env.reset(seed=cfg["seed"])
    agent_ids = list(env.agents)
    h = cfg["hidden"]
    net_config = {
        "latent_dim": h,
        "encoder_config": {"hidden_size": [h], "layer_norm": False},
        "head_config": {"hidden_size": [h], "layer_norm": False},
    }
    agent = MADDPG(
        observation_spaces=[env.single_observation_space(a) for a in agent_ids],
        action_spaces=[env.single_action_space(a) for a in agent_ids],
        agent_ids=agent_ids,
        O_U_noise=True,
        expl_noise=cfg["expl_noise"],
        vect_noise_dim=cfg["num_envs"],
        net_config=net_config,
        batch_size=cfg["batch_size"],
        lr_actor=cfg["lr_actor"],
        lr_critic=cfg["lr_critic"],
        learn_step=cfg["learn_step"],
        gamma=cfg["gamma"],
        tau=cfg["tau"],
    )
    memory = ReplayBuffer(max_size=cfg["memory_size"])
    pop, fitnesses = train_multi_agent_off_policy(
        env,
        cfg["env"],
        "MADDPG",
        [agent],
        memory,
        max_steps=cfg["steps"],
        evo_steps=cfg["steps"],
        eval_loop=1,
        verbose=False,
    )
    wall = time.perf_counter() - t0
    env.close()
    steps = int(pop[0].steps[-1]) if isinstance(pop[0].steps, list) else int(pop[0].steps)
    fit = fitnesses[0]
    print(json.dumps({"side": "agilerl", "steps": steps, "wall_s": wall, "steps_per_s": steps / wall,
                      "fitness": float(fit if not isinstance(fit, dict) else sum(fit.values()))}))  # fmt: skip


if __name__ == "__main__":
    main()
