"""What flushing denormal floats buys: the DQN cells and TD3 Hopper of ``bench_learning.py``, ours and
SB3's, each with and without the CPU's flush-to-zero mode.

Our gym strategies train with denormal floats flushed to zero (``agilerl_plugin_gym.denormals``):
Adam's first moments of weights whose gradient has gone to zero (dead ReLU units) decay into
float32's denormal range and stay there, and every arithmetic operation on them is slow on x86.
Four sides, each in a process of its own with one torch thread, only ``learn`` / ``train`` timed
(CPU seconds from ``getrusage``), no evaluation, the cell's RL Zoo settings:

* ``ours``: as shipped (flushed); ``ours_unflushed``: the same run with the mode left off;
* ``sb3``: Stable-Baselines3 as users run it (not flushed); ``sb3_flushed``: with
  ``torch.set_flush_denormal(True)`` set before it trains.

Recorded per run: CPU seconds, env steps per CPU second, and the share of the Adam first moments
that are denormal at the end. The sides alternate per repeat; each ratio is the median of the
per-repeat ratios.

    python benchmarks/gym/bench_denormals.py                    # every cell, 2 repeats (~35 min)
    python benchmarks/gym/bench_denormals.py --cell dqn-CartPole-v1 --repeats 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib

#: Cell -> env steps per run (each past the cell's learning start, so the updates dominate).
CELLS = {"dqn-CartPole-v1": 20_000, "dqn-LunarLander-v3": 30_000, "td3-Hopper-v5": 16_000}
SIDES = ("ours", "ours_unflushed", "sb3", "sb3_flushed")


def _denormal_share(moments: list[Any]) -> float:
    import torch

    tiny = torch.finfo(torch.float32).tiny
    count = total = 0
    for m in moments:
        x = m.detach().abs()
        count += int(((x > 0) & (x < tiny)).sum())
        total += x.numel()
    return count / max(total, 1)


def _first_moments(opt: Any) -> list[Any]:
    """Adam's first moments of one of our optimizers (flat: one tensor; per parameter: its state)."""
    flat = getattr(opt, "exp_avg", None)
    return [flat] if flat is not None else [st["exp_avg"] for st in opt.state.values()]


def run_side(cell_key: str, side: str, steps: int, seed: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    import bench_learning

    cell = bench_learning.CELLS[cell_key]
    if side.startswith("sb3"):
        model = cell.sb3(seed, steps)
        if side == "sb3_flushed":
            torch.set_flush_denormal(True)
        c0 = benchlib.cpu_seconds()
        model.learn(total_timesteps=steps)
        cpu = benchlib.cpu_seconds() - c0
        owners = [model.policy, getattr(model, "actor", None), getattr(model, "critic", None)]
        optimizers = {id(o.optimizer): o.optimizer for o in owners if hasattr(o, "optimizer")}
        moments = [st["exp_avg"] for opt in optimizers.values() for st in opt.state.values()]
    else:
        import agilerl_plugin_gym.single_agent.strategies as strategies
        from agilerl.training.trainer import LocalTrainer

        if side == "ours_unflushed":
            strategies.flush_denormals = contextlib.nullcontext  # type: ignore[assignment]
        manifest = cell.ours(seed, steps)
        manifest["training"].update(evo_steps=steps)
        trainer = LocalTrainer.from_manifest(manifest, run_dir=tempfile.mkdtemp(prefix="bench-denormals-"))
        trainer.strategy.evaluate = lambda agent, run: 0.0  # type: ignore[method-assign]  # training alone
        c0 = benchlib.cpu_seconds()
        agent = trainer.train().population[0]
        cpu = benchlib.cpu_seconds() - c0
        moments = [m for opt in agent.optimizers.values() for m in _first_moments(opt)]
    return {"steps": steps, "cpu_s": cpu, "steps_per_cpu_s": steps / cpu, "denormal_share": _denormal_share(moments)}


def spawn(cell: str, side: str, steps: int, seed: int) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", side, "--cell", cell, "--steps", str(steps), "--seed", str(seed)]
    return benchlib.worker_result(cmd, f"{cell} {side}")


#: (row key suffix, numerator side, denominator side, their names in the summary table)
RATIOS = (
    ("flush_gain_ours", "ours", "ours_unflushed", "ours as shipped (flushed)", "ours with the mode off"),
    ("vs_sb3", "ours", "sb3", "ours as shipped (flushed)", "Stable-Baselines3 as users run it (not flushed)"),
    ("flush_gain_sb3", "sb3_flushed", "sb3", "Stable-Baselines3 flushed by hand", "Stable-Baselines3 (not flushed)"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cell", nargs="+", choices=sorted(CELLS), default=sorted(CELLS))
    ap.add_argument("--steps", type=int, help="env steps per run (default: the cell's, CELLS)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        steps = args.steps or CELLS[args.cell[0]]
        print("RESULT " + json.dumps(run_side(args.cell[0], args.worker, steps, args.seed)))
        return
    sides = [s for s in SIDES if not s.startswith("sb3") or benchlib.has_module("stable_baselines3", "SB3")]
    record = benchlib.Record("gym/bench_denormals")
    raw: dict[str, Any] = {"args": vars(args), "runs": {}}
    for cell in args.cell:
        steps = min(args.steps or CELLS[cell], 1200) if benchlib.SMOKE else args.steps or CELLS[cell]
        runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        for rep in range(args.repeats):
            for side in sides if rep % 2 == 0 else sides[::-1]:  # alternate against load drift
                res = spawn(cell, side, steps, seed=rep)
                runs[side].append(res)
                print(f"{cell} {side:14s} repeat {rep}: {res['cpu_s']:.1f} CPU s for {steps} steps "
                      f"({res['steps_per_cpu_s']:.0f} per CPU s), Adam first moments denormal: "
                      f"{res['denormal_share']:.0%}", flush=True)  # fmt: skip
        raw["runs"][cell] = runs
        for suffix, num, den, num_name, den_name in RATIOS:
            if num not in runs or den not in runs:
                continue
            a = [r["steps_per_cpu_s"] for r in runs[num]]
            b = [r["steps_per_cpu_s"] for r in runs[den]]
            ratio, _ = benchlib.paired(a, b)
            record.row(
                f"{cell.replace('-', '_').lower()}_denormals_{suffix}",
                what=f"{cell} (RL Zoo settings), env steps per CPU s: {num_name}", against=den_name, wall=None, cpu=ratio,
                target="measured (no target)", met=None, repeats=args.repeats,
                detail=f"{', '.join(f'{x:.0f}' for x in a)} vs {', '.join(f'{x:.0f}' for x in b)} steps per CPU s; "
                f"{steps} steps",
            )  # fmt: skip
    record.save(raw)


if __name__ == "__main__":
    main()
