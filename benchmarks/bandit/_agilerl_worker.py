"""Runs inside the AgileRL virtualenv: NeuralUCB from PyPI `agilerl` on the iris table given as CSVs.

The loop body is AgileRL 2.58's own `train_bandits` inner loop (act, step, TensorDict into its
ReplayBuffer, `learn_step` gradient steps per env step once the buffer holds a batch), timed
without evaluation or logging. Prints one JSON line.
"""

from __future__ import annotations

import json
import random
import sys
import time

import numpy as np
import pandas as pd
import torch
from tensordict import TensorDict

from agilerl.algorithms import NeuralUCB
from agilerl.components.replay_buffer import ReplayBuffer
from agilerl.components.sampler import Sampler
from agilerl.wrappers.learning import BanditEnv


def main() -> None:
    cfg = json.loads(sys.argv[1])
    torch.set_num_threads(1)
    random.seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    features = pd.read_csv(cfg["features"])
    targets = pd.read_csv(cfg["targets"])
    env = BanditEnv(features, targets)
    hidden = cfg["hidden_size"]
    net_config = {
        "encoder_config": {"hidden_size": hidden[:-2]},
        "latent_dim": hidden[-2],
        "head_config": {"hidden_size": hidden[-1:], "layer_norm": False},
    }
    agent = NeuralUCB(
        env.single_observation_space,
        env.single_action_space,
        net_config=net_config,
        gamma=cfg["gamma"],
        lamb=cfg["lamb"],
        reg=cfg["reg"],
        lr=cfg["lr"],
        batch_size=cfg["batch_size"],
        learn_step=cfg["learn_step"],
    )
    memory = ReplayBuffer(max_size=10_000)
    sampler = Sampler(memory=memory)
    steps = cfg["steps"]
    regret = 0.0
    rewards = []
    context = env.reset()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        action = agent.get_action(context)
        next_context, reward = env.step(action)
        transition = TensorDict({"obs": torch.as_tensor(context[action]), "reward": torch.as_tensor(reward)})
        transition = transition.unsqueeze(0)
        transition.batch_size = torch.Size([1])
        memory.add(transition)
        if len(memory) >= agent.batch_size:
            for _ in range(agent.learn_step):
                agent.learn(sampler.sample(agent.batch_size))
        regret += 1.0 - float(reward)
        rewards.append(float(reward))
        context = next_context
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    params = sum(p.numel() for p in agent.actor.parameters())
    print(json.dumps({"steps_per_s": steps / elapsed, "regret": regret, "last500": float(np.mean(rewards[-500:])),
                      "params": params, "seconds": elapsed,
                      "cpu_steps_per_s": steps / cpu}))  # fmt: skip


if __name__ == "__main__":
    main()
