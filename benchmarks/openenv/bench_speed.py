"""The two speed targets of the OpenEnv client, measured side by side in one run.

1. **GRPO iteration, env_url vs in-process.** The same GRPO manifest (tiny model, batch 2 x group 4 =
   8 concurrent sessions, 2 turns, 8 new tokens, 1 torch thread) trained against the same text env
   in-process (``environment.entrypoint``) and through ``agilerl serve-env`` on loopback
   (``environment.env_url``), alternating, for two envs: the word game (microseconds per step) and
   the word game burning ``--step-cost-ms`` (default 2) of CPU per step. Reported: median seconds per
   training iteration (``train/iteration_s``, first generation skipped as warm-up), and the ratio.
2. **Client CPU per env step at 8 sessions.** This process's CPU time (``time.process_time``: the
   servers run in another process) per env step, stepping 8 sessions of the word game in lockstep:
   ours (``OpenEnvTextEnv.run_batch``: one event loop multiplexes every session) against eight
   independent openenv-core sync clients (``GenericEnvClient(...).sync()``, each with its own loop
   thread), driven from a thread pool (as a batch would be) and one after another.

Run from the repository root::

    python benchmarks/openenv/bench_speed.py [--iterations 20] [--repeats 2] [--rounds 400]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib

REPO = Path(__file__).resolve().parents[2]
GAME = "examples/openenv/word_game.py:SayWordGame"
COSTLY = "benchmarks/openenv/bench_openenv.py:CostlyWordGame"
SESSIONS = 8


def serve(entrypoint: str, config: dict[str, Any]) -> tuple[subprocess.Popen[str], str]:
    code = "import sys; from agilerl.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve-env", entrypoint, "--port", "0", "--env-config", json.dumps(config)],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "AGILERL_LOAD_PLUGINS": "openenv", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.stdout is not None
    url = next(m.group(1) for line in proc.stdout if (m := re.search(r"on (http://127\.0\.0\.1:\d+)", line)))
    return proc, url


def manifest(model: Path, run_dir: Path, env: dict[str, Any], iterations: int) -> dict[str, Any]:
    return {
        "algorithm": {
            "name": "GRPO", "group_size": 4, "batch_size": SESSIONS // 4, "lr": 0.005, "beta": 0.04,
            "temperature": 1.0, "max_output_tokens": 8, "gradient_checkpointing": False, "use_liger_loss": False,
        },
        "network": {"pretrained_model_name_or_path": str(model), "max_context_length": 128},
        "environment": {"env_type": "rollout", "max_turns": 2, **env},
        "training": {
            "max_steps": iterations, "evo_steps": 5, "eval_loop": 1, "seed": 0, "run_dir": str(run_dir),
            "checkpoint_steps": 100_000,
        },
    }  # fmt: skip


def train(spec: dict[str, Any], path: Path) -> float:
    """Median seconds per iteration over the generations after the first."""
    import yaml

    from agilerl.cli import main

    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    if main(["train", str(path), "--no-progress"]) != 0:
        raise SystemExit("training failed")
    with (Path(spec["training"]["run_dir"]) / "metrics.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return statistics.median(float(r["train/iteration_s"]) for r in rows[1:])


def bench_grpo(model: Path, tmp: Path, iterations: int, repeats: int, cost_ms: float) -> list[tuple[str, float, float]]:
    out = []
    for label, entrypoint, config in (
        ("word game (µs per step)", GAME, {"turns": 2}),
        (f"word game + {cost_ms:g} ms CPU per step", COSTLY, {"turns": 2, "step_cost_ms": cost_ms}),
    ):
        proc, url = serve(entrypoint, config)
        local, remote = [], []
        try:
            for r in range(repeats):  # alternate, so both sides see the same machine load
                local.append(train(manifest(model, tmp / f"l{len(out)}{r}", {"entrypoint": entrypoint,
                                                                               "env_config": config}, iterations),
                                   tmp / "m.yaml"))  # fmt: skip
                remote.append(
                    train(manifest(model, tmp / f"r{len(out)}{r}", {"env_url": url}, iterations), tmp / "m.yaml")
                )
        finally:
            proc.kill()
            proc.wait()
        out.append((label, statistics.median(local), statistics.median(remote)))
    return out


def bench_client_cpu(rounds: int) -> dict[str, float]:
    """Client CPU seconds per env step, 8 sessions of the word game stepped in lockstep."""
    from agilerl_plugin_llm.specs import LLMEnvSpec
    from agilerl_plugin_openenv._openenv import generic_client_cls
    from agilerl_plugin_openenv.client import OpenEnvTextEnv, build_env_url_source

    turns = 10_000  # episodes longer than the measurement: every call is a step
    proc, url = serve(GAME, {"turns": turns})
    try:
        make_env, _ = build_env_url_source(LLMEnvSpec(env_type="rollout", env_url=url, max_turns=turns))
        ours = [make_env() for _ in range(SESSIONS)]
        OpenEnvTextEnv.run_batch([partial(env.reset, seed=i) for i, env in enumerate(ours)])
        theirs = [generic_client_cls()(base_url=url).sync() for _ in range(SESSIONS)]
        for client in theirs:
            client.connect()
            client.reset()
        pool = ThreadPoolExecutor(max_workers=SESSIONS)

        def step_ours() -> None:
            OpenEnvTextEnv.run_batch([partial(env.step, "one") for env in ours])

        def step_theirs_pool() -> None:
            list(pool.map(lambda c: c.step({"text": "one"}), theirs))

        def step_theirs_serial() -> None:
            for client in theirs:
                client.step({"text": "one"})

        results: dict[str, list[float]] = {"ours": [], "pool": [], "serial": []}
        for _ in range(3):  # interleaved blocks
            for name, fn in (("ours", step_ours), ("pool", step_theirs_pool), ("serial", step_theirs_serial)):
                for _ in range(20):
                    fn()  # warm-up
                cpu = time.process_time()
                for _ in range(rounds):
                    fn()
                results[name].append((time.process_time() - cpu) / (rounds * SESSIONS))
        for client in theirs:
            client.close()
        for env in ours:
            env.close()
        pool.shutdown()
    finally:
        proc.kill()
        proc.wait()
    return {k: statistics.median(v) for k, v in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--step-cost-ms", type=float, default=2.0)
    args = parser.parse_args()
    record = benchlib.Record("openenv/bench_speed")
    os.chdir(REPO)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    from agilerl_plugin_llm.testing import build_tiny_model

    tmp = Path(tempfile.mkdtemp(prefix="bench-openenv-speed-"))
    model = build_tiny_model(tmp / "model")
    load0 = os.getloadavg()[0]
    cpu = bench_client_cpu(args.rounds)
    grpo = bench_grpo(model, tmp, args.iterations, args.repeats, args.step_cost_ms)
    print(f"# load average {load0:.1f} -> {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; 1 torch thread")
    print(f"\n## GRPO s/iteration, {SESSIONS} concurrent sessions, 2 turns (median of {args.repeats} runs x "
          f"{args.iterations} iterations, first generation skipped)\n")  # fmt: skip
    print("| env | in-process s/it | env_url s/it | ratio | target |")
    print("|---|---:|---:|---:|---|")
    for label, local, remote in grpo:
        print(f"| {label} | {local:.3f} | {remote:.3f} | {remote / local:.2f}x | <= 1.15x |")
    print(f"\n## client CPU per env step, {SESSIONS} sessions in lockstep ({args.rounds} rounds x 3 blocks)\n")
    print("| client | CPU µs / step | vs 8 openenv-core sync clients (thread pool) |")
    print("|---|---:|---:|")
    for name, label in (("ours", "env_url client (one event loop, run_batch)"),
                        ("pool", "8 openenv-core sync clients, thread pool"),
                        ("serial", "8 openenv-core sync clients, one after another")):  # fmt: skip
        print(f"| {label} | {cpu[name] * 1e6:.0f} | {cpu[name] / cpu['pool']:.2f}x |")
    print(f"\nours / serial sync clients: {cpu['ours'] / cpu['serial']:.2f}x (target <= 0.5x)")
    for i, (label, local, remote) in enumerate(grpo):
        record.row(f"openenv_grpo_env_url_{i}", what=f"OpenEnv GRPO s/iteration, "
                   f"{SESSIONS} sessions, env_url: {label}", against="in-process env", wall=remote / local, cpu=None,
                   target="<= 1.15x", met=remote / local <= 1.15, repeats=args.repeats,
                   detail=f"{remote:.3f} vs {local:.3f} s/it")  # fmt: skip
    for peer, label in (("serial", "one after another"), ("pool", "from a thread pool")):
        record.row(f"openenv_client_cpu_{peer}", what=f"OpenEnv client CPU per env step, {SESSIONS} sessions",
                   against=f"{SESSIONS} openenv-core sync clients, {label}", wall=None, cpu=cpu["ours"] / cpu[peer],
                   target="<= 0.5x", met=cpu["ours"] / cpu[peer] <= 0.5, repeats=3,
                   detail=f"{cpu['ours'] * 1e6:.0f} vs {cpu[peer] * 1e6:.0f} CPU us/step")  # fmt: skip
    record.save({"grpo": grpo, "client_cpu_s_per_step": cpu, "args": vars(args)})


if __name__ == "__main__":
    main()
