"""RainbowDQN side by side: agilerl (ours) vs sb3-contrib QR-DQN vs AgileRL 2.58's RainbowDQN, CartPole-v1.

Run from the repository root (every run is its own subprocess; AgileRL's in the shared AgileRL
virtualenv of ``benchmarks/agilerl_venv.py``, ``$AGILERL_VENV``)::

    pip install sb3-contrib                       # QR-DQN (pulls stable-baselines3)
    python benchmarks/gym/bench_rainbow.py        # throughput x 2 + time-to-475 over 5 seeds
    python benchmarks/gym/bench_rainbow.py --seeds 5 --skip-throughput

Matched settings on every side: 4 sync envs, 1 torch thread, batch 64, Adam lr 1e-3, gamma 0.99,
2 gradient steps per vector step (AgileRL's ``learn_step`` 2), soft target update tau 0.01 after
every gradient step, replay 50k, 1000 warm-up env steps, a 64-unit encoder, a 64-unit latent and
a 64-unit head. Rainbow (ours and AgileRL's): prioritized replay alpha 0.6, beta 0.4 annealed to 1,
prior_eps 1e-6, 3-step returns, 51 atoms on [0, 100], noisy layers with std 0.5, dueling head.
QR-DQN (no Rainbow parts: uniform one-step replay, epsilon-greedy 1 -> 0.05 over the first 10k
env steps) with 51 quantiles and net_arch [64, 64]; it is sb3-contrib's distributional DQN, the
closest SB3 has to Rainbow.

AgileRL's loop is its own training loop's body (``train_off_policy`` with a
``PrioritizedReplayBuffer`` and a ``MultiStepReplayBuffer``: act, add, anneal beta, sample, learn,
update priorities), written out so that the same evaluation clock can stop it.

Reported: env-steps/s over a fixed budget (no evaluation; clock from building envs and model to
the end), and the median over seeds of the training seconds to a mean greedy evaluation return of
475 (10 episodes every 4,000 env steps; evaluation time is not counted; ``inf`` = not reached in
the budget), with CPU seconds beside (steadier on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import math
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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import benchlib  # noqa: E402
from bench_cartpole import SolveClock  # noqa: E402  (the shared evaluation protocol and solve clock)

ENV_ID, NUM_ENVS = "CartPole-v1", 4
THROUGHPUT_STEPS, SOLVE_BUDGET, EVAL_EVERY = 20_000, 80_000, 4_000
if benchlib.SMOKE:  # tiny budgets still go through the evaluation path
    EVAL_EVERY = 1_000
FRAMEWORKS = ("ours", "qrdqn", "agilerl")
HP: dict[str, Any] = {"batch_size": 64, "lr": 1e-3, "gamma": 0.99, "tau": 0.01, "learn_step": 2, "buffer": 50_000,
                      "learning_delay": 1000, "alpha": 0.6, "beta": 0.4, "prior_eps": 1e-6, "n_step": 3,
                      "num_atoms": 51, "v_min": 0.0, "v_max": 100.0, "noise_std": 0.5}  # fmt: skip


def ours_manifest(steps: int, seed: int, evo_steps: int) -> dict[str, Any]:
    """Our side's manifest (also profiled by ``profile_learn.py``)."""
    return {
        "algorithm": {"name": "RainbowDQN", **{k: HP[k] for k in ("batch_size", "lr", "gamma", "tau", "learn_step",
                      "beta", "prior_eps", "n_step", "num_atoms", "v_min", "v_max", "noise_std")}},
        "environment": {"name": ENV_ID, "num_envs": NUM_ENVS, "sync": True},
        "network": {"latent_dim": 64, "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False},
                    "head_config": {"hidden_size": [64], "layer_norm": False}},
        "replay_buffer": {"max_size": HP["buffer"], "per_buffer": True, "per_buffer_args": {"alpha": HP["alpha"]},
                          "n_step_buffer": True},
        "training": {"max_steps": steps, "evo_steps": evo_steps, "seed": seed,
                     "learning_delay": HP["learning_delay"], "progress": False, "save_elite": False},
        "logging": {"tensorboard": False},  # as SB3: no TensorBoard events (bench_cartpole.NO_TENSORBOARD)
    }  # fmt: skip


