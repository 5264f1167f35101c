"""Where a training run's time goes: cProfile over our PPO, DQN or RainbowDQN at the benchmarks' settings.

    python benchmarks/gym/profile_learn.py --algo ppo      # bench_cartpole.py's PPO manifest, 8 envs
    python benchmarks/gym/profile_learn.py --algo dqn      # bench_cartpole.py's DQN manifest
    python benchmarks/gym/profile_learn.py --algo rainbow  # bench_rainbow.py's manifest, 4 envs

Trains through ``LocalTrainer`` (as the benchmarks do, no evaluation) under ``cProfile`` with one
torch thread, then prints the share of the run spent in the learn step and in acting / env
stepping, and the functions with the most own time (CPU time, so other jobs on a shared
machine do not count). cProfile's per-call overhead inflates
Python-heavy code, so read the shares, not the absolute times.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import benchlib  # noqa: E402

STEPS = {"ppo": 40_960, "dqn": 10_000, "rainbow": 10_000}
#: (file fragment, function names) whose outermost call's cumulative time is a share of the run.
PARTS = {
    "learn step": ("single_agent/{algo}.py", ("learn",)),
    "acting": ("single_agent/", ("act", "explore")),
    "env step": ("gymnasium/vector", ("step",)),
}


def manifest(algo: str, steps: int) -> dict:  # type: ignore[type-arg]
    if algo == "rainbow":
        import bench_rainbow

        return bench_rainbow.ours_manifest(steps, 0, steps)
    import bench_cartpole

    return bench_cartpole._agilerl_manifest(algo, "CartPole-v1", steps, 0, steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", choices=sorted(STEPS), default="ppo")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from agilerl.training.trainer import LocalTrainer

    record = benchlib.Record("gym/profile_learn")
    steps = args.steps or STEPS[args.algo]
    trainer = LocalTrainer.from_manifest(manifest(args.algo, steps), run_dir=tempfile.mkdtemp(prefix="profile-"))
    trainer.strategy.evaluate = lambda agent, run: 0.0  # type: ignore[method-assign]
    prof = cProfile.Profile(time.process_time)  # CPU time: other jobs on the machine do not count
    t0, c0 = time.perf_counter(), time.process_time()
    prof.enable()
    trainer.train()
    prof.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = pstats.Stats(prof)
    total = max(v[3] for v in stats.stats.values())  # type: ignore[attr-defined]
    shares = {}
    for part, (where, names) in PARTS.items():
        # the outermost call (the largest cumulative time), so nested calls do not double count
        where = where.format(algo=args.algo)
        cum = [v[3] for (file, _, fn), v in stats.stats.items() if fn in names and where in file]  # type: ignore[attr-defined]
        shares[part] = max(cum, default=0.0) / total
    print(f"{args.algo}: {steps} env steps, {wall:.1f} s wall, {cpu:.1f} CPU s under cProfile (CPU-time timer)")
    print("share of the run: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())
    record.save({"algo": args.algo, "steps": steps, "wall_s": wall, "cpu_s": cpu, "shares": shares,
                 "top_tottime": out.getvalue()})  # fmt: skip


if __name__ == "__main__":
    main()
