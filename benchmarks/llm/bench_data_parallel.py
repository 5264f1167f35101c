"""Data parallelism, 2 processes vs 1 (``torchrun``, gloo, CPU, 1 torch thread each): SFT and GRPO on
the tiny model at the same global batch. Reports wall seconds per training iteration (the runs'
``train/iteration_s``, rank 0, first iteration skipped) and the speed-up.

    python benchmarks/llm/bench_data_parallel.py [--steps 20] [--out results.json]

Each configuration is one ``python -m torch.distributed.run --nproc_per_node N -m agilerl train``;
process start-up and evaluation are excluded. Needs at least 2 free cores to mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "llm"


def manifest(algo: str, model: Path, run_dir: Path, steps: int) -> dict[str, Any]:
    net = {"pretrained_model_name_or_path": str(model), "max_context_length": 128}
    training = {"max_steps": steps, "evo_steps": 1, "seed": 0, "progress": False, "run_dir": str(run_dir)}
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


def run(algo: str, procs: int, model: Path, work: Path, steps: int) -> float:
    run_dir = work / f"{algo}-{procs}"
    path = work / f"{algo}-{procs}.yaml"
    path.write_text(yaml.safe_dump(manifest(algo, model, run_dir, steps)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "AGILERL_DIST_BACKEND": "gloo"}
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--master_addr",
         "127.0.0.1", "--master_port", str(port), "-m", "agilerl", "train", str(path)],
        check=True, env=env, capture_output=True,
    )  # fmt: skip
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r.get("generation", -1) >= 0]
    return sum(r["train/iteration_s"] for r in trained[1:]) / max(len(trained) - 1, 1)  # skip the first


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    from agilerl_plugin_llm.testing import build_tiny_model

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = build_tiny_model(work / "model")
        for algo in ("SFT", "GRPO"):
            t0 = time.perf_counter()
            one = run(algo, 1, model, work, args.steps)
            two = run(algo, 2, model, work, args.steps)
            results[algo] = {"one_process_s": one, "two_processes_s": two, "speedup": one / two,
                             "bench_wall_s": time.perf_counter() - t0}  # fmt: skip
    print("| algorithm | 1 process s/iter | 2 processes s/iter | speed-up |\n|---|---|---|---|")
    for algo, r in results.items():
        print(f"| {algo} | {r['one_process_s']:.4f} | {r['two_processes_s']:.4f} | {r['speedup']:.2f}x |")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