def run_ours(steps: int, seed: int, clock: SolveClock | None, run_dir: str) -> int:
    from agilerl.training.trainer import LocalTrainer

    manifest = ours_manifest(steps, seed, EVAL_EVERY if clock else steps)
    trainer = LocalTrainer.from_manifest(manifest, run_dir=tempfile.mkdtemp(dir=run_dir))  # one per run
    if clock is not None:
        trainer.strategy.evaluate = lambda agent, run: float(clock.check(agent.steps, agent.greedy_action))  # type: ignore[method-assign]
        trainer.manifest.training.target_score = 1.0
    else:
        trainer.strategy.evaluate = lambda agent, run: 0.0  # type: ignore[method-assign]
    return int(trainer.train().population[0].steps)


def run_qrdqn(steps: int, seed: int, clock: SolveClock | None) -> int:
    from sb3_contrib import QRDQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(ENV_ID, n_envs=NUM_ENVS, seed=seed)
    model = QRDQN("MlpPolicy", env, batch_size=HP["batch_size"], learning_rate=HP["lr"], gamma=HP["gamma"],
                  tau=HP["tau"], target_update_interval=1, train_freq=1, gradient_steps=NUM_ENVS // HP["learn_step"],
                  buffer_size=HP["buffer"], learning_starts=HP["learning_delay"], exploration_initial_eps=1.0,
                  exploration_final_eps=0.05, exploration_fraction=min(1.0, 10_000 / steps), seed=seed, device="cpu",
                  policy_kwargs={"net_arch": [64, 64], "n_quantiles": HP["num_atoms"]})  # fmt: skip

    class Eval(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next = EVAL_EVERY

        def _on_step(self) -> bool:
            if clock is None or self.num_timesteps < self.next:
                return True
            self.next += EVAL_EVERY
            return not clock.check(self.num_timesteps, lambda o: model.predict(o, deterministic=True)[0])

    model.learn(total_timesteps=steps, callback=Eval())
    return int(model.num_timesteps)


def run_agilerl(steps: int, seed: int, clock: SolveClock | None) -> int:
    import gymnasium as gym
    import numpy as np
    import torch

    from agilerl.algorithms import RainbowDQN
    from agilerl.components import MultiStepReplayBuffer, PrioritizedReplayBuffer
    from agilerl.components.data import Transition, transition_to_tensordict

    torch.manual_seed(seed)
    env = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID) for _ in range(NUM_ENVS)])
    net = {"latent_dim": 64, "encoder_config": {"hidden_size": [64]}, "head_config": {"hidden_size": [64]}}
    agent = RainbowDQN(env.single_observation_space, env.single_action_space, net_config=net,
                       **{k: HP[k] for k in ("batch_size", "lr", "gamma", "tau", "learn_step", "beta", "prior_eps",
                                             "n_step", "num_atoms", "v_min", "v_max", "noise_std")})  # fmt: skip
    memory = PrioritizedReplayBuffer(HP["buffer"], alpha=HP["alpha"])
    n_step_memory = MultiStepReplayBuffer(HP["buffer"], n_step=HP["n_step"], gamma=HP["gamma"])
    obs, _ = env.reset(seed=seed)
    done_steps, next_eval = 0, EVAL_EVERY
    while done_steps < steps:
        action = agent.get_action(obs)
        next_obs, reward, term, _trunc, _ = env.step(action)
        transition = transition_to_tensordict(Transition(obs=obs, action=action, reward=reward, next_obs=next_obs,
                                                         done=term))  # fmt: skip
        transition.batch_size = torch.Size([NUM_ENVS])
        one_step = n_step_memory.add(transition)
        if one_step is not None:
            memory.add(one_step)
        done_steps += NUM_ENVS
        # train_off_policy's annealing of beta (per vector step).
        agent.beta += min(done_steps / steps, 1.0) * (1.0 - agent.beta)
        if len(memory) >= agent.batch_size and done_steps > HP["learning_delay"]:
            for _ in range(NUM_ENVS // agent.learn_step):
                experiences = memory.sample(agent.batch_size, agent.beta)
                n_experiences = n_step_memory.sample_from_indices(experiences["idxs"])
                _, idxs, priorities = agent.learn(experiences, n_experiences=n_experiences, per=True)
                memory.update_priorities(idxs, priorities)
        obs = next_obs
        if clock is not None and done_steps >= next_eval:
            next_eval += EVAL_EVERY
            if clock.check(done_steps, lambda o: np.asarray(agent.get_action(o, training=False))):
                break
    return done_steps


def worker(framework: str, mode: str, steps: int, seed: int, run_dir: str) -> dict[str, Any]:
    import gymnasium  # noqa: F401  (imports before the clock: import time is not training speed)
    import torch

    torch.set_num_threads(1)
    if framework == "ours":
        import agilerl.training.trainer
        import agilerl_plugin_gym.single_agent.rainbow  # noqa: F401
    elif framework == "qrdqn":
        torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # warm torch._dynamo (see bench_cartpole)
        import sb3_contrib  # noqa: F401
    else:
        torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
        import agilerl.algorithms  # noqa: F401
    clock = SolveClock(ENV_ID, seed) if mode == "solve" else None
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if framework == "ours":
        done = run_ours(steps, seed, clock, run_dir)
    elif framework == "qrdqn":
        done = run_qrdqn(steps, seed, clock)
    else:
        done = run_agilerl(steps, seed, clock)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    out: dict[str, Any] = {"steps": done, "wall_s": wall, "cpu_s": cpu, "steps_per_s": done / wall,
                           "steps_per_cpu_s": done / cpu}  # fmt: skip
    if clock is not None:
        out.update(solve_s=clock.solved_at, solve_cpu_s=clock.solved_cpu, solve_steps=clock.solved_steps)
    return out


def spawn(python: str, framework: str, mode: str, steps: int, seed: int, tmp: str) -> dict[str, Any]:
    cmd = [python, __file__, "--worker", framework, mode, str(steps), str(seed), tmp]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "AGILERL_LOAD_PLUGINS": "gym"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{framework} {mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--throughput-steps", type=int, default=THROUGHPUT_STEPS)
    ap.add_argument("--budget", type=int, default=SOLVE_BUDGET, help="env steps per solve run")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--throughput-repeats", type=int, default=3)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-solve", action="store_true")
    ap.add_argument("--parallel", type=int, default=1, help="solve runs at once (CPU seconds stay comparable)")
    args = ap.parse_args()
    if args.worker:
        fw, mode, steps, seed, tmp = args.worker
        print(json.dumps(worker(fw, mode, int(steps), int(seed), tmp)))
        return
    record = benchlib.Record("gym/bench_rainbow")
    pythons = {"ours": sys.executable}
    if benchlib.has_module("sb3_contrib", "sb3-contrib QR-DQN"):
        pythons["qrdqn"] = sys.executable
    agilerl_py = benchlib.agilerl_python("AgileRL 2.58 RainbowDQN")
    if agilerl_py is not None:
        pythons["agilerl"] = str(agilerl_py)
    sides = [fw for fw in FRAMEWORKS if fw in pythons]
    tmp = tempfile.mkdtemp(prefix="agilerl-bench-rainbow-")
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    tp: dict[str, list[dict[str, Any]]] = {fw: [] for fw in sides}
    for rep in range(0 if args.skip_throughput else args.throughput_repeats):
        for fw in sides if rep % 2 == 0 else sides[::-1]:  # interleaved: load drifts hit every side alike
            r = spawn(pythons[fw], fw, "throughput", args.throughput_steps, rep, tmp)
            tp[fw].append(r)
            print(f"  throughput {fw:8s} {r['steps_per_s']:7.0f} steps/s {r['steps_per_cpu_s']:7.0f} steps/CPU-s",
                  flush=True)  # fmt: skip
    if tp["ours"]:
        med = {fw: statistics.median(r["steps_per_s"] for r in v) for fw, v in tp.items()}
        medc = {fw: statistics.median(r["steps_per_cpu_s"] for r in v) for fw, v in tp.items()}
        print("  -> env-steps/s: " + ", ".join(f"{fw} {med[fw]:.0f}" for fw in sides) + "; per CPU-s: "
              + ", ".join(f"{fw} {medc[fw]:.0f}" for fw in sides))  # fmt: skip
        report["throughput"] = {"median_steps_per_s": med, "median_steps_per_cpu_s": medc, "runs": tp}
        for peer, name, target in (("qrdqn", "sb3-contrib QR-DQN", 1.8), ("agilerl", "AgileRL 2.58 RainbowDQN", None)):
            if peer in sides:
                wall, _ = benchlib.paired([r["steps_per_s"] for r in tp["ours"]], [r["steps_per_s"] for r in tp[peer]])
                cpu, per_rep = benchlib.paired([r["steps_per_cpu_s"] for r in tp["ours"]],
                                               [r["steps_per_cpu_s"] for r in tp[peer]])  # fmt: skip
                record.row(f"rainbow_cartpole_throughput_{peer}", what="RainbowDQN env-steps/s, CartPole, 4 envs",
                           against=name, wall=wall, cpu=cpu, target="per CPU s >= 1.8x" if target else "faster",
                           repeats=args.throughput_repeats, met=cpu >= (target or 1.0),
                           detail=f"{medc['ours']:,.0f} vs {medc[peer]:,.0f} steps per CPU s; per repeat "
                                  + ", ".join(f"{r:.2f}x" for r in per_rep))  # fmt: skip
    if not args.skip_solve:
        from concurrent.futures import ThreadPoolExecutor

        solve: dict[str, list[dict[str, Any]]] = {fw: [] for fw in sides}
        jobs = [(seed, fw) for seed in range(args.seeds) for fw in sides]
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            futures = [pool.submit(spawn, pythons[fw], fw, "solve", args.budget, seed, tmp) for seed, fw in jobs]
            for (seed, fw), future in zip(jobs, futures, strict=True):
                r = future.result()
                solve[fw].append(r)
                s = "inf" if r["solve_s"] is None else f"{r['solve_s']:.1f}"
                c = "inf" if r["solve_cpu_s"] is None else f"{r['solve_cpu_s']:.1f}"
                print(f"  solve seed {seed} {fw:8s} {s:>6s} s {c:>6s} CPU-s ({r['solve_steps']} steps)", flush=True)
        inf = float("inf")
        meds = {fw: statistics.median(inf if r["solve_s"] is None else r["solve_s"] for r in v)
                for fw, v in solve.items()}  # fmt: skip
        medc = {fw: statistics.median(inf if r["solve_cpu_s"] is None else r["solve_cpu_s"] for r in v)
                for fw, v in solve.items()}  # fmt: skip
        steps = {fw: statistics.median(inf if r["solve_steps"] is None else r["solve_steps"] for r in v)
                 for fw, v in solve.items()}  # fmt: skip
        print("  -> median seconds to 475: " + ", ".join(f"{fw} {meds[fw]:.1f}" for fw in sides)
              + "; CPU s: " + ", ".join(f"{fw} {medc[fw]:.1f}" for fw in sides)
              + "; env steps: " + ", ".join(f"{fw} {steps[fw]:.0f}" for fw in sides))  # fmt: skip
        report["solve"] = {"median_s": meds, "median_cpu_s": medc, "median_steps": steps, "runs": solve}
        peers = [fw for fw in sides if fw != "ours" and math.isfinite(meds[fw])]
        best = min(peers, key=lambda fw: meds[fw]) if peers else None
        solved = {fw: sum(r["solve_s"] is not None for r in solve[fw]) for fw in sides}
        record.row("rainbow_cartpole_solve", what=f"RainbowDQN median time to 475, CartPole, {args.seeds} seeds, "
                   f"{args.budget:,} steps", against="fastest peer to solve" if best is None else
                   {"qrdqn": "sb3-contrib QR-DQN", "agilerl": "AgileRL 2.58 RainbowDQN"}[best],
                   wall=benchlib.ratio(meds["ours"], meds[best]) if best else None,
                   cpu=benchlib.ratio(medc["ours"], medc[best]) if best else None, target="<= best peer",
                   met=math.isfinite(meds["ours"]) and (best is None or meds["ours"] <= meds[best]),
                   repeats=args.seeds, detail="; ".join(f"{fw} {meds[fw]:.1f} s, {solved[fw]}/{args.seeds} solved"
                                                        for fw in sides))  # fmt: skip
    record.save(report)


if __name__ == "__main__":
    main()
