"""Learning against Stable-Baselines3: return at a budget and time to a threshold, RL Zoo hyperparameters on both sides.

Each cell of the suite is one (task, algorithm, side, seed) run in a process of its own, with a
record of its own (``benchmarks/results/gym/bench_learning/<cell>/<side>-s<seed>-<UTC time>.json``),
so the suite fills in over several sessions; ``benchmarks/summarize.py`` builds the learning table
of ``benchmarks/README.md`` (median and IQR over seeds per side, the ratios, the missing cells) and
one learning-curve PNG per cell from the latest record of each (cell, side, seed)::

    python benchmarks/gym/bench_learning.py --list                          # the cells, budgets, thresholds
    python benchmarks/gym/bench_learning.py --cell dqn-CartPole-v1 --side ours --seed 0
    python benchmarks/gym/bench_learning.py --cell dqn-CartPole-v1 --seeds 0 1 2   # both sides, alternating
    python benchmarks/gym/bench_learning.py --algo sac --task Hopper-v5 --steps 30000 --seeds 0
    python benchmarks/gym/bench_learning.py --smoke                         # every cell, both sides, tiny budgets

Our side trains through ``LocalTrainer.from_manifest`` with a manifest a user would write (printed in
the record); SB3's with ``stable_baselines3`` / ``sb3_contrib``. Both take their hyperparameters from
rl-baselines3-zoo's ``hyperparams/*.yml`` (the ``ZOO`` rows below, copied from the zoo's master on
2026-04-23); each cell's ``notes`` say where a zoo setting has no exact counterpart in our manifest
and how it is mapped. Budgets are cut to what 2 shared cores allow (``budget``; the zoo's own is
``zoo_steps``), the same on both sides.

Evaluation is the same protocol on both sides: every ``eval_every`` env steps, the greedy
(deterministic) policy plays ``eval_episodes`` episodes, one per sub-env of a synchronous vector env
reset with seed ``10_000 + seed`` (the same episodes for both sides and every evaluation), with
frozen normalisation statistics where the cell normalises. Evaluation time is not counted as
training time: the clocks pause while it runs. Recorded: the curve (env steps, mean greedy return),
the return at the budget (the last evaluation, at the budget), training wall and CPU seconds, env
steps per training CPU second, the training wall / CPU seconds and steps at which the greedy return
first reached the threshold (None when never; resolution ``eval_every``), peak RSS, versions.
Thresholds are the env's ``reward_threshold`` (the zoo and gymnasium's "solved"); Pendulum-v1 has
none, so -200 (the figure the plugin's own Pendulum tests and examples use); the masked env's is 45.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import benchlib  # noqa: E402

SCRIPT = "gym/bench_learning"
SIDES = ("ours", "sb3")
MASKED_ENV = "MaskedPick"
NO_TENSORBOARD = {"tensorboard": False}
SMOKE_STEPS = 512


# --------------------------------------------------------------------------------------------------
# RL Zoo rows (rl-baselines3-zoo hyperparams/*.yml, master 22e3ff2, 2026-04-23), verbatim but for YAML
# syntax. Hopper-v5 has no row: the zoo's Hopper-v4 row (MuJoCo defaults) is used, v5 being v4's
# successor with the same dynamics.
# --------------------------------------------------------------------------------------------------

ZOO: dict[str, dict[str, Any]] = {
    "dqn-CartPole-v1": {"n_timesteps": 5e4, "policy": "MlpPolicy", "learning_rate": 2.3e-3, "batch_size": 64,
                        "buffer_size": 100000, "learning_starts": 1000, "gamma": 0.99, "target_update_interval": 10,
                        "train_freq": 256, "gradient_steps": 128, "exploration_fraction": 0.16,
                        "exploration_final_eps": 0.04, "policy_kwargs": "dict(net_arch=[256, 256])"},
    "dqn-LunarLander-v3": {"n_timesteps": 1e5, "policy": "MlpPolicy", "learning_rate": 6.3e-4, "batch_size": 128,
                           "buffer_size": 50000, "learning_starts": 0, "gamma": 0.99, "target_update_interval": 250,
                           "train_freq": 4, "gradient_steps": -1, "exploration_fraction": 0.12,
                           "exploration_final_eps": 0.1, "policy_kwargs": "dict(net_arch=[256, 256])"},
    "a2c-CartPole-v1": {"n_envs": 8, "n_timesteps": 5e5, "policy": "MlpPolicy", "ent_coef": 0.0},
    "ppo-LunarLander-v3": {"n_envs": 16, "n_timesteps": 1e6, "policy": "MlpPolicy", "n_steps": 1024,
                           "batch_size": 64, "gae_lambda": 0.98, "gamma": 0.999, "n_epochs": 4, "ent_coef": 0.01},
    "sac-Pendulum-v1": {"n_timesteps": 20000, "policy": "MlpPolicy", "learning_rate": 1e-3},
    "sac-Hopper-v5": {"n_timesteps": 1e6, "policy": "MlpPolicy", "learning_starts": 10000},
    "tqc-Hopper-v5": {"n_timesteps": 1e6, "policy": "MlpPolicy", "learning_starts": 10000,
                      "top_quantiles_to_drop_per_net": 5},
    "td3-Hopper-v5": {"n_timesteps": 1e6, "policy": "MlpPolicy", "learning_starts": 10000, "noise_type": "normal",
                      "noise_std": 0.1, "train_freq": 1, "gradient_steps": 1, "learning_rate": 1e-3,
                      "batch_size": 256, "policy_kwargs": "dict(net_arch=[400, 300])"},
    "sac-HalfCheetah-v5": {"n_timesteps": 1e6, "policy": "MlpPolicy", "learning_starts": 10000},
    "ppo-Hopper-v5": {"normalize": True, "n_envs": 1, "policy": "MlpPolicy", "n_timesteps": 1e6, "batch_size": 32,
                      "n_steps": 512, "gamma": 0.999, "learning_rate": 9.80828e-05, "ent_coef": 0.00229519,
                      "clip_range": 0.2, "n_epochs": 5, "gae_lambda": 0.99, "max_grad_norm": 0.7,
                      "vf_coef": 0.835671, "policy_kwargs": "dict(log_std_init=-2, ortho_init=False, "
                      "activation_fn=nn.ReLU, net_arch=dict(pi=[256, 256], vf=[256, 256]))"},
    # No zoo row (our own env): SB3's PPO defaults with 8 envs x 128 steps.
    f"ppo_masked-{MASKED_ENV}": {"n_envs": 8, "n_steps": 128, "policy": "MlpPolicy (MaskablePPO)"},
}  # fmt: skip


def _mlp(sizes: list[int], activation: str = "ReLU", *, ortho_init: bool = True) -> dict[str, Any]:
    """Our ``network`` section for an MLP of hidden ``sizes`` (SB3's ``net_arch``): the encoder holds
    all but the last, the latent is the last (it is activated), the head is the output layer.
    ``ortho_init: False`` (SB3's policy_kwargs) -> ``init_layers: false`` on both: torch's default init."""
    *hidden, latent = sizes
    widest = max(sizes)
    init = {} if ortho_init else {"init_layers": False}
    return {"latent_dim": latent, "max_latent_dim": max(latent, 128),
            "encoder_config": {"arch": "mlp", "hidden_size": hidden, "layer_norm": False, "activation": activation,
                               "max_mlp_nodes": max(widest, 256), **init},
            "head_config": {"hidden_size": [], "layer_norm": False, "activation": activation, **init}}  # fmt: skip


@dataclass(frozen=True)
class Cell:
    """One (algorithm, task) of the suite; ``ours``/``sb3`` build each side from (seed, steps)."""

    algo: str
    task: str
    budget: int  # env steps per run on this machine (the same on both sides)
    eval_every: int
    threshold: float
    ours: Callable[[int, int], dict[str, Any]]
    sb3: Callable[[int, int], Any]
    notes: list[str] = field(default_factory=list)
    eval_episodes: int = 10
    num_envs: int = 1
    normalize: bool = False
    masked: bool = False

    @property
    def key(self) -> str:
        return f"{self.algo}-{self.task}"


def _training(seed: int, steps: int, eval_every: int, **extra: Any) -> dict[str, Any]:
    return {"max_steps": steps, "evo_steps": eval_every, "seed": seed, "progress": False, "save_elite": False,
            **extra}  # fmt: skip


def _learning_starts(zoo_value: int, steps: int) -> int:
    """The zoo's warm-up, cut to half the budget in a smoke run (so the update path runs)."""
    return min(zoo_value, steps // 2) if benchlib.SMOKE else zoo_value


# ---- DQN ------------------------------------------------------------------------------------------


def _dqn_ours(zoo: dict[str, Any], learn_step: int, burst: int, copy_every: int) -> Callable[[int, int], dict]:
    """SB3's DQN semantics, each with its option (docs/gym.md, DQN): ``learn_step`` x ``burst`` is
    train_freq and ``burst`` gradient_steps, ``copy_every`` the target_update_interval in gradient
    steps, SB3's gradient-norm clip 10 and its linear epsilon schedule."""

    def build(seed: int, steps: int) -> dict[str, Any]:
        return {
            "algorithm": {"name": "DQN", "lr": zoo["learning_rate"], "batch_size": zoo["batch_size"],
                          "learn_step": learn_step, "update_burst": burst, "target_update_interval": copy_every,
                          "max_grad_norm": 10.0, "gamma": zoo["gamma"], "double": False},
            "environment": {"name": zoo["_env"], "num_envs": 1, "sync": True},
            "network": _mlp([256, 256]),
            "replay_buffer": {"max_size": zoo["buffer_size"]},
            "training": _training(seed, steps, zoo["_eval_every"],
                                  learning_delay=_learning_starts(zoo["learning_starts"], steps),
                                  eps_start=1.0, eps_end=zoo["exploration_final_eps"],
                                  eps_linear_steps=int(zoo["exploration_fraction"] * zoo["n_timesteps"])),
            "logging": NO_TENSORBOARD,
        }  # fmt: skip

    return build


def _dqn_sb3(zoo: dict[str, Any]) -> Callable[[int, int], Any]:
    def build(seed: int, steps: int) -> Any:
        from stable_baselines3 import DQN
        from stable_baselines3.common.env_util import make_vec_env

        env = make_vec_env(zoo["_env"], n_envs=1, seed=seed)
        kw = {k: v for k, v in zoo.items() if not k.startswith("_") and k not in ("n_timesteps", "policy",
                                                                               "policy_kwargs")}  # fmt: skip
        kw["learning_starts"] = _learning_starts(zoo["learning_starts"], steps)
        # The zoo's schedule is a fraction of ITS budget; ours may be cut: keep the same number of steps.
        kw["exploration_fraction"] = min(1.0, zoo["exploration_fraction"] * zoo["n_timesteps"] / steps)
        return DQN("MlpPolicy", env, policy_kwargs={"net_arch": [256, 256]}, seed=seed, device="cpu", **kw)

    return build


# ---- A2C / PPO --------------------------------------------------------------------------------------


def _a2c_cartpole_ours(seed: int, steps: int) -> dict[str, Any]:
    return {
        "algorithm": {"name": "A2C", "learn_step": 5 * 8, "lr": 7e-4, "use_rms_prop": True, "gamma": 0.99,
                      "gae_lambda": 1.0, "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5,
                      "normalize_advantages": False},
        "environment": {"name": "CartPole-v1", "num_envs": 8, "sync": True},
        "network": _mlp([64, 64], "Tanh"),
        "training": _training(seed, steps, CELLS_EVAL["a2c-CartPole-v1"]),
        "logging": NO_TENSORBOARD,
    }  # fmt: skip


def _a2c_cartpole_sb3(seed: int, steps: int) -> Any:
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    return A2C("MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=seed), ent_coef=0.0, seed=seed, device="cpu")


def _ppo_lunar_ours(seed: int, steps: int) -> dict[str, Any]:
    return {
        "algorithm": {"name": "PPO", "learn_step": 1024 * 16, "batch_size": 64, "update_epochs": 4, "lr": 3e-4,
                      "gamma": 0.999, "gae_lambda": 0.98, "clip_coef": 0.2, "ent_coef": 0.01, "vf_coef": 0.5,
                      "max_grad_norm": 0.5, "share_encoders": False, "action_std_init": 0.0},
        "environment": {"name": "LunarLander-v3", "num_envs": 16, "sync": True},
        "network": _mlp([64, 64], "Tanh"),
        "training": _training(seed, steps, CELLS_EVAL["ppo-LunarLander-v3"]),
        "logging": NO_TENSORBOARD,
    }  # fmt: skip


def _ppo_lunar_sb3(seed: int, steps: int) -> Any:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("LunarLander-v3", n_envs=16, seed=seed)
    return PPO("MlpPolicy", env, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4,
               ent_coef=0.01, seed=seed, device="cpu")  # fmt: skip


def _ppo_hopper_ours(seed: int, steps: int) -> dict[str, Any]:
    return {
        "algorithm": {"name": "PPO", "learn_step": 512, "batch_size": 32, "update_epochs": 5, "lr": 9.80828e-05,
                      "gamma": 0.999, "gae_lambda": 0.99, "clip_coef": 0.2, "ent_coef": 0.00229519,
                      "vf_coef": 0.835671, "max_grad_norm": 0.7, "share_encoders": False, "action_std_init": -2.0},
        "environment": {"name": "Hopper-v5", "num_envs": 1, "sync": True, "normalize": {"obs": True, "reward": True}},
        "network": _mlp([256, 256], "ReLU", ortho_init=False),
        "training": _training(seed, steps, CELLS_EVAL["ppo-Hopper-v5"]),
        "logging": NO_TENSORBOARD,
    }  # fmt: skip


def _ppo_hopper_sb3(seed: int, steps: int) -> Any:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=seed), gamma=0.999)
    return PPO("MlpPolicy", env, batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05,
               ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7,
               vf_coef=0.835671, seed=seed, device="cpu",
               policy_kwargs={"log_std_init": -2, "ortho_init": False, "activation_fn": torch.nn.ReLU,
                              "net_arch": {"pi": [256, 256], "vf": [256, 256]}})  # fmt: skip


def _ppo_masked_ours(seed: int, steps: int) -> dict[str, Any]:
    return {
        "algorithm": {"name": "PPO", "action_masking": True, "learn_step": 128 * 8, "batch_size": 64,
                      "update_epochs": 10, "lr": 3e-4, "gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.2,
                      "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5, "share_encoders": False},
        "environment": {"name": MASKED_ENV, "custom": True, "entrypoint": "masked_env:MaskedPickEnv",
                        "path": str(HERE), "num_envs": 8, "sync": True},
        "network": _mlp([64, 64], "Tanh"),
        "training": _training(seed, steps, CELLS_EVAL[f"ppo_masked-{MASKED_ENV}"]),
        "logging": NO_TENSORBOARD,
    }  # fmt: skip


def _masked_vec(n: int, seed: int | None = None) -> Any:
    from stable_baselines3.common.env_util import make_vec_env

    sys.path.insert(0, str(HERE))
    from masked_env import MaskedPickEnv

    return make_vec_env(MaskedPickEnv, n_envs=n, seed=seed)


def _ppo_masked_sb3(seed: int, steps: int) -> Any:
    from sb3_contrib import MaskablePPO

    return MaskablePPO("MlpPolicy", _masked_vec(8, seed), n_steps=128, batch_size=64, seed=seed, device="cpu")


# ---- SAC / TQC / TD3 --------------------------------------------------------------------------------


def _sac_ours(name: str, env_id: str, lr: float, learning_starts: int, **extra: Any) -> Callable[[int, int], dict]:
    def build(seed: int, steps: int) -> dict[str, Any]:
        return {
            "algorithm": {"name": name, "lr_actor": lr, "lr_critic": lr, "batch_size": 256, "learn_step": 1,
                          "gamma": 0.99, "tau": 0.005, "ent_coef": "auto", **extra},
            "environment": {"name": env_id, "num_envs": 1, "sync": True},
            "network": _mlp([256, 256]),
            "replay_buffer": {"max_size": 1_000_000},
            "training": _training(seed, steps, CELLS_EVAL[f"{name.lower()}-{env_id}"],
                                  learning_delay=_learning_starts(learning_starts, steps)),
            "logging": NO_TENSORBOARD,
        }  # fmt: skip

    return build


def _sac_sb3(name: str, env_id: str, lr: float, learning_starts: int, **extra: Any) -> Callable[[int, int], Any]:
    def build(seed: int, steps: int) -> Any:
        from sb3_contrib import TQC
        from stable_baselines3 import SAC
        from stable_baselines3.common.env_util import make_vec_env

        cls = TQC if name == "TQC" else SAC
        env = make_vec_env(env_id, n_envs=1, seed=seed)
        return cls("MlpPolicy", env, learning_rate=lr, learning_starts=_learning_starts(learning_starts, steps),
                   seed=seed, device="cpu", **extra)  # fmt: skip

    return build


def _td3_hopper_ours(seed: int, steps: int) -> dict[str, Any]:
    return {
        "algorithm": {"name": "TD3", "lr_actor": 1e-3, "lr_critic": 1e-3, "batch_size": 256, "learn_step": 1,
                      "gamma": 0.99, "tau": 0.005, "policy_freq": 2, "policy_noise": 0.2, "noise_clip": 0.5,
                      "O_U_noise": False, "expl_noise": 0.1},
        "environment": {"name": "Hopper-v5", "num_envs": 1, "sync": True},
        "network": _mlp([400, 300]),
        "replay_buffer": {"max_size": 1_000_000},
        "training": _training(seed, steps, CELLS_EVAL["td3-Hopper-v5"],
                              learning_delay=_learning_starts(10000, steps)),
        "logging": NO_TENSORBOARD,
    }  # fmt: skip


def _td3_hopper_sb3(seed: int, steps: int) -> Any:
    import numpy as np
    from stable_baselines3 import TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    env = make_vec_env("Hopper-v5", n_envs=1, seed=seed)
    n = env.action_space.shape[0]
    return TD3("MlpPolicy", env, learning_starts=_learning_starts(10000, steps), learning_rate=1e-3, batch_size=256,
               train_freq=1, gradient_steps=1, action_noise=NormalActionNoise(np.zeros(n), 0.1 * np.ones(n)),
               policy_kwargs={"net_arch": [400, 300]}, seed=seed, device="cpu")  # fmt: skip


# ---- the suite ------------------------------------------------------------------------------------

CELLS_EVAL: dict[str, int] = {
    "dqn-CartPole-v1": 2_500, "dqn-LunarLander-v3": 10_000, "a2c-CartPole-v1": 10_000,
    "ppo-LunarLander-v3": 32_768, "sac-Pendulum-v1": 2_000, "sac-Hopper-v5": 5_000, "tqc-Hopper-v5": 5_000,
    "td3-Hopper-v5": 5_000, "sac-HalfCheetah-v5": 10_000, "ppo-Hopper-v5": 10_240,
    f"ppo_masked-{MASKED_ENV}": 8_192,
}  # fmt: skip


def _zoo(key: str, env_id: str) -> dict[str, Any]:
    return {**ZOO[key], "_env": env_id, "_eval_every": CELLS_EVAL[key]}


DQN_NOTES = [
    "vanilla DQN on both sides (our `double: false`; SB3's DQN has no double Q)",
    "exploration_fraction x the zoo's n_timesteps -> `training.eps_linear_steps` (SB3's linear schedule); at a cut "
    "budget SB3's exploration_fraction is rescaled to keep that step; SB3's max_grad_norm 10 -> `max_grad_norm: 10`",
]

CELLS: dict[str, Cell] = {
    c.key: c
    for c in [
        Cell("dqn", "CartPole-v1", 50_000, CELLS_EVAL["dqn-CartPole-v1"], 475.0,
             _dqn_ours(_zoo("dqn-CartPole-v1", "CartPole-v1"), 2, 128, 128),
             _dqn_sb3(_zoo("dqn-CartPole-v1", "CartPole-v1")),
             notes=[*DQN_NOTES,
                    "train_freq 256 / gradient_steps 128 -> `learn_step: 2, update_burst: 128` (128 gradient steps "
                    "every 256 env steps)",
                    "target_update_interval 10 (a hard copy every 10 env steps, in SB3's collection between "
                    "bursts: the target is the online net as each burst starts) -> `target_update_interval: 128` "
                    "(a hard copy every 128 gradient steps: after each burst)"]),
        Cell("dqn", "LunarLander-v3", 100_000, CELLS_EVAL["dqn-LunarLander-v3"], 200.0,
             _dqn_ours(_zoo("dqn-LunarLander-v3", "LunarLander-v3"), 1, 4, 250),
             _dqn_sb3(_zoo("dqn-LunarLander-v3", "LunarLander-v3")),
             notes=[*DQN_NOTES, "train_freq 4 / gradient_steps -1 (as many as env steps) -> "
                    "`learn_step: 1, update_burst: 4`",
                    "target_update_interval 250 (env steps; one gradient step per env step) -> "
                    "`target_update_interval: 250` (gradient steps)"]),
        Cell("a2c", "CartPole-v1", 100_000, CELLS_EVAL["a2c-CartPole-v1"], 475.0,
             _a2c_cartpole_ours, _a2c_cartpole_sb3, num_envs=8,
             notes=["SB3 defaults: n_steps 5 x 8 envs -> `learn_step: 40`, RMSprop, lr 7e-4, separate 64-64 tanh",
                    "SB3's orthogonal init (gain sqrt(2) on both hidden layers, .01 policy output, 1 value output): "
                    "ours the same (A2C's encoder latent layer at sqrt(2), `encoder_config.output_gain`)"]),
        Cell("ppo", "LunarLander-v3", 1_000_000, CELLS_EVAL["ppo-LunarLander-v3"], 200.0,
             _ppo_lunar_ours, _ppo_lunar_sb3, num_envs=16,
             notes=["n_steps 1024 x 16 envs -> `learn_step: 16384`; SB3 defaults for the rest (lr 3e-4, clip .2, "
                    "vf .5, grad-norm .5), separate 64-64 tanh",
                    "SB3's orthogonal init (gain sqrt(2) on both hidden layers, .01 policy output, 1 value output): ours "
                    "the same (PPO's encoder latent layer at sqrt(2) since the ablation, `encoder_config.output_gain`)"]),
        Cell("sac", "Pendulum-v1", 20_000, CELLS_EVAL["sac-Pendulum-v1"], -200.0,
             _sac_ours("SAC", "Pendulum-v1", 1e-3, 100), _sac_sb3("SAC", "Pendulum-v1", 1e-3, 100),
             notes=["SB3 defaults for the rest (batch 256, tau .005, learning_starts 100, ent_coef auto, 256-256); "
                    "learning_rate 1e-3 -> `lr_actor` = `lr_critic` = 1e-3 (the entropy coefficient's too, as SB3)"]),
        Cell("sac", "Hopper-v5", 1_000_000, CELLS_EVAL["sac-Hopper-v5"], 3800.0,
             _sac_ours("SAC", "Hopper-v5", 3e-4, 10_000), _sac_sb3("SAC", "Hopper-v5", 3e-4, 10_000),
             eval_episodes=5, notes=["the zoo's Hopper-v4 row (MuJoCo defaults + learning_starts 10000)"]),
        Cell("tqc", "Hopper-v5", 1_000_000, CELLS_EVAL["tqc-Hopper-v5"], 3800.0,
             _sac_ours("TQC", "Hopper-v5", 3e-4, 10_000, top_quantiles_to_drop_per_net=5),
             _sac_sb3("TQC", "Hopper-v5", 3e-4, 10_000, top_quantiles_to_drop_per_net=5),
             eval_episodes=5, notes=["the zoo's Hopper-v4 row; sb3-contrib defaults (25 quantiles, 2 critics, "
                                     "256-256) on both sides"]),
        Cell("td3", "Hopper-v5", 1_000_000, CELLS_EVAL["td3-Hopper-v5"], 3800.0,
             _td3_hopper_ours, _td3_hopper_sb3, eval_episodes=5,
             notes=["noise_type normal, noise_std 0.1 -> `O_U_noise: false`, `expl_noise: 0.1`; 400-300 ReLU"]),
        Cell("sac", "HalfCheetah-v5", 1_000_000, CELLS_EVAL["sac-HalfCheetah-v5"], 4800.0,
             _sac_ours("SAC", "HalfCheetah-v5", 3e-4, 10_000), _sac_sb3("SAC", "HalfCheetah-v5", 3e-4, 10_000),
             eval_episodes=5, notes=["the zoo's HalfCheetah-v4 row (MuJoCo defaults)"]),
        Cell("ppo", "Hopper-v5", 1_000_000, CELLS_EVAL["ppo-Hopper-v5"], 3800.0,
             _ppo_hopper_ours, _ppo_hopper_sb3, eval_episodes=5, normalize=True,
             notes=["normalize: true -> `environment.normalize: {obs: true, reward: true}` (VecNormalize's "
                    "defaults, reward discount = gamma 0.999 on both sides)",
                    "log_std_init -2 -> `action_std_init: -2`; ortho_init False -> `init_layers: false` (encoder and head)"]),
        Cell("ppo_masked", MASKED_ENV, 50_000, CELLS_EVAL[f"ppo_masked-{MASKED_ENV}"], 45.0,
             _ppo_masked_ours, _ppo_masked_sb3, num_envs=8, masked=True,
             notes=["no zoo row (our own env, benchmarks/gym/masked_env.py): SB3 PPO defaults with 8 envs x 128 "
                    "steps -> `learn_step: 1024`; sb3-contrib's MaskablePPO against our `action_masking: true`"]),
    ]
}  # fmt: skip


# --------------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------------


def _eval_env(cell: Cell) -> Any:
    import gymnasium as gym

    if not cell.masked and "mujoco" in str(gym.spec(cell.task).entry_point):
        # MuJoCo's default warning handler appends to MUJOCO_LOG.TXT in the working directory (the
        # MuJoCo tasks' models warn on load): to stderr instead, for both sides (ours routes its own).
        import mujoco

        mujoco.set_mju_user_warning(lambda msg: print(f"[bench] MuJoCo: {str(msg).strip()}", file=sys.stderr))
    if cell.masked:
        sys.path.insert(0, str(HERE))
        from masked_env import MaskedPickEnv

        return gym.vector.SyncVectorEnv([MaskedPickEnv for _ in range(cell.eval_episodes)])
    return gym.vector.SyncVectorEnv([lambda: gym.make(cell.task) for _ in range(cell.eval_episodes)])


def _play(env: Any, act: Callable[[Any], Any], seed: int) -> float:
    """Mean return of one episode per sub-env of ``env`` (reset with ``seed``), greedy actions from ``act``."""
    import numpy as np

    obs, _ = env.reset(seed=seed)
    total = np.zeros(env.num_envs)
    done = np.zeros(env.num_envs, dtype=bool)
    while not done.all():
        obs, reward, term, trunc, _ = env.step(act(obs))
        total += np.where(done, 0.0, reward)
        done |= term | trunc
    return float(total.mean())


class Clock:
    """Training wall and CPU seconds, evaluation excluded; the curve and the first threshold crossing."""

    def __init__(self, cell: Cell, seed: int) -> None:
        self.cell, self.eval_seed = cell, 10_000 + seed
        self.env = _eval_env(cell)
        self.start, self.start_cpu = time.perf_counter(), time.process_time()
        self.paused = self.paused_cpu = 0.0
        self.curve: list[tuple[int, float]] = []
        self.reached: dict[str, float] | None = None

    def trained(self) -> tuple[float, float]:
        return (time.perf_counter() - self.start - self.paused, time.process_time() - self.start_cpu - self.paused_cpu)

    def evaluate(self, steps: int, score: Callable[[Any, int], float]) -> float:
        wall, cpu = self.trained()
        t0, c0 = time.perf_counter(), time.process_time()
        ret = score(self.env, self.eval_seed)
        self.paused += time.perf_counter() - t0
        self.paused_cpu += time.process_time() - c0
        self.curve.append((int(steps), round(ret, 3)))
        if self.reached is None and ret >= self.cell.threshold:
            self.reached = {"steps": int(steps), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
        print(f"[bench] {self.cell.key} {steps:>8d} steps  greedy return {ret:9.2f}", flush=True)
        return ret


def run_ours(cell: Cell, seed: int, steps: int, clock: Clock) -> tuple[int, dict[str, Any]]:
    from agilerl.training.trainer import LocalTrainer

    manifest = cell.ours(seed, steps)
    if benchlib.SMOKE:
        manifest["training"]["evo_steps"] = max(steps // 2, 1)
    trainer = LocalTrainer.from_manifest(manifest, run_dir=tempfile.mkdtemp(prefix="bench-learning-"))

    # The shared protocol replaces the run's own evaluation (same episodes and seeds as SB3's side);
    # agent.test plays greedily, masks applied and normalisation statistics frozen, as in any run.
    def evaluate(agent: Any, run: Any) -> float:
        return clock.evaluate(agent.steps, lambda env, s: agent.test(env, seed=s))

    trainer.strategy.evaluate = evaluate  # type: ignore[method-assign]
    result = trainer.train()
    return int(result.population[0].steps), manifest


def run_sb3(cell: Cell, seed: int, steps: int, clock: Clock) -> tuple[int, dict[str, Any]]:
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    model = cell.sb3(seed, steps)
    every = max(steps // 2, 1) if benchlib.SMOKE else cell.eval_every

    def policy(env: Any, s: int) -> float:
        norm = model.get_vec_normalize_env()

        def act(obs: Any) -> Any:
            if norm is not None:
                obs = norm.normalize_obs(obs)  # the statistics as they are, not updated
            if cell.masked:
                masks = np.stack(env.call("action_masks"))
                return model.predict(obs, deterministic=True, action_masks=masks)[0]
            return model.predict(obs, deterministic=True)[0]

        return _play(env, act, s)

    class Eval(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next = every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next:
                self.next += every
                clock.evaluate(self.num_timesteps, policy)
            return True

    model.learn(total_timesteps=steps, callback=Eval())
    if not clock.curve or clock.curve[-1][0] < model.num_timesteps:
        clock.evaluate(model.num_timesteps, policy)
    settings = {k: repr(getattr(model, k)) for k in _SB3_FIELDS if hasattr(model, k)}
    return int(model.num_timesteps), {"class": type(model).__name__, **settings}


_SB3_FIELDS = ("learning_rate", "batch_size", "n_steps", "n_epochs", "gamma", "gae_lambda", "ent_coef", "vf_coef",
               "max_grad_norm", "buffer_size", "learning_starts", "train_freq", "gradient_steps", "tau",
               "target_update_interval", "exploration_fraction", "exploration_final_eps", "policy_kwargs",
               "top_quantiles_to_drop_per_net", "action_noise", "n_envs")  # fmt: skip


def _env_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("gymnasium", "mujoco", "box2d-py", "Box2D", "stable-baselines3", "sb3-contrib", "torch", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def run_cell(cell: Cell, side: str, seed: int, steps: int) -> dict[str, Any]:
    """Train one (cell, side, seed) here and return its raw record."""
    import torch

    torch.set_num_threads(1)
    import gymnasium  # noqa: F401  (imports before the clock: import time is not training time)

    if side == "ours":
        import agilerl.training.trainer  # noqa: F401
    else:
        import stable_baselines3  # noqa: F401

        torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # its first use imports torch._dynamo
    clock = Clock(cell, seed)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    done, config = (run_ours if side == "ours" else run_sb3)(cell, seed, steps, clock)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    train_wall, train_cpu = clock.trained()
    return {
        "cell": cell.key, "algo": cell.algo, "task": cell.task, "side": side, "seed": seed, "budget": steps,
        "steps": done, "threshold": cell.threshold, "eval_every": cell.eval_every,
        "eval_episodes": cell.eval_episodes, "curve": clock.curve,
        "final_return": clock.curve[-1][1] if clock.curve else None,
        "reached": clock.reached, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "train_wall_s": round(train_wall, 2), "train_cpu_s": round(train_cpu, 2),
        "steps_per_cpu_s": round(done / train_cpu, 1) if train_cpu > 0 else None,
        "peak_rss_mb": round(r1.ru_maxrss / 1024, 1), "zoo": ZOO.get(cell.key), "notes": cell.notes,
        "config": config, "env_versions": _env_versions(),
    }  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------


def _select(args: argparse.Namespace) -> list[Cell]:
    cells = [CELLS[c] for c in args.cell] if args.cell else list(CELLS.values())
    if args.algo:
        cells = [c for c in cells if c.algo == args.algo]
    if args.task:
        cells = [c for c in cells if c.task == args.task]
    return cells


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cell", nargs="+", choices=sorted(CELLS), help="cells (default: every cell the filters leave)")
    ap.add_argument("--algo", help="e.g. dqn, sac, ppo_masked")
    ap.add_argument("--task", help="e.g. CartPole-v1, Hopper-v5")
    ap.add_argument("--side", choices=SIDES, help="one side (default: both, alternating per seed)")
    ap.add_argument("--seed", type=int, help="one seed (same as --seeds N)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, help="env steps per run (default: the cell's budget)")
    ap.add_argument("--smoke", action="store_true", help="every selected cell, one seed, tiny budgets, no records")
    ap.add_argument("--list", action="store_true", help="print the cells and exit")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cells = _select(args)
    if not cells:
        ap.error("no cell matches --cell/--algo/--task; see --list")
    if args.list:
        for c in cells:
            print(f"{c.key:28s} budget {c.budget:>9,d}  eval every {c.eval_every:>6,d}  threshold {c.threshold:g}")
        return 0
    if args.smoke:
        benchlib.SMOKE = True
        os.environ["AGILERL_BENCH_SMOKE"] = "1"
    sides = [args.side] if args.side else list(SIDES)
    if "sb3" in sides and not benchlib.has_module("sb3_contrib", "Stable-Baselines3 / sb3-contrib"):
        sides.remove("sb3")
    seeds = [args.seed] if args.seed is not None else args.seeds
    if benchlib.SMOKE:  # in-process, one seed, tiny budget: proves every cell's both sides build and run
        for cell in cells:
            for side in sides:
                raw = run_cell(cell, side, seeds[0], args.steps or SMOKE_STEPS)
                print(f"[bench] smoke {cell.key} {side}: {raw['steps']} steps, return {raw['final_return']}")
        return 0
    if args.worker:  # one (cell, side, seed) in this process: its record
        (cell,) = cells
        (side,) = sides
        record = benchlib.Record(SCRIPT)
        raw = run_cell(cell, side, seeds[0], args.steps or cell.budget)
        record.save(raw, name=f"{cell.key}/{side}-s{seeds[0]}-{record.started:%Y%m%dT%H%M%SZ}")
        return 0
    failed = 0
    for cell in cells:
        for i, seed in enumerate(seeds):
            for side in sides if i % 2 == 0 else sides[::-1]:
                print(f"[bench] {cell.key} {side} seed {seed}", flush=True)
                failed += not run_worker(
                    __file__, ["--cell", cell.key, "--side", side, "--seed", str(seed)], args.steps
                )
    return 1 if failed else 0


def run_worker(script: str, select: list[str], steps: int | None) -> bool:
    """Run ``script --worker`` for the one (cell, side or variant, seed) ``select`` names, in a
    process of its own with one torch thread and only the gym plugin loaded; whether it succeeded."""
    cmd = [sys.executable, script, "--worker", *select, *(["--steps", str(steps)] if steps else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AGILERL_LOAD_PLUGINS": "gym"}
    return subprocess.run(cmd, env=env, check=False).returncode == 0


if __name__ == "__main__":
    sys.exit(main())
