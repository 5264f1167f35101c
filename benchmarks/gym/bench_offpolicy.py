"""SAC and TD3 throughput at RL Zoo network sizes: ours, Stable-Baselines3 and a bare-PyTorch floor.

Issue 35's targets for the off-policy continuous-control algorithms: env steps per CPU second
>= 1.5x SB3's at RL Zoo sizes, and >= 0.8 of a bare-PyTorch floor doing the same update (the limit on
this hardware). ``bench_learning.py`` reports steps per CPU second over whole learning runs (their
warm-up of random steps included); this script times the steady state alone, each side in a process
of its own with one torch thread:

* the task is ``Hopper-v5``, one env, one gradient step of batch 256 per env step after
  ``--learning-starts`` random steps (SB3's ``train_freq`` 1, ``gradient_steps`` 1; our
  ``learn_step: 1``), ``--steps`` env steps in all, no evaluation;
* SAC: the learning table's ``sac-Hopper-v5`` cell on both sides (256-256, lr 3e-4, entropy
  coefficient learned); TD3: its ``td3-Hopper-v5`` cell (400-300, lr 1e-3, policy delay 2);
* the floor: ``floor.sac_floor`` / ``floor.td3_floor``, the same update in a single loop of plain
  torch (preallocated transitions, fused Adam, foreach Polyak averaging), nothing else;
* only ``learn`` / ``train`` is timed (building the model and its buffer is not), CPU seconds from
  ``getrusage``; the sides run alternately per repeat, and each ratio is the median of the
  per-repeat ratios.

    python benchmarks/gym/bench_offpolicy.py                      # SAC and TD3, 5 repeats (~25 min)
    python benchmarks/gym/bench_offpolicy.py --algo sac --repeats 1
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib

CELLS = {"sac": "sac-Hopper-v5", "td3": "td3-Hopper-v5"}
SIDES = ("ours", "sb3", "floor")


def _timed(fn: Any) -> dict[str, float]:
    c0, t0 = benchlib.cpu_seconds(), time.perf_counter()
    steps = fn()
    cpu, wall = benchlib.cpu_seconds() - c0, time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"steps": int(steps), "cpu_s": cpu, "wall_s": wall, "steps_per_cpu_s": steps / cpu, "rss_mb": rss_mb}


def run_side(algo: str, side: str, steps: int, learning_starts: int, seed: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    if side == "floor":
        import floor

        build = floor.sac_floor if algo == "sac" else floor.td3_floor
        return _timed(build("Hopper-v5", steps, seed, learning_starts=learning_starts))
    import bench_learning

    cell = bench_learning.CELLS[CELLS[algo]]
    if side == "sb3":
        model = cell.sb3(seed, steps)
        model.learning_starts = learning_starts

        def learn() -> int:
            model.learn(total_timesteps=steps)
            return steps

        return _timed(learn)
    from agilerl.training.trainer import LocalTrainer

    manifest = cell.ours(seed, steps)
    manifest["training"].update(evo_steps=steps, learning_delay=learning_starts)
    trainer = LocalTrainer.from_manifest(manifest, run_dir=tempfile.mkdtemp(prefix="bench-offpolicy-"))
    trainer.strategy.evaluate = lambda agent, run: 0.0  # type: ignore[method-assign]  # no evaluation: the update alone
    return _timed(lambda: trainer.train().population[0].steps)


def spawn(algo: str, side: str, args: argparse.Namespace, seed: int) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", side, "--algo", algo, "--steps", str(args.steps),
           "--learning-starts", str(args.learning_starts), "--seed", str(seed)]  # fmt: skip
    return benchlib.worker_result(cmd, f"{algo} {side}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algo", nargs="+", choices=sorted(CELLS), default=sorted(CELLS))
    ap.add_argument("--steps", type=int, default=3000, help="env steps per run (updates from --learning-starts on)")
    ap.add_argument("--learning-starts", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if benchlib.SMOKE:
        args.steps, args.learning_starts = min(args.steps, 600), min(args.learning_starts, 256)
    if args.worker:
        print("RESULT " + json.dumps(run_side(args.algo[0], args.worker, args.steps, args.learning_starts, args.seed)))
        return
    sides = [s for s in SIDES if s != "sb3" or benchlib.has_module("stable_baselines3", "SB3")]
    record = benchlib.Record("gym/bench_offpolicy")
    raw: dict[str, Any] = {"args": vars(args), "runs": {}}
    for algo in args.algo:
        runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        for rep in range(args.repeats):
            for side in sides if rep % 2 == 0 else sides[::-1]:  # alternate against load drift
                res = spawn(algo, side, args, seed=rep)
                runs[side].append(res)
                print(f"{algo} {side:5s} repeat {rep}: {res['steps_per_cpu_s']:.1f} steps per CPU s "
                      f"({res['steps']} steps in {res['cpu_s']:.1f} CPU s), peak RSS {res['rss_mb']:.0f} MB",
                      flush=True)  # fmt: skip
        raw["runs"][algo] = runs
        ours = [r["steps_per_cpu_s"] for r in runs["ours"]]
        per = ", ".join(f"{x:.0f}" for x in ours)
        for against, target, want in (("sb3", ">= 1.5x", 1.5), ("floor", ">= 0.8x", 0.8)):
            if against not in runs:
                continue
            theirs = [r["steps_per_cpu_s"] for r in runs[against]]
            ratio, _ = benchlib.paired(ours, theirs)
            name = "Stable-Baselines3" if against == "sb3" else "bare-PyTorch floor (benchmarks/gym/floor.py)"
            record.row(
                f"{algo}_hopper_steps_per_cpu_vs_{against}",
                what=f"{algo.upper()} env steps per CPU s, Hopper-v5, RL Zoo sizes, one update per step",
                against=name, wall=None, cpu=ratio, target=f"steps per CPU s {target}", met=ratio >= want,
                repeats=args.repeats,
                detail=f"ours {per} vs {', '.join(f'{x:.0f}' for x in theirs)} steps per CPU s; "
                f"{args.steps} steps, updates from {args.learning_starts}",
            )  # fmt: skip
    record.save(raw)


if __name__ == "__main__":
    main()
