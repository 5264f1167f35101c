"""Recurrent PPO side by side: agilerl (ours) vs sb3-contrib RecurrentPPO vs AgileRL's recurrent PPO.

The task is CartPole-v1 with the two velocities masked (``agilerl_plugin_gym.pomdp.MaskVelocity``;
the same two-line wrapper is defined here for the other sides): a policy has to infer motion from
its history, so only recurrent policies learn it. Run from the repository root::

    AGILERL_VENV=/work/venvs/agilerl-upstream python benchmarks/gym/bench_recurrent.py --seeds 5

Needs ``sb3-contrib`` in this venv (``benchmarks/requirements.txt``) and AgileRL 2.58 in the venv
of :mod:`benchmarks.agilerl_venv` (``$AGILERL_VENV``); every run is its own subprocess.

Matched settings on every side: 8 envs (sync vector env, Gymnasium's next-step autoreset),
1 torch thread, rollouts of 128 steps x 8 envs, 4 epochs, lr 1e-3, gamma .99, GAE .95, clip .2, no
entropy bonus, vf .5, grad-norm .5; actor and critic each with their own 64-unit LSTM (SB3's
default; ``share_encoders: false``), then 64-64 ReLU layers before each output. Minibatches: 16
sequences of 16 steps (ours and AgileRL: ``batch_size: 16, max_seq_len: 16``; SB3 has no sequence
length: ``batch_size=256`` steps, its sequences are each env's whole rollout piece). Evaluation is
greedy on every side (AgileRL: argmax of its actor's logits, carrying the actor's LSTM state).

Reports: env-steps/s over a fixed budget (no evaluation; the clock starts after imports and covers
building envs and model, and training), and the median over seeds of training seconds until a
greedy evaluation (10 episodes, every 8,192 steps, not timed) reaches a mean return of 300.
"""

from __future__ import annotations

import argparse
import json
import math
import os
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

SIDES = ("ours", "sb3", "agilerl")
THRESHOLD = 300.0
THROUGHPUT_STEPS = 32_768
SOLVE_BUDGET = 150_000
EVAL_EVERY = 8_192
EVAL_EPISODES = 10
if benchlib.SMOKE:  # tiny budgets still go through the evaluation path
    EVAL_EVERY = 1_024
N_ENVS, N_STEPS, LR, SEQ_LEN, SEQS = 8, 128, 1e-3, 16, 16


def masked_cartpole() -> Any:
    import gymnasium as gym
    import numpy as np

    class MaskVelocity(gym.ObservationWrapper):  # type: ignore[type-arg]
        def __init__(self, env: Any) -> None:
            super().__init__(env)
            s = env.observation_space
            self.observation_space = gym.spaces.Box(s.low[[0, 2]], s.high[[0, 2]], dtype=np.float32)

        def observation(self, obs: Any) -> Any:
            return obs[[0, 2]]

    return MaskVelocity(gym.make("CartPole-v1"))


class SolveClock:
    """Training time only: evaluation (greedy, recurrent state carried, one episode per env) is not timed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.start, self.start_cpu = time.perf_counter(), time.process_time()
        self.paused = self.paused_cpu = 0.0
        self.solved_at: float | None = None
        self.solved_cpu: float | None = None
        self.solved_steps: int | None = None
        self.next = EVAL_EVERY

    def due(self, steps: int) -> bool:
        return self.solved_at is None and steps >= self.next

    def check(self, steps: int, policy: Any) -> bool:
        """``policy(obs_batch, state) -> (actions, state)``, state ``None`` at the episodes' start."""
        import gymnasium as gym
        import numpy as np

        self.next += EVAL_EVERY
        t0, c0 = time.perf_counter(), time.process_time()
        env = gym.vector.SyncVectorEnv([masked_cartpole for _ in range(EVAL_EPISODES)])
        obs, _ = env.reset(seed=10_000 + self.seed)
        total, done, state = np.zeros(EVAL_EPISODES), np.zeros(EVAL_EPISODES, bool), None
        while not done.all():
            action, state = policy(obs, state)
            obs, r, term, trunc, _ = env.step(action)
            total += np.where(done, 0.0, r)
            done |= term | trunc
        env.close()
        self.paused += time.perf_counter() - t0
        self.paused_cpu += time.process_time() - c0
        if total.mean() >= THRESHOLD:
            self.solved_at = time.perf_counter() - self.start - self.paused
            self.solved_cpu = time.process_time() - self.start_cpu - self.paused_cpu
            self.solved_steps = steps
        return self.solved_at is not None


