"""NeuralUCB on iris: agilerl (this repo) vs AgileRL from PyPI, side by side.

    python benchmarks/bandit/bench_neural_ucb.py [--steps 3000] [--seeds 0 1 2]

Runs AgileRL in the shared AgileRL virtualenv (``benchmarks/agilerl_venv.py``: ``benchmarks/.venv-agilerl`` or
``$AGILERL_VENV``, created on first use), each run in a
fresh process with one torch thread. Both get the same data (iris, standardised by our loader and
written to CSV), the same network (four hidden ReLU layers of 64), the same hyperparameters
(gamma 1, lamb 1, reg 6.25e-4, lr 1e-3, batch 64, replay 10k) and the same step budget; runs are
interleaved so machine load hits both alike. Reported: steps/s of the training loop (acting,
stepping, storing, learning; no evaluation), by wall clock and by the process's CPU time (steadier
on a shared machine), and cumulative regret at the budget (regret per step = 1 - reward: the true
class always pays 1).

Two settings, because ``learn_step`` means different things: in AgileRL's ``train_bandits`` it is
the number of gradient steps taken after *every* env step; in ours the env steps between gradient
steps (the field's documented meaning). "defaults" runs both as shipped (learn_step 2: AgileRL
4x our gradient steps); "matched" runs both at one gradient step per env step (learn_step 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib  # noqa: E402


def write_iris(tmp: Path) -> tuple[str, str]:
    """Iris as our loader encodes it (standardised), so both libraries see identical numbers."""
    import pandas as pd

    from agilerl_plugin_bandit.env import make_bandit_env
    from agilerl_plugin_bandit.specs import BanditEnvSpec

    env = make_bandit_env(BanditEnvSpec(name="iris"))
    feats, targs = tmp / "iris_features.csv", tmp / "iris_targets.csv"
    pd.DataFrame(env.features, columns=env.feature_names).to_csv(feats, index=False)
    pd.DataFrame({"target": env.targets}).to_csv(targs, index=False)
    return str(feats), str(targs)


def run(python: Path | str, worker: str, cfg: dict[str, object]) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(
        [str(python), str(HERE / worker), json.dumps(cfg)], check=True, capture_output=True, text=True, env=env
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "neural_ucb_iris.json")
    args = parser.parse_args()
    record = benchlib.Record("bandit/bench_neural_ucb")
    their_python = benchlib.agilerl_python()
    base = {"steps": args.steps, "gamma": 1.0, "lamb": 1.0, "reg": 6.25e-4, "lr": 1e-3, "batch_size": 64,
            "hidden_size": [64, 64, 64, 64]}  # fmt: skip
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        feats, targs = write_iris(Path(tmp))
        for setting, learn_step in (("defaults", 2), ("matched", 1)):
            results[setting] = {"agilerl (ours)": [], "AgileRL 2.58": []}
            for seed in args.seeds:
                cfg = {**base, "seed": seed, "learn_step": learn_step, "features": feats, "targets": targs}
                for name, python, worker in (
                    ("agilerl (ours)", sys.executable, "_ours_worker.py"),
                    ("AgileRL 2.58", their_python, "_agilerl_worker.py"),
                ):
                    if python is None:
                        continue
                    r = run(python, worker, cfg)
                    results[setting][name].append(r)
                    print(f"[bench] {setting:8s} seed {seed} {name:15s} {r['steps_per_s']:8.1f} steps/s "
                          f"regret {r['regret']:7.1f} last-500 reward {r['last500']:.3f}", flush=True)  # fmt: skip
    if not benchlib.SMOKE:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"steps": args.steps, "seeds": args.seeds, "results": results}, indent=2))
    if their_python is None:
        record.save({"steps": args.steps, "seeds": args.seeds, "results": results})
        return
    print(f"\nNeuralUCB on iris, {args.steps} steps, seeds {args.seeds} (medians of steps/s, means of the rest)\n")
    print("| setting | library | steps/s (wall) | steps/s (CPU time) | cumulative regret | last-500 mean reward "
          "| speed ratio (wall / CPU) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for setting, by_lib in results.items():
        wall = {k: statistics.median(r["steps_per_s"] for r in v) for k, v in by_lib.items()}
        cpu = {k: statistics.median(r["cpu_steps_per_s"] for r in v) for k, v in by_lib.items()}
        for name, runs in by_lib.items():
            regret = statistics.mean(r["regret"] for r in runs)
            last = statistics.mean(r["last500"] for r in runs)
            ratio_wall = wall[name] / wall["AgileRL 2.58"]
            ratio_cpu = cpu[name] / cpu["AgileRL 2.58"]
            print(f"| {setting} | {name} | {wall[name]:.0f} | {cpu[name]:.0f} | {regret:.1f} | {last:.3f} "
                  f"| {ratio_wall:.1f}x / {ratio_cpu:.1f}x |")  # fmt: skip
        theirs = statistics.mean(r["regret"] for r in by_lib["AgileRL 2.58"])
        ours = statistics.mean(r["regret"] for r in by_lib["agilerl (ours)"])
        record.row(f"neural_ucb_iris_{setting}", what=f"NeuralUCB steps/s, iris ({setting})", against="AgileRL 2.58",
                   wall=wall["agilerl (ours)"] / wall["AgileRL 2.58"], cpu=cpu["agilerl (ours)"] / cpu["AgileRL 2.58"],
                   target=">= 1.5x at <= regret", met=cpu["agilerl (ours)"] / cpu["AgileRL 2.58"] >= 1.5 and ours <= theirs,
                   repeats=len(args.seeds), detail=f"mean regret {ours:.1f} vs {theirs:.1f}")  # fmt: skip
    record.save({"steps": args.steps, "seeds": args.seeds, "results": results})


if __name__ == "__main__":
    main()
