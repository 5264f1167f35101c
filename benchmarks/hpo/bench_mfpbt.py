"""MF-PBT against plain tournament selection at the same total env steps, over several seeds.

    python benchmarks/hpo/bench_mfpbt.py [--seeds 0 1 2] [--max-steps 40960] [--evo-steps 4096]

Both train PPO on CartPole-v1 (or ``--env``) from ``examples/ppo_cartpole_hpo.yaml`` with a population of 6 (the
smallest MF-PBT layout: 2 sub-populations of 3) and the manifest's mutation settings, for
``--max-steps`` env steps per agent with an evaluation + evolution step every ``--evo-steps``:
so both spend 6 x max-steps env steps. Tournament selection: size 2, elitism. MF-PBT:
``selection_strategy: {strategy: multi_frequency}`` with upstream's defaults (frequency ratios
[1, 5]; per sub-population 1 winner, 0 survivors, 1 open for migration, 1 loser). Each run in a
fresh process with one torch thread (``_ours_worker.py``, local backend). Reported per seed and
as medians: the final population's best and mean fitness (its last evaluation) and the best
fitness evaluated during the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import benchlib  # noqa: E402
from bench_ray import MANIFEST, run  # noqa: E402

SELECTION: dict[str, dict[str, Any]] = {
    "tournament": {"strategy": "tournament", "tournament_size": 2, "elitism": True},
    "MF-PBT": {"strategy": "multi_frequency"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=40_960)
    parser.add_argument("--evo-steps", type=int, default=4_096)
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id (same PPO settings)")
    parser.add_argument("--out", type=Path, default=None, help="default results/mfpbt_vs_tournament_<env>.json")
    args = parser.parse_args()
    args.out = args.out or HERE / "results" / f"mfpbt_vs_tournament_{args.env}.json"
    record = benchlib.Record("hpo/bench_mfpbt")
    base = yaml.safe_load(MANIFEST.read_text())
    base["environment"]["name"] = args.env
    base.pop("tournament_selection", None)
    base["training"].update(pop_size=6, max_steps=args.max_steps, evo_steps=args.evo_steps)
    base["algorithm"]["learn_step"] = min(base["algorithm"]["learn_step"], args.evo_steps)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in SELECTION}
    for seed in args.seeds:
        for name, selection in SELECTION.items():
            manifest = json.loads(json.dumps(base))
            manifest["selection_strategy"] = selection
            manifest["mutation"]["rand_seed"] = seed
            r = run(sys.executable, "_ours_worker.py", {"seed": seed, "manifest": manifest})
            fits = r["fitnesses"]
            s = {"seed": seed, "final_best": fits[0], "final_mean": statistics.mean(fits),
                 "best_during_run": max(r["best_per_generation"]), "wall_s": r["wall_s"],
                 "total_env_steps": r["total_env_steps"], "best_per_generation": r["best_per_generation"]}  # fmt: skip
            results[name].append(s)
            print(f"[bench] seed {seed} {name:10s} final best {s['final_best']:6.1f} mean {s['final_mean']:6.1f} "
                  f"best during run {s['best_during_run']:6.1f} ({s['total_env_steps']} env steps, "
                  f"{s['wall_s']:.0f} s)", flush=True)  # fmt: skip
            if benchlib.SMOKE:
                continue
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "results": results},
                                           indent=2))  # fmt: skip
    print(f"\nPPO {args.env}, population 6, {args.max_steps} env steps per agent, evolution every "
          f"{args.evo_steps}, seeds {args.seeds} (medians)\n")  # fmt: skip
    print("| selection | final best fitness | final mean fitness | best during run | total env steps |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("final_best", "final_mean", "best_during_run")}
        print(f"| {name} | {med['final_best']:.1f} | {med['final_mean']:.1f} | {med['best_during_run']:.1f} | "
              f"{runs[0]['total_env_steps']} |")  # fmt: skip
    record.save({"args": {k: str(v) for k, v in vars(args).items()}, "results": results})


if __name__ == "__main__":
    main()
