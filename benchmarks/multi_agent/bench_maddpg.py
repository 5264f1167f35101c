"""MADDPG throughput: this project vs AgileRL's own MADDPG (PyPI ``agilerl``), side by side.

Same env (mpe2 simple_speaker_listener_v4, discrete actions, 25-step episodes), same number of env
steps, same hyperparameters (AgileRL's MADDPG defaults: lr_actor 1e-3, lr_critic 1e-2, learn_step 5,
gamma 0.95, tau 0.01, OU noise), same networks (64-64 MLP actor and critics, no layer norm), 8
vectorised envs with each library's own async vector env, batch 256, one torch thread, one
evaluation at the end. Each side runs in its own process; the sides alternate, ``--repeats`` times.

AgileRL runs in the shared AgileRL virtualenv (``benchmarks/agilerl_venv.py``: ``benchmarks/.venv-agilerl`` or
``$AGILERL_VENV``, created on first use); this project runs with the interpreter that runs this script.

    python benchmarks/multi_agent/bench_maddpg.py --steps 20000 --repeats 3

Prints one JSON line per run and a summary: median env-steps per wall second and per CPU second
(the worker and its env processes) per side, and the ratios.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib  # noqa: E402


def run_side(python: Path, worker: str, cfg: dict[str, object]) -> dict[str, object]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [str(python), str(HERE / worker), json.dumps(cfg)], capture_output=True, text=True, env=env, check=False
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{worker} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    res: dict[str, object] = json.loads(lines[-1])
    # CPU seconds of the worker and its env processes (waited-for descendants count here): on a
    # shared machine wall time depends on the neighbours, CPU time much less.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    res["cpu_s"] = round(cpu, 2)
    res["steps_per_cpu_s"] = round(float(res["steps"]) / cpu, 1)  # type: ignore[arg-type]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20_000, help="env steps per run (all envs together)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-envs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--skip-agilerl", action="store_true", help="only run this project")
    ap.add_argument("--with-sync", action="store_true", help="also run this project with sync: true (no workers)")
    args = ap.parse_args()

    cfg: dict[str, object] = {
        "env": "mpe2.simple_speaker_listener_v4",
        "max_cycles": 25,
        "num_envs": args.num_envs,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "lr_actor": 1e-3,
        "lr_critic": 1e-2,
        "learn_step": 5,
        "gamma": 0.95,
        "tau": 0.01,
        "expl_noise": 0.1,
        "hidden": 64,
        "memory_size": 100_000,
    }
    record = benchlib.Record("multi_agent/bench_maddpg")
    agilerl_python = None if args.skip_agilerl else benchlib.agilerl_python()
    results: dict[str, list[dict[str, object]]] = {"ours": [], "ours_sync": [], "agilerl": []}
    with tempfile.TemporaryDirectory(prefix="agilerl-ma-bench-") as tmp:
        for rep in range(args.repeats):
            run_cfg = {**cfg, "seed": rep}
            sides = [("ours", Path(sys.executable), "_ours_worker.py", False)]
            if args.with_sync:
                sides.append(("ours_sync", Path(sys.executable), "_ours_worker.py", True))
            if agilerl_python is not None:
                sides.append(("agilerl", agilerl_python, "_agilerl_worker.py", False))
            if rep % 2:  # alternate the order so neither side always runs on a warmer machine
                sides.reverse()
            for side, python, worker, sync in sides:
                # a run directory holds one run (its lock): one per side and repeat
                res = run_side(python, worker, {**run_cfg, "sync": sync, "run_dir": str(Path(tmp) / f"{side}-{rep}")})
                results[side].append(res)
                print(json.dumps({"repeat": rep, **res}), flush=True)
    summary: dict[str, object] = {"config": cfg, "repeats": args.repeats}
    for side, runs in results.items():
        if side == "ours_sync" and not runs:
            continue
        if runs:
            summary[f"{side}_steps_per_s_median"] = round(statistics.median(float(r["steps_per_s"]) for r in runs), 1)
            summary[f"{side}_steps_per_cpu_s_median"] = round(
                statistics.median(float(r["steps_per_cpu_s"]) for r in runs), 1
            )
            summary[f"{side}_fitness_median"] = round(statistics.median(float(r["fitness"]) for r in runs), 2)
    if results["agilerl"]:
        for side in ("ours", "ours_sync"):
            if results[side]:
                for unit in ("steps_per_s", "steps_per_cpu_s"):
                    summary[f"ratio_{side}_over_agilerl_{unit}"] = round(
                        float(summary[f"{side}_{unit}_median"]) / float(summary[f"agilerl_{unit}_median"]), 2
                    )
    print(json.dumps(summary, indent=2))
    for side in ("ours", "ours_sync"):
        if f"ratio_{side}_over_agilerl_steps_per_s" in summary:
            wall = float(summary[f"ratio_{side}_over_agilerl_steps_per_s"])  # type: ignore[arg-type]
            cpu = float(summary[f"ratio_{side}_over_agilerl_steps_per_cpu_s"])  # type: ignore[arg-type]
            record.row(f"maddpg_speaker_listener_{side}", what="MADDPG env-steps/s, speaker-listener"
                       + (" (sync: true)" if side == "ours_sync" else " (async default)"), against="AgileRL 2.58",
                       wall=wall, cpu=cpu, target=">= 1.2x", met=cpu >= 1.2, repeats=args.repeats,
                       detail=f"{summary[f'{side}_steps_per_cpu_s_median']} vs "
                              f"{summary['agilerl_steps_per_cpu_s_median']} steps per CPU s")  # fmt: skip
    record.save({"summary": summary, "runs": results})


if __name__ == "__main__":
    main()
