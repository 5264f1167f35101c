"""Evolutionary HPO, PPO on CartPole-v1: agilerl (this repo) vs AgileRL from PyPI, side by side.

    python benchmarks/hpo/bench_hpo.py [--seeds 0 1 2] [--max-steps 100000]

Both libraries train from the same manifest, ``examples/ppo_cartpole_hpo.yaml`` (population 4,
tournament selection with elitism, mutation probabilities no_mut .4 / arch .2 / params .2 / hp .2,
lr, batch_size and learn_step mutated inside the same ranges, 100k env steps per agent, an
evaluation + evolution step every 10,240 steps per agent), each run in a fresh process with one
torch thread; the two libraries alternate per seed so machine load hits both alike. Each run's
``mutation.rand_seed`` is its seed. AgileRL runs through its own ``LocalTrainer.from_manifest`` in
the shared AgileRL virtualenv (``benchmarks/agilerl_venv.py``: ``benchmarks/.venv-agilerl`` or
``$AGILERL_VENV``, created on first use). Reported: wall seconds for the run and per generation, the best evaluated
fitness (a population's best latest fitness, over the run) and the env steps per agent at which a
best fitness >= 475 was first evaluated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
MANIFEST = HERE.parents[1] / "examples" / "ppo_cartpole_hpo.yaml"
SOLVED = 475.0
OURS, THEIRS = "agilerl (ours)", "AgileRL 2.58"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib  # noqa: E402


def run(python: Path | str, worker: str, cfg: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(
        [str(python), str(HERE / worker), json.dumps(cfg)], check=True, capture_output=True, text=True, env=env
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def summarise(r: dict[str, Any]) -> dict[str, Any]:
    gens = r["generations"]
    solved = [g["steps"] for g in gens if g["best"] >= SOLVED]
    return {
        "wall_s": r["wall_s"],
        "generations": len(gens),
        "s_per_generation": r["wall_s"] / max(len(gens), 1),
        "best_fitness": max(g["best"] for g in gens),
        "steps_to_475": solved[0] if solved else None,
        "final_steps": gens[-1]["steps"] if gens else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=100_000)
    parser.add_argument("--evo-steps", type=int, default=None, help="env steps per agent between evolution steps")
    parser.add_argument("--only", choices=["ours", "agilerl"], default=None, help="run one library only")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ppo_cartpole_hpo.json")
    args = parser.parse_args()
    record = benchlib.Record("hpo/bench_hpo")
    their_python = benchlib.agilerl_python() if args.only != "ours" else None
    base = yaml.safe_load(MANIFEST.read_text())
    base["training"]["max_steps"] = args.max_steps
    if args.evo_steps:
        base["training"]["evo_steps"] = args.evo_steps
        base["algorithm"]["learn_step"] = min(base["algorithm"]["learn_step"], args.evo_steps)
    results: dict[str, list[dict[str, Any]]] = {OURS: [], THEIRS: []}
    for seed in args.seeds:
        manifest = json.loads(json.dumps(base))
        manifest["mutation"]["rand_seed"] = seed
        for name, python, worker in (
            (OURS, sys.executable, "_ours_worker.py"),
            (THEIRS, their_python, "_agilerl_worker.py"),
        ):
            if python is None or (args.only == "ours" and name != OURS) or (args.only == "agilerl" and name != THEIRS):
                continue
            r = run(python, worker, {"seed": seed, "manifest": manifest})
            s = {"seed": seed, **summarise(r), "per_generation": r["generations"]}
            results[name].append(s)
            if not benchlib.SMOKE:  # after every run: partial results survive
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(
                    json.dumps({"max_steps": args.max_steps, "seeds": args.seeds, "results": results}, indent=2)
                )
            print(f"[bench] seed {seed} {name:15s} {s['wall_s']:7.1f} s ({s['s_per_generation']:5.1f} s/gen, "
                  f"{s['generations']} gens) best fitness {s['best_fitness']:6.1f} "
                  f"475 at {s['steps_to_475']} steps/agent", flush=True)  # fmt: skip
    print(f"\nPPO CartPole-v1, population 4, {args.max_steps} env steps per agent, seeds {args.seeds} (medians)\n")
    print("| library | wall s (run) | s / generation | best fitness | runs reaching 475 | wall ratio |")
    print("|---|---|---|---|---|---|")
    theirs = statistics.median(r["wall_s"] for r in results[THEIRS]) if results[THEIRS] else None
    for name, runs in results.items():
        if not runs:
            continue
        wall = statistics.median(r["wall_s"] for r in runs)
        per_gen = statistics.median(r["s_per_generation"] for r in runs)
        best = statistics.median(r["best_fitness"] for r in runs)
        solved = sum(r["steps_to_475"] is not None for r in runs)
        ratio = f"{wall / theirs:.2f}x" if theirs else "-"
        print(f"| {name} | {wall:.1f} | {per_gen:.1f} | {best:.1f} | {solved}/{len(runs)} | {ratio} |")
        if name == OURS and theirs:
            record.row("hpo_ppo_cartpole", what=f"evolutionary HPO wall time, PPO CartPole pop 4, "
                       f"{args.max_steps:,} steps/agent", against="AgileRL 2.58", wall=wall / theirs, cpu=None,
                       target="<= 0.8x", met=wall / theirs <= 0.8, repeats=len(runs),
                       detail=f"median best fitness {best:.0f}; {solved}/{len(runs)} reach 475")  # fmt: skip
    record.save({"max_steps": args.max_steps, "seeds": args.seeds, "results": results})


if __name__ == "__main__":
    main()
