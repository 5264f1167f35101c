"""Run every benchmark script: ``--smoke`` proves the commands work, a plain run measures.

    python benchmarks/run.py --smoke                  # every script, tiny budgets, one repeat (CI runs this)
    python benchmarks/run.py                          # every script at its full budget (hours), then the summary
    python benchmarks/run.py --only gym/bench_cartpole gym/bench_rainbow

``--smoke`` runs each script below with tiny budgets and one repeat, every side of each comparison
included where its peer is installed (``benchmarks/requirements.txt``: Stable-Baselines3,
sb3-contrib, TRL; the PyPI AgileRL venv of ``benchmarks/agilerl_venv.py``, which
``AGILERL_BENCH_SKIP_AGILERL=<reason>`` leaves out); a missing peer is skipped with a printed
reason. It measures nothing and writes nothing under ``benchmarks/``; it exits non-zero if any
script fails. A plain run writes each script's dated results under ``benchmarks/results/`` and then
regenerates the summary table of ``benchmarks/README.md`` (``benchmarks/summarize.py``).

Every ``bench_*.py`` under ``benchmarks/`` must be listed in :data:`SCRIPTS` and every other
module in :data:`HELPERS` (a test checks it), so no benchmark is left for nobody to run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Script:
    """One benchmark script: its arguments for a smoke run and for a full run (its defaults: ``[]``)."""

    smoke: list[str]
    full: list[str] = field(default_factory=list)


SCRIPTS: dict[str, Script] = {
    "gym/bench_cartpole.py": Script(
        smoke=["--throughput-steps", "2048", "--budget", "2048", "--seeds", "1", "--throughput-repeats", "1"]
    ),
    "gym/bench_rainbow.py": Script(
        smoke=["--throughput-steps", "1600", "--budget", "1600", "--seeds", "1", "--throughput-repeats", "1"]
    ),
    "gym/bench_recurrent.py": Script(
        smoke=["--throughput-steps", "1024", "--budget", "2048", "--seeds", "1", "--throughput-repeats", "1"]
    ),
    # The profiles behind the README's "Where the gym time goes": all three algorithms, smoke and full.
    "gym/profile_learn.py": Script(smoke=["--algo", "all", "--steps", "1200"], full=["--algo", "all"]),
    "gym/bench_td3.py": Script(smoke=["--steps", "1200"], full=["--repeats", "3"]),
    # SAC and TD3 steps per CPU s at RL Zoo sizes: ours, SB3 and the bare-PyTorch floor (issue 35).
    "gym/bench_offpolicy.py": Script(smoke=["--repeats", "1", "--steps", "400", "--learning-starts", "256"]),
    # What flushing denormal floats buys (DQN cells, TD3 Hopper), ours and SB3's, each with and without it.
    "gym/bench_denormals.py": Script(smoke=["--cell", "dqn-CartPole-v1", "--repeats", "1"]),
    # Learning against SB3 (RL Zoo settings): the smoke run takes one cell of each kind (off-policy
    # discrete, off-policy continuous, masked on-policy, normalised MuJoCo on-policy), 512 steps a side;
    # the full run is every cell, 3 seeds a side (hours; cells also run one by one, see its docstring).
    "gym/bench_learning.py": Script(
        smoke=["--smoke", "--cell", "dqn-CartPole-v1", "sac-Pendulum-v1", "ppo_masked-MaskedPick", "ppo-Hopper-v5"]
    ),
    "multi_agent/bench_maddpg.py": Script(
        smoke=["--steps", "400", "--repeats", "1", "--num-envs", "2", "--batch-size", "32", "--with-sync"],
        full=["--with-sync"],
    ),
    "bandit/bench_neural_ucb.py": Script(smoke=["--steps", "150", "--seeds", "0"]),
    "hpo/bench_hpo.py": Script(smoke=["--seeds", "0", "--max-steps", "2048", "--evo-steps", "1024"]),
    "hpo/bench_mfpbt.py": Script(smoke=["--seeds", "0", "--max-steps", "1024", "--evo-steps", "512"]),
    "hpo/bench_ray.py": Script(
        smoke=["--seeds", "0", "--generations", "1", "--evo-steps", "1024", "--agilerl"], full=["--agilerl"]
    ),
    "llm/bench_sft_dpo.py": Script(smoke=["--steps", "2", "--warmup", "1", "--repeats", "1"]),
    "llm/bench_grpo.py": Script(smoke=["--steps", "2", "--warmup", "1", "--repeats", "1"]),
    "llm/bench_learning.py": Script(
        smoke=["--seeds", "0", "--rows", "64", "--sft-steps", "4", "--steps", "2", "--prompts", "2", "--group", "2"]
    ),
    # Why our GRPO gained less than TRL's (issue 37): one difference at a time; the full run takes ~20 minutes.
    "llm/ablate_learning.py": Script(
        smoke="--seeds 0 --rows 64 --sft-steps 4 --steps 2 --prompts 2 --group 2 --variants ours trl_topk50".split()
    ),
    # Our GRPO and TRL's in lock step (same prompts and sampling draws per step): the same completions (issue 37).
    "llm/lockstep_learning.py": Script(
        smoke="--seeds 0 --rows 64 --sft-steps 4 --steps 2 --prompts 2 --group 2".split()
    ),
    "llm/profile_llm.py": Script(smoke=["--steps", "2", "--warmup", "1"]),
    "llm/bench_data_parallel.py": Script(smoke=["--sizes", "64x2:2"]),
    "openenv/bench_speed.py": Script(smoke=["--iterations", "2", "--repeats", "1", "--rounds", "10"]),
    "openenv/bench_openenv.py": Script(
        smoke=["--episodes", "4", "--repeats", "1", "--step-cost-ms", "0", "--sessions", "2"]
    ),
    "openenv/bench_grpo_env_url.py": Script(smoke=["--iterations", "2"]),
}

#: Modules under benchmarks/ that are not scripts of their own: imported or spawned by the scripts above.
HELPERS: tuple[str, ...] = (
    "run.py",
    "summarize.py",
    "benchlib.py",
    "agilerl_venv.py",
    "gym/bare_rl.py",
    "gym/floor.py",
    "gym/masked_env.py",
    "gym/ablate_learning.py",  # run by hand where a learning cell loses (README: its ablation table)
    "bandit/_ours_worker.py",
    "bandit/_agilerl_worker.py",
    "hpo/_ours_worker.py",
    "hpo/_agilerl_worker.py",
    "multi_agent/_ours_worker.py",
    "multi_agent/_agilerl_worker.py",
)


def run_one(name: str, args: list[str], smoke: bool) -> tuple[bool, float, list[str]]:
    """Run one script with ``args``; returns (passed, seconds, its SKIP lines)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if smoke:
        env["AGILERL_BENCH_SMOKE"] = "1"
    cmd = [sys.executable, str(HERE / name), *args]
    print(f"\n[run] {'smoke' if smoke else 'full'}: python benchmarks/{name} {' '.join(args)}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    skips: list[str] = []
    for line in proc.stdout:
        if not smoke or "[bench]" in line:
            print(line, end="", flush=True)
        if "[bench] SKIP" in line:
            skips.append(line.strip())
        tail = [*tail[-59:], line]
    ok = proc.wait() == 0
    seconds = time.perf_counter() - t0
    if not ok and smoke:
        print("".join(tail), end="")
    print(f"[run] {name}: {'ok' if ok else f'FAILED (exit {proc.returncode})'} in {seconds:.0f} s", flush=True)
    return ok, seconds, skips


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny budgets, one repeat: prove every command works")
    ap.add_argument("--only", nargs="+", metavar="SCRIPT", help="e.g. gym/bench_cartpole (default: all)")
    ap.add_argument("--list", action="store_true", help="print the scripts and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(SCRIPTS))
        return 0
    names = list(SCRIPTS)
    if args.only:
        wanted = {n.removesuffix(".py") + ".py" for n in args.only}
        unknown = wanted - set(SCRIPTS)
        if unknown:
            ap.error(f"unknown script(s) {sorted(unknown)}; known: {', '.join(SCRIPTS)}")
        names = [n for n in names if n in wanted]
    results = {n: run_one(n, SCRIPTS[n].smoke if args.smoke else SCRIPTS[n].full, args.smoke) for n in names}
    print("\n[run] summary")
    for name, (ok, seconds, skips) in results.items():
        print(f"  {'ok    ' if ok else 'FAILED'} {seconds:6.0f} s  {name}")
        for line in skips:
            print(f"           {line}")
    failed = [n for n, (ok, _, _) in results.items() if not ok]
    if not args.smoke and not failed:
        subprocess.run([sys.executable, str(HERE / "summarize.py")], cwd=ROOT, check=True)
    if failed:
        print(f"[run] {len(failed)} of {len(names)} failed: {', '.join(failed)}")
        return 1
    print(f"[run] all {len(names)} passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
