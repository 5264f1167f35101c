"""Data parallelism, 2 processes vs 1 (gloo, CPU, 1 torch thread each): SFT and GRPO at the same
global batch, on the tiny test model and on a wider one (``--sizes``: hidden size x layers). Reports
wall seconds per training iteration (``train/iteration_s``, rank 0) and CPU seconds per iteration
summed over the processes (runs of ``steps`` and ``2 * steps`` iterations differenced, so start-up,
model loading and evaluation cancel), the speed-up,
and the machine's load (``os.getloadavg``) around each pair. On a machine loaded beyond its cores,
two processes also get two shares of the scheduler, so the wall ratio flatters them: read it with
the CPU seconds and the load.

    python benchmarks/llm/bench_data_parallel.py [--sizes 64x2:60,256x4:10] [--out results.json]

1 process is ``agilerl train --num-processes 1`` (the plain path); 2 are ``--num-processes 2``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "llm"


def manifest(algo: str, model: Path, run_dir: Path, steps: int) -> dict[str, Any]:
    net = {"pretrained_model_name_or_path": str(model), "max_context_length": 128}
    # One generation: the held-out evaluations (before and after) are the same in every run length.
    training = {"max_steps": steps, "evo_steps": steps, "seed": 0, "progress": False, "run_dir": str(run_dir)}
    if algo == "GRPO":
        return {"algorithm": {"name": "GRPO", "batch_size": 8, "group_size": 4, "beta": 0.04, "lr": 0.01,
                              "max_output_tokens": 8, "temperature": 1.0, "gradient_checkpointing": False},
                "network": net, "training": training,
                "environment": {"env_type": "reasoning", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                                "rubric_file_path": str(EXAMPLES / "say_word_rubric.py")}}  # fmt: skip
    return {"algorithm": {"name": "SFT", "batch_size": 32, "lr": 0.01, "gradient_checkpointing": False},
            "network": net, "training": training,
            "environment": {"env_type": "sft", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                            "columns": {"prompt": "question"}, "response_column": "answer"}}  # fmt: skip


def run(algo: str, procs: int, model: Path, work: Path, steps: int) -> tuple[float, float]:
    """(seconds per iteration on rank 0, CPU seconds of all processes) of one ``agilerl train``."""
    run_dir = work / f"{algo}-{model.name}-{procs}-{steps}"
    path = work / f"{algo}-{model.name}-{procs}-{steps}.yaml"
    path.write_text(yaml.safe_dump(manifest(algo, model, run_dir, steps)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "AGILERL_DIST_BACKEND": "gloo"}
    cmd = [sys.executable, "-m", "agilerl", "train", str(path), "--num-processes", str(procs)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the launcher and its ranks, all waited for
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if r.get("generation", -1) >= 0]  # one generation: the mean of its iterations
    return float(row["train/iteration_s"]), (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def per_iteration(algo: str, procs: int, model: Path, work: Path, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds per iteration: wall from the ``2 * steps`` run's ``train/iteration_s``
    (rank 0); CPU of all processes from runs of ``steps`` and ``2 * steps`` iterations differenced,
    so process start-up, model loading and the evaluations cancel."""
    short, long = run(algo, procs, model, work, steps), run(algo, procs, model, work, 2 * steps)
    return long[0], (long[1] - short[1]) / steps


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="64x2:60,256x4:10",
                   help="models as HIDDENxLAYERS:STEPS (64x2: the test model; runs of STEPS and 2 x STEPS)")  # fmt: skip
    p.add_argument("--algorithms", default="SFT,GRPO")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    record = benchlib.Record("llm/bench_data_parallel")
    from agilerl_plugin_llm.testing import build_tiny_model

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for size in args.sizes.split(","):
            shape, _, steps_text = size.partition(":")
            steps = int(steps_text or 10)
            hidden, layers = (int(x) for x in shape.split("x"))
            size = shape
            model = build_tiny_model(work / f"model-{size}", hidden_size=hidden, num_hidden_layers=layers)
            for algo in args.algorithms.split(","):
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                one, one_cpu = per_iteration(algo, 1, model, work, steps)
                two, two_cpu = per_iteration(algo, 2, model, work, steps)
                results[f"{algo} {size}"] = {
                    "one_process_s": one, "two_processes_s": two, "speedup": one / two,
                    "one_process_cpu_s": one_cpu, "two_processes_cpu_s": two_cpu, "load_1min": load,
                    "load_1min_after": os.getloadavg()[0], "bench_wall_s": time.perf_counter() - t0,
                }  # fmt: skip
                print(f"{algo} {size}: {one:.4f} s vs {two:.4f} s, {one / two:.2f}x; CPU {one_cpu:.4f} vs "
                      f"{two_cpu:.4f} s (load {load:.1f})", flush=True)  # fmt: skip
    print("| algorithm | model | 1 process s/iter | 2 processes s/iter | speed-up | CPU s/iter 1 / 2 | load |")
    print("|---|---|---|---|---|---|---|")
    for key, r in results.items():
        algo, size = key.split()
        print(
            f"| {algo} | {size} | {r['one_process_s']:.4f} | {r['two_processes_s']:.4f} | {r['speedup']:.2f}x "
            f"| {r['one_process_cpu_s']:.4f} / {r['two_processes_cpu_s']:.4f} "
            f"| {r['load_1min']:.1f}-{r['load_1min_after']:.1f} |"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    record.save(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
