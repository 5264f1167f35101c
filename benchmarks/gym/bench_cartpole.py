"""agilerl vs Stable-Baselines3 vs a bare single-file script: PPO and DQN, side by side.

Run from the repository root (takes a while; every measurement is its own subprocess so peak RSS
is per run)::

    python benchmarks/gym/bench_cartpole.py                    # throughput + time-to-solve, 5 seeds
    python benchmarks/gym/bench_cartpole.py --seeds 3 --algos ppo --envs CartPole-v1
    python benchmarks/gym/bench_cartpole.py --skip-solve        # throughput and peak RSS, 7 interleaved repeats

Each run writes ``benchmarks/results/gym/bench_cartpole/<UTC time>.json`` (``benchlib.Record``).

Same hyperparameters on every side, 8 envs, 1 torch thread:

* PPO: 256 steps x 8 envs per rollout, minibatch 128, 4 epochs, lr 1e-3, gamma .99, GAE .95,
  clip .2, no entropy bonus, separate 64-64 ReLU actor and critic.
* DQN (vanilla, as SB3's): batch 128, 2 gradient steps per vector step, lr 1e-3, soft target
  tau .005 every step, Huber loss, buffer 50k, 1000 warm-up steps, 128-128 ReLU MLP, epsilon 1 -> .05.

Reports: env-steps/s over a fixed budget (no evaluation; the clock starts after imports and covers
building the envs and the model, and training), the median over seeds of training wall
seconds to a mean greedy evaluation return of 475 on CartPole-v1 / -100 on Acrobot-v1 (10
episodes every ``eval_every`` steps; evaluation time is not counted), and peak RSS. The
throughput part also runs ``floor.py`` (a bare loop: env steps, one no-grad forward per step, the
matched update alone) and prints each framework's throughput as a fraction of it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import benchlib  # noqa: E402

FRAMEWORKS = ("agilerl", "sb3", "bare")
#: Throughput-only reference: env stepping + one no-grad forward per step + the matched update (floor.py).
FLOOR = "floor"
TARGETS = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0}
THROUGHPUT_STEPS = {"ppo": 81_920, "dqn": 20_000}
SOLVE_BUDGET = {"ppo": 300_000, "dqn": 200_000}
EVAL_EVERY = {"ppo": 10_240, "dqn": 5_000}
if benchlib.SMOKE:  # tiny budgets still go through the evaluation path
    EVAL_EVERY = {"ppo": 2_048, "dqn": 1_000}
EVAL_EPISODES = 10
#: SB3 (and sb3-contrib) write no TensorBoard events unless given ``tensorboard_log``; our runs write
#: them by default when tensorboard is installed (~16 MB of RSS for its import): off, to match.
NO_TENSORBOARD = {"tensorboard": False}


# --------------------------------------------------------------------------------------------------
# Shared evaluation (identical for every framework)
# --------------------------------------------------------------------------------------------------


def evaluate(env_id: str, policy: Any, seed: int) -> float:
    import gymnasium as gym
    import numpy as np

    env = gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(EVAL_EPISODES)])
    obs, _ = env.reset(seed=seed)
    total = np.zeros(EVAL_EPISODES)
    done = np.zeros(EVAL_EPISODES, bool)
    while not done.all():
        obs, r, term, trunc, _ = env.step(policy(obs))
        total += np.where(done, 0.0, r)
        done |= term | trunc
    env.close()
    return float(total.mean())


class SolveClock:
    """Counts training time only (wall and process CPU): evaluation pauses both clocks."""

    def __init__(self, env_id: str, seed: int) -> None:
        self.env_id, self.seed, self.target = env_id, seed, TARGETS[env_id]
        self.start, self.start_cpu = time.perf_counter(), time.process_time()
        self.paused = self.paused_cpu = 0.0
        self.solved_at: float | None = None
        self.solved_cpu: float | None = None
        self.solved_steps: int | None = None

    def check(self, steps: int, policy: Any) -> bool:
        trained_for = time.perf_counter() - self.start - self.paused
        trained_cpu = time.process_time() - self.start_cpu - self.paused_cpu
        t0, c0 = time.perf_counter(), time.process_time()
        score = evaluate(self.env_id, policy, self.seed + 10_000)
        self.paused += time.perf_counter() - t0
        self.paused_cpu += time.process_time() - c0
        if score >= self.target and self.solved_at is None:
            self.solved_at, self.solved_cpu, self.solved_steps = trained_for, trained_cpu, steps
        return self.solved_at is not None


# --------------------------------------------------------------------------------------------------
# The three implementations
# --------------------------------------------------------------------------------------------------


def _agilerl_manifest(algo: str, env_id: str, steps: int, seed: int, evo_steps: int) -> dict[str, Any]:
    env = {"name": env_id, "num_envs": 8, "sync": True}
    training = {"max_steps": steps, "evo_steps": evo_steps, "seed": seed, "progress": False, "save_elite": False}
    if algo == "ppo":
        return {
            "algorithm": {"name": "PPO", "learn_step": 2048, "batch_size": 128, "update_epochs": 4, "lr": 1e-3,
                          "gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.2, "ent_coef": 0.0, "vf_coef": 0.5,
                          "max_grad_norm": 0.5, "share_encoders": False},
            "environment": env,
            "network": {"latent_dim": 64, "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False},
                        "head_config": {"hidden_size": [], "layer_norm": False}},
            "training": training,
            "logging": NO_TENSORBOARD,
        }  # fmt: skip
    return {
        # double: false -- SB3's DQN and the bare script are vanilla DQN; compare like with like.
        "algorithm": {"name": "DQN", "batch_size": 128, "lr": 1e-3, "learn_step": 4, "gamma": 0.99, "tau": 0.005,
                      "double": False},
        "environment": env,
        "network": {"latent_dim": 128, "encoder_config": {"arch": "mlp", "hidden_size": [128], "layer_norm": False},
                    "head_config": {"hidden_size": [], "layer_norm": False}},
        "replay_buffer": {"max_size": 50_000},
        "training": {**training, "learning_delay": 1000, "eps_start": 1.0, "eps_end": 0.05, "eps_decay": 0.997},
        "logging": NO_TENSORBOARD,
    }  # fmt: skip


def run_agilerl(algo: str, env_id: str, steps: int, seed: int, clock: SolveClock | None, run_dir: str) -> int:
    from agilerl.training.trainer import LocalTrainer

    evo = EVAL_EVERY[algo] if clock else steps
    trainer = LocalTrainer.from_manifest(_agilerl_manifest(algo, env_id, steps, seed, evo), run_dir=run_dir)
    strategy = trainer.strategy
    if clock is not None:
        # Evaluate with the shared protocol; stop the run once solved.
        def evaluate_hook(agent: Any, run: Any) -> float:
            solved = clock.check(agent.steps, agent.greedy_action)
            return 1.0 if solved else 0.0

        strategy.evaluate = evaluate_hook  # type: ignore[method-assign]
        trainer.manifest.training.target_score = 1.0
    else:
        strategy.evaluate = lambda agent, run: 0.0  # type: ignore[method-assign]
    result = trainer.train()
    return int(result.population[0].steps)


def run_sb3(algo: str, env_id: str, steps: int, seed: int, clock: SolveClock | None) -> int:
    import torch
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(env_id, n_envs=8, seed=seed)
    if algo == "ppo":
        model: Any = PPO("MlpPolicy", env, n_steps=256, batch_size=128, n_epochs=4, learning_rate=1e-3, gamma=0.99,
                         gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, seed=seed,
                         policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]},
                                        "activation_fn": torch.nn.ReLU}, device="cpu")  # fmt: skip
    else:
        model = DQN("MlpPolicy", env, batch_size=128, train_freq=1, gradient_steps=2, learning_rate=1e-3, gamma=0.99,
                    tau=0.005, target_update_interval=1, buffer_size=50_000, learning_starts=1000,
                    exploration_initial_eps=1.0, exploration_final_eps=0.05, exploration_fraction=0.06, seed=seed,
                    policy_kwargs={"net_arch": [128, 128]}, device="cpu")  # fmt: skip

    class Eval(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next = EVAL_EVERY[algo]

        def _on_step(self) -> bool:
            if clock is None or self.num_timesteps < self.next:
                return True
            self.next += EVAL_EVERY[algo]
            return not clock.check(self.num_timesteps, lambda o: model.predict(o, deterministic=True)[0])

    model.learn(total_timesteps=steps, callback=Eval())
    return int(model.num_timesteps)


def run_bare(algo: str, env_id: str, steps: int, seed: int, clock: SolveClock | None) -> int:
    sys.path.insert(0, str(HERE))
    import bare_rl

    fn = bare_rl.ppo if algo == "ppo" else bare_rl.dqn
    return fn(env_id, total_steps=steps, seed=seed, eval_every=EVAL_EVERY[algo] if clock else 0,
              on_eval=clock.check if clock else None)  # fmt: skip


def run_floor(algo: str, env_id: str, steps: int, seed: int) -> int:
    sys.path.insert(0, str(HERE))
    import floor

    return (floor.ppo_floor if algo == "ppo" else floor.dqn_floor)(env_id, steps, seed)


def _warm_imports(framework: str) -> None:
    """Import what each side needs before the clock starts: import time is not training speed.

    SB3 and the bare script train with ``torch.optim.Adam``, whose first use imports torch._dynamo
    (seconds, ~70 MB of RSS): create one here so that cost stays out of their clock. agilerl's own
    Adam never imports it, so its side has nothing to warm there (and its RSS shows the saving).
    """
    import gymnasium  # noqa: F401
    import torch

    if framework == "agilerl":
        import agilerl.training.trainer  # noqa: F401
        import agilerl_plugin_gym.single_agent.dqn
        import agilerl_plugin_gym.single_agent.ppo
        import agilerl_plugin_gym.single_agent.strategies  # noqa: F401

        return
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    if framework == "sb3":
        import stable_baselines3  # noqa: F401
    elif framework == FLOOR:
        sys.path.insert(0, str(HERE))
        import floor  # noqa: F401
    else:
        sys.path.insert(0, str(HERE))
        import bare_rl  # noqa: F401


def worker(framework: str, algo: str, env_id: str, mode: str, steps: int, seed: int, run_dir: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    _warm_imports(framework)
    clock = SolveClock(env_id, seed) if mode == "solve" else None
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if framework == "agilerl":
        done = run_agilerl(algo, env_id, steps, seed, clock, run_dir)
    elif framework == "sb3":
        done = run_sb3(algo, env_id, steps, seed, clock)
    elif framework == FLOOR:
        done = run_floor(algo, env_id, steps, seed)
    else:
        done = run_bare(algo, env_id, steps, seed, clock)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    # Every side steps its 8 envs in this one process, so process CPU time is the whole cost; it is
    # far less sensitive to other jobs on the machine than wall time.
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    out: dict[str, Any] = {
        "cpu_s": cpu,
        "steps_per_cpu_s": done / cpu if cpu > 0 else None,
        "steps": done,
        "wall_s": wall,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if mode == "throughput":
        out["steps_per_s"] = done / wall
    else:
        out["solve_s"] = clock.solved_at if clock else None
        out["solve_cpu_s"] = clock.solved_cpu if clock else None
        out["solve_steps"] = clock.solved_steps if clock else None
    return out


# --------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------


def spawn(framework: str, algo: str, env_id: str, mode: str, steps: int, seed: int, tmp: Path) -> dict[str, Any]:
    # Every run trains in a run directory of its own: a run directory holds one run (its lock).
    run_dir = tempfile.mkdtemp(prefix=f"{framework}-{algo}-{mode}-{seed}-", dir=tmp)
    cmd = [sys.executable, __file__, "--worker", framework, algo, env_id, mode, str(steps), str(seed), str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AGILERL_LOAD_PLUGINS": os.environ.get("AGILERL_LOAD_PLUGINS", "gym")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{framework} {algo} {mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    ap.add_argument("--algos", default="ppo,dqn")
    ap.add_argument("--envs", default="CartPole-v1")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--throughput-repeats", type=int, default=7)
    ap.add_argument("--throughput-steps", type=int, default=None, help="env steps per throughput run")
    ap.add_argument("--budget", type=int, default=None, help="env steps per solve run")
    ap.add_argument("--skip-solve", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    if args.worker:
        fw, algo, env_id, mode, steps, seed, run_dir = args.worker
        print(json.dumps(worker(fw, algo, env_id, mode, int(steps), int(seed), run_dir)))
        return
    record = benchlib.Record("gym/bench_cartpole")
    sides = [fw for fw in FRAMEWORKS if fw != "sb3" or benchlib.has_module("stable_baselines3", "Stable-Baselines3")]
    tmp = benchlib.scratch_dir("agilerl-bench-")
    report: dict[str, Any] = {}
    for algo in args.algos.split(","):
        print(f"\n=== {algo.upper()} (8 envs, 1 torch thread) ===", flush=True)
        tp_steps = args.throughput_steps or THROUGHPUT_STEPS[algo]
        budget = args.budget or SOLVE_BUDGET[algo]
        tp: dict[str, list[float]] = {fw: [] for fw in (*sides, FLOOR)}
        tpc: dict[str, list[float]] = {fw: [] for fw in (*sides, FLOOR)}
        rss: dict[str, list[float]] = {fw: [] for fw in (*sides, FLOOR)}
        # Interleave frameworks (alternating the order) so machine load drifts hit all of them alike.
        for rep in range(0 if args.skip_throughput else args.throughput_repeats):
            for fw in (*sides, FLOOR) if rep % 2 == 0 else (FLOOR, *sides[::-1]):
                r = spawn(fw, algo, "CartPole-v1", "throughput", tp_steps, rep, tmp)
                tp[fw].append(r["steps_per_s"])
                tpc[fw].append(r["steps_per_cpu_s"])
                rss[fw].append(r["peak_rss_mb"])
                print(
                    f"  throughput {fw:8s} {r['steps_per_s']:8.0f} steps/s  {r['steps_per_cpu_s']:8.0f} steps/CPU-s"
                    f"  peak RSS {r['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
        report[algo] = {"throughput_runs": {"steps_per_s": tp, "steps_per_cpu_s": tpc, "peak_rss_mb": rss}}
        if tp["agilerl"]:
            med = {fw: statistics.median(v) for fw, v in tp.items()}
            medc = {fw: statistics.median(v) for fw, v in tpc.items()}
            print(f"  -> CartPole-v1 env-steps/s (median of {args.throughput_repeats}), wall / per CPU s: "
                  + ", ".join(f"{fw} {med[fw]:.0f} / {medc[fw]:.0f}" for fw in sides))  # fmt: skip
            print("  -> fraction of the floor reference (env + one no-grad forward per step + the matched update "
                  "alone), wall / CPU: " + ", ".join(f"{fw} {med[fw] / med[FLOOR]:.2f} / {medc[fw] / medc[FLOOR]:.2f}"
                                                    for fw in sides))  # fmt: skip
            report[algo].update(throughput=med, throughput_cpu=medc)
            if "sb3" in sides:
                peak = {fw: statistics.median(rss[fw]) for fw in sides}
                wall, _ = benchlib.paired(tp["agilerl"], tp["sb3"])
                cpu, per_rep = benchlib.paired(tpc["agilerl"], tpc["sb3"])
                report[algo]["paired_cpu_ratios"] = per_rep
                record.row(f"{algo}_cartpole_throughput", what=f"{algo.upper()} env-steps/s, CartPole, 8 envs",
                           against="Stable-Baselines3", wall=wall, cpu=cpu, target="per CPU s >= 2.2x",
                           met=cpu >= 2.2, repeats=args.throughput_repeats,
                           detail=f"{medc['agilerl']:,.0f} vs {medc['sb3']:,.0f} steps per CPU s; per repeat "
                                  + ", ".join(f"{r:.2f}x" for r in per_rep)
                                  + f"; floor fraction {medc['agilerl'] / medc[FLOOR]:.2f} vs "
                                  f"{medc['sb3'] / medc[FLOOR]:.2f}")  # fmt: skip
                record.row(f"{algo}_cartpole_rss", what=f"{algo.upper()} peak RSS, CartPole throughput run",
                           against="Stable-Baselines3", wall=peak["agilerl"] / peak["sb3"], cpu=None,
                           target="<= 0.8x", met=peak["agilerl"] / peak["sb3"] <= 0.8, repeats=args.throughput_repeats,
                           decimals=3, detail=f"{peak['agilerl']:.1f} vs {peak['sb3']:.1f} MB (median)")  # fmt: skip
        for env_id in [] if args.skip_solve else args.envs.split(","):
            solve: dict[str, list[float]] = {fw: [] for fw in sides}
            solve_cpu: dict[str, list[float]] = {fw: [] for fw in sides}
            for seed in range(args.seeds):
                for fw in sides if seed % 2 == 0 else sides[::-1]:
                    r = spawn(fw, algo, env_id, "solve", budget, seed, tmp)
                    unsolved = r["solve_s"] is None
                    s = float("inf") if unsolved else r["solve_s"]
                    c = float("inf") if unsolved else r["solve_cpu_s"]
                    solve[fw].append(s)
                    solve_cpu[fw].append(c)
                    print(f"  solve {env_id} seed {seed} {fw:8s} {s:7.1f} s {c:7.1f} CPU-s ({r['solve_steps']} steps)"
                          f"  peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)  # fmt: skip
            meds = {fw: statistics.median(v) for fw, v in solve.items()}
            medc = {fw: statistics.median(v) for fw, v in solve_cpu.items()}
            print(f"  -> median seconds to {TARGETS[env_id]} on {env_id}: "
                  + ", ".join(f"{fw} {meds[fw]:.1f}" for fw in sides) + "; CPU seconds: "
                  + ", ".join(f"{fw} {medc[fw]:.1f}" for fw in sides))  # fmt: skip
            report[algo][f"solve_{env_id}"] = {"median_s": meds, "median_cpu_s": medc, "all": solve,
                                               "all_cpu": solve_cpu}  # fmt: skip
            if "sb3" in sides:
                rw, rc = benchlib.ratio(meds["agilerl"], meds["sb3"]), benchlib.ratio(medc["agilerl"], medc["sb3"])
                record.row(f"{algo}_{env_id}_solve", what=f"{algo.upper()} median time to {TARGETS[env_id]:g}, "
                           f"{env_id}, {args.seeds} seeds", against="Stable-Baselines3", wall=rw, cpu=rc,
                           target="<= 1x", met=rc is not None and rc <= 1.0, repeats=args.seeds,
                           detail=f"{meds['agilerl']:.1f} vs {meds['sb3']:.1f} s "
                                  f"({medc['agilerl']:.1f} vs {medc['sb3']:.1f} CPU s)")  # fmt: skip
    record.save(report)


if __name__ == "__main__":
    main()