# --------------------------------------------------------------------------------------------------
# The three sides (each runs in its own subprocess; "agilerl" in AgileRL's venv)
# --------------------------------------------------------------------------------------------------


def run_ours(steps: int, seed: int, clock: SolveClock | None, run_dir: str) -> int:
    from agilerl.training.trainer import LocalTrainer

    manifest = {
        "algorithm": {"name": "PPO", "recurrent": True, "learn_step": N_ENVS * N_STEPS, "batch_size": SEQS,
                      "max_seq_len": SEQ_LEN, "update_epochs": 4, "lr": LR, "gamma": 0.99, "gae_lambda": 0.95,
                      "clip_coef": 0.2, "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5, "share_encoders": False},
        "environment": {"name": "CartPole-v1", "num_envs": N_ENVS, "sync": True,
                        "env_wrappers": ["agilerl_plugin_gym.pomdp.MaskVelocity"]},
        "network": {"latent_dim": 64, "encoder_config": {"hidden_state_size": 64, "num_layers": 1},
                    "head_config": {"hidden_size": [64], "layer_norm": False}},
        "training": {"max_steps": steps, "evo_steps": EVAL_EVERY if clock else steps, "pop_size": 1, "seed": seed,
                     "progress": False, "save_elite": False},
        "logging": {"tensorboard": False},  # as SB3: no TensorBoard events (bench_cartpole.NO_TENSORBOARD)
    }  # fmt: skip
    trainer = LocalTrainer.from_manifest(manifest, run_dir=run_dir)

    def evaluate(agent: Any, run: Any) -> float:
        if clock is None:
            return 0.0
        return 1.0 if clock.check(agent.steps, lambda o, s: agent.predict(o, s)) else 0.0

    trainer.strategy.evaluate = evaluate  # type: ignore[method-assign]
    if clock is not None:
        trainer.manifest.training.target_score = 1.0
    result = trainer.train()
    return int(result.population[0].steps)


def run_sb3(steps: int, seed: int, clock: SolveClock | None) -> int:
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(masked_cartpole, n_envs=N_ENVS, seed=seed)
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=N_STEPS, batch_size=SEQ_LEN * SEQS, n_epochs=4, learning_rate=LR, gamma=0.99,
        gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, seed=seed, device="cpu",
        policy_kwargs={"lstm_hidden_size": 64, "n_lstm_layers": 1, "shared_lstm": False, "enable_critic_lstm": True,
                       "net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.ReLU},
    )  # fmt: skip

    def policy(obs: Any, state: Any) -> Any:
        import numpy as np

        starts = np.full(len(obs), state is None)
        return model.predict(obs, state=state, episode_start=starts, deterministic=True)

    class Eval(BaseCallback):
        def _on_step(self) -> bool:
            if clock is None or not clock.due(self.num_timesteps):
                return True
            return not clock.check(self.num_timesteps, policy)

    model.learn(total_timesteps=steps, callback=Eval())
    return int(model.num_timesteps)


def run_agilerl(steps: int, seed: int, clock: SolveClock | None) -> int:
    import gymnasium as gym
    import numpy as np
    import torch

    from agilerl.algorithms import PPO
    from agilerl.rollouts.on_policy import collect_rollouts_recurrent

    np.random.seed(seed)
    torch.manual_seed(seed)
    env = gym.vector.SyncVectorEnv([masked_cartpole for _ in range(N_ENVS)])
    env.reset(seed=seed)
    net_config = {"latent_dim": 64, "encoder_config": {"hidden_state_size": 64, "num_layers": 1},
                  "head_config": {"hidden_size": [64], "activation": "ReLU"}}  # fmt: skip
    agent = PPO(
        env.single_observation_space, env.single_action_space, net_config=net_config, recurrent=True,
        num_envs=N_ENVS, learn_step=N_ENVS * N_STEPS, batch_size=SEQS, max_seq_len=SEQ_LEN, update_epochs=4,
        lr=LR, gamma=0.99, gae_lambda=0.95, clip_coef=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
        share_encoders=False,
    )  # fmt: skip

    def policy(obs: Any, state: Any) -> Any:
        if state is None:
            state = agent._extract_hidden_state(agent.get_initial_hidden_state(len(obs)), "actor_encoder")
        with torch.no_grad():
            latent, state = agent.actor.extract_features(agent.preprocess_observation(obs), hidden_state=state)
            logits = agent.actor.head_net.wrapped(latent)
        return logits.argmax(-1).cpu().numpy(), state

    done, last = 0, {}
    while done < steps:
        _, obs, d, scores, info = collect_rollouts_recurrent(agent, env, **last)
        last = {"last_obs": obs, "last_done": d, "last_scores": scores, "last_info": info}
        agent.learn()
        done += N_ENVS * N_STEPS
        if clock is not None and clock.due(done):
            saved = agent.hidden_state
            if clock.check(done, policy):
                break
            agent.hidden_state = saved
    return done


# --------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------


def worker(side: str, mode: str, steps: int, seed: int, run_dir: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    if side == "ours":  # imports are not training time
        import agilerl.training.trainer
        import agilerl_plugin_gym.single_agent.ppo  # noqa: F401
    elif side == "sb3":
        import sb3_contrib  # noqa: F401
    else:
        import agilerl.algorithms  # noqa: F401
    clock = SolveClock(seed) if mode == "solve" else None
    t0, c0 = time.perf_counter(), time.process_time()
    if side == "ours":
        done = run_ours(steps, seed, clock, run_dir)
    elif side == "sb3":
        done = run_sb3(steps, seed, clock)
    else:
        done = run_agilerl(steps, seed, clock)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out: dict[str, Any] = {"steps": done, "wall_s": wall, "cpu_s": cpu, "steps_per_s": done / wall,
                           "steps_per_cpu_s": done / cpu}  # fmt: skip
    if clock is not None:
        out.update(solve_s=clock.solved_at, solve_cpu_s=clock.solved_cpu, solve_steps=clock.solved_steps)
    return out


def spawn(side: str, mode: str, steps: int, seed: int, tmp: str, upstream: Path | None) -> dict[str, Any]:
    python = str(upstream) if side == "agilerl" and upstream else sys.executable
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
           "AGILERL_LOAD_PLUGINS": "gym"}  # fmt: skip
    run_dir = tempfile.mkdtemp(prefix=f"{side}-{mode}-{seed}-", dir=tmp)  # one per run (the run-dir lock)
    cmd = [python, __file__, "--worker", side, mode, str(steps), str(seed), run_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{side} {mode} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--throughput-repeats", type=int, default=3)
    ap.add_argument("--throughput-steps", type=int, default=THROUGHPUT_STEPS)
    ap.add_argument("--budget", type=int, default=SOLVE_BUDGET, help="env steps per solve run")
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--skip-solve", action="store_true")
    args = ap.parse_args()
    if args.worker:
        side, mode, steps, seed, run_dir = args.worker
        print(json.dumps(worker(side, mode, int(steps), int(seed), run_dir)))
        return
    record = benchlib.Record("gym/bench_recurrent")
    sides = args.sides.split(",")
    if "sb3" in sides and not benchlib.has_module("sb3_contrib", "sb3-contrib RecurrentPPO"):
        sides.remove("sb3")
    upstream = None
    if "agilerl" in sides:
        upstream = benchlib.agilerl_python("AgileRL 2.58 recurrent PPO")
        if upstream is None:
            sides.remove("agilerl")
    tmp = tempfile.mkdtemp(prefix="agilerl-bench-rec-")
    tp: dict[str, list[float]] = {s: [] for s in sides}
    tpc: dict[str, list[float]] = {s: [] for s in sides}
    for rep in range(args.throughput_repeats):
        for side in sides if rep % 2 == 0 else sides[::-1]:  # alternate the order against load drift
            r = spawn(side, "throughput", args.throughput_steps, rep, tmp, upstream)
            tp[side].append(r["steps_per_s"])
            tpc[side].append(r["steps_per_cpu_s"])
            print(f"  throughput {side:8s} {r['steps_per_s']:7.0f} env-steps/s {r['steps_per_cpu_s']:7.0f} per CPU-s",
                  flush=True)  # fmt: skip
    peers = [s for s in sides if s != "ours"]
    report: dict[str, Any] = {"throughput_runs": {"steps_per_s": tp, "steps_per_cpu_s": tpc}}
    for label, data in (("env-steps/s", tp), ("env-steps per CPU second", tpc)):
        med = {s: statistics.median(v) for s, v in data.items()}
        report[label] = med
        print(f"  -> {label} (median): " + ", ".join(f"{s} {med[s]:.0f}" for s in sides))
    if "ours" in sides and peers and args.throughput_repeats:
        medc = report["env-steps per CPU second"]
        fastest = max(peers, key=lambda s: medc[s])
        names = {"sb3": "sb3-contrib RecurrentPPO", "agilerl": "AgileRL 2.58 recurrent PPO"}
        # Ratios within each repeat (the sides of a repeat ran back to back, under one load), then the median.
        wall, _ = benchlib.paired(tp["ours"], tp[fastest])
        cpu, per_rep = benchlib.paired(tpc["ours"], tpc[fastest])
        report["paired_cpu_ratios"] = per_rep
        record.row("recurrent_ppo_throughput", what="recurrent PPO env-steps/s, masked CartPole, 8 envs",
                   against=f"fastest peer ({names[fastest]})", wall=wall, cpu=cpu, target="per CPU s >= 1.5x",
                   met=cpu >= 1.5, repeats=args.throughput_repeats,
                   detail=", ".join(f"{s} {medc[s]:,.0f}" for s in sides) + " steps per CPU s; per repeat "
                   + ", ".join(f"{r:.2f}x" for r in per_rep))  # fmt: skip
    if not args.skip_solve:
        solve: dict[str, list[float]] = {s: [] for s in sides}
        solve_cpu: dict[str, list[float]] = {s: [] for s in sides}
        for seed in range(args.seeds):
            for side in sides if seed % 2 == 0 else sides[::-1]:
                r = spawn(side, "solve", args.budget, seed, tmp, upstream)
                s = float("inf") if r["solve_s"] is None else r["solve_s"]
                c = float("inf") if r["solve_cpu_s"] is None else r["solve_cpu_s"]
                solve[side].append(s)
                solve_cpu[side].append(c)
                print(f"  solve seed {seed} {side:8s} {s:7.1f} s {c:7.1f} CPU-s ({r['solve_steps']} steps)", flush=True)
        for label, data in (("seconds", solve), ("CPU seconds", solve_cpu)):
            meds = {s: statistics.median(v) for s, v in data.items()}
            print(f"  -> median training {label} to a greedy mean return of {THRESHOLD:.0f} "
                  f"(inf: not within {args.budget} steps): " + ", ".join(f"{s} {meds[s]:.1f}" for s in sides))  # fmt: skip
            report[f"solve_median_{label}"] = meds
        report["solve_all_s"], report["solve_all_cpu_s"] = solve, solve_cpu
        meds = report["solve_median_seconds"]
        finite = [s for s in peers if math.isfinite(meds[s])]
        best = min(finite, key=lambda s: meds[s]) if finite else None
        record.row("recurrent_ppo_solve", what=f"recurrent PPO median time to {THRESHOLD:.0f}, masked CartPole, "
                   f"{args.seeds} seeds", against="best peer" if best is None else best,
                   wall=benchlib.ratio(meds["ours"], meds[best]) if best else None,
                   cpu=benchlib.ratio(report["solve_median_CPU seconds"]["ours"],
                                      report["solve_median_CPU seconds"][best]) if best else None,
                   target="<= best peer", met=math.isfinite(meds["ours"]) and (best is None or meds["ours"] <= meds[best]),
                   repeats=args.seeds, detail=", ".join(f"{s} {meds[s]:.1f} s" for s in sides))  # fmt: skip
    record.save(report)


if __name__ == "__main__":
    main()
