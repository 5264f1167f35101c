"""The LLM plugin's GPU checks (run by ``scripts/gpu_check.sh`` on a CUDA machine).

Each check prints one ``[gpu_check]`` line with its figures and timings and adds to the failures
when it does not hold:

1. ``fp32``: full fine-tuning keeps float32 master weights on the GPU (a bf16 checkpoint loads as fp32);
2. ``vllm``: the colocated-vLLM tests CI runs on CPU (``plugins/llm/tests/test_vllm_engine.py``), on
   CUDA: weight sync (full and LoRA) changes generation, sampled-token log-probs agree with the
   policy's, GRPO/GSPO/CISPO/LLMPPO/LLMREINFORCE learn with ``use_vllm: true``, failures are named;
3. ``server``: the server-mode tests (``test_vllm_server.py``) against vLLM's own server started on
   127.0.0.1, on CUDA: served greedy replies follow each synced LoRA adapter, and GRPO learns;
4. ``qlora``: SFT on an nf4 base (bitsandbytes) under LoRA: the held-out loss falls;
5. ``nccl``: data-parallel GRPO over 2 processes with the nccl backend (one GPU each) takes the
   same optimizer steps as 1 process at the same global batch: the CPU suite's comparison
   (``plugins/llm/tests/test_distributed.py``, gloo there), its manifest and launcher, on CUDA.
   It needs 2 GPUs (nccl refuses two ranks on one device): with fewer it is skipped, saying so.

    python scripts/gpu_check.py WORKDIR [CHECK ...]     # default: all; exit 0 held, 1 failed, 2 no GPU

Importable without CUDA or vLLM (they are imported inside the checks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "llm"
CHECKS = ("fp32", "vllm", "server", "qlora", "nccl")


class Skipped(Exception):
    """A check that cannot run on this machine (the reason is printed; it is not a failure)."""


def say(message: str) -> None:
    print(f"[gpu_check] {message}", flush=True)


def train(manifest: dict[str, Any], work: Path, name: str) -> tuple[int, list[dict[str, Any]], float]:
    """``agilerl train`` on ``manifest``: exit code, metrics rows, wall seconds."""
    import yaml

    from agilerl.cli import main

    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    t0 = time.perf_counter()
    code = main(["train", str(path)])
    wall = time.perf_counter() - t0
    metrics = Path(manifest["training"]["run_dir"]) / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    return code, rows, wall


def check_fp32(work: Path, model_dir: Path) -> str | None:
    import torch
    from transformers import AutoModelForCausalLM

    from agilerl_plugin_llm.model import load_model

    bf16 = work / "model-bf16"
    AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).save_pretrained(bf16)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (model_dir / name).exists():
            (bf16 / name).write_bytes((model_dir / name).read_bytes())
    dtypes = {p.dtype for p in load_model(bf16, device="cuda").parameters()}
    say(f"full fine-tuning weight dtypes on cuda: {dtypes}")
    return None if dtypes == {torch.float32} else f"full fine-tuning weights are {dtypes}, not float32"


#: The vLLM checks are the CPU suite's own tests, run on CUDA: one test code for both paths.
VLLM_TESTS = {
    "vllm": ROOT / "plugins" / "llm" / "tests" / "test_vllm_engine.py",
    "server": ROOT / "plugins" / "llm" / "tests" / "test_vllm_server.py",
}


def run_vllm_tests(name: str) -> str | None:
    """``pytest -m vllm`` on the shared test file with ``AGILERL_TEST_DEVICE=cuda`` (vLLM required)."""
    env = {**os.environ, "AGILERL_TEST_DEVICE": "cuda", "AGILERL_REQUIRE_VLLM": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "vllm", "-p", "no:cacheprovider", str(VLLM_TESTS[name])]
    t0 = time.perf_counter()
    code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    say(f"{name}: pytest -m vllm {VLLM_TESTS[name].relative_to(ROOT)} on cuda: exit {code} "
        f"({time.perf_counter() - t0:.1f}s)")  # fmt: skip
    return None if code == 0 else f"the {name} tests failed on cuda (exit {code}; pytest's 5 means none ran)"


def check_vllm(work: Path, model_dir: Path) -> str | None:
    return run_vllm_tests("vllm")


def check_server(work: Path, model_dir: Path) -> str | None:
    return run_vllm_tests("server")


def check_qlora(work: Path, model_dir: Path) -> str | None:
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        return "bitsandbytes is not installed (gpu_check.sh installs the qlora extra)"
    from agilerl_plugin_llm.model import load_model

    model = load_model(model_dir, lora_config={"lora_r": 8, "lora_alpha": 16}, quantization="nf4", device="cuda")
    kinds = {type(m).__name__ for m in model.modules()}
    say(f"nf4 base modules include Linear4bit: {'Linear4bit' in kinds}")
    manifest = {
        "algorithm": {"name": "SFT", "batch_size": 4, "lr": 5e-3, "gradient_checkpointing": False,
                      "quantization": "nf4"},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128,
                    "lora_config": {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0}},
        "environment": {"env_type": "sft", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "columns": {"prompt": "question"}, "response_column": "answer", "train_test_split": 1.0},
        "training": {"max_steps": 30, "evo_steps": 30, "seed": 0, "progress": False,
                     "run_dir": str(work / "run-qlora"), "device": "cuda"},
    }  # fmt: skip
    code, rows, wall = train(manifest, work, "sft_qlora")
    losses = [r["eval/loss"] for r in rows if "eval/loss" in r]
    say(f"QLoRA SFT (nf4): exit {code}, held-out loss {losses}, {wall:.1f}s for 30 iterations")
    if "Linear4bit" not in kinds or code != 0 or len(losses) < 2 or not losses[-1] < losses[0] - 0.5:
        return (
            f"QLoRA SFT did not learn on a 4-bit base: exit {code}, losses {losses}, Linear4bit {'Linear4bit' in kinds}"
        )
    return None


DISTRIBUTED_TESTS = ROOT / "plugins" / "llm" / "tests" / "test_distributed.py"


def check_nccl(work: Path, model_dir: Path) -> str | None:
    """GRPO, 3 optimizer steps: ``agilerl train --num-processes 2`` on 2 GPUs (nccl) against plain
    ``agilerl train`` on one, same manifest; the elite weights must agree as the CPU suite's do."""
    import importlib.util

    import torch
    import yaml

    if torch.cuda.device_count() < 2:
        raise Skipped(
            f"nccl data parallelism needs 2 GPUs (one per process); this machine has {torch.cuda.device_count()}"
        )
    spec = importlib.util.spec_from_file_location("test_distributed", DISTRIBUTED_TESTS)
    assert spec is not None and spec.loader is not None
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)  # its manifest() and launch(): the code the CPU test runs
    env = {k: v for k, v in tests.ENV.items() if k != "AGILERL_DIST_BACKEND"}  # CUDA: nccl
    runs = {}
    for procs, launcher in ((1, "plain"), (2, "num-processes")):
        run_dir = work / f"nccl-{procs}"
        data = tests.manifest("GRPO", model_dir, work, run_dir)
        data["training"]["device"] = "cuda"
        path = work / f"nccl-{procs}.yaml"
        path.write_text(yaml.safe_dump(data))
        t0 = time.perf_counter()
        done = tests.launch(launcher, procs, path, env)
        say(f"nccl: GRPO in {procs} process(es) on cuda: exit {done.returncode} ({time.perf_counter() - t0:.1f}s)")
        if done.returncode != 0:
            return f"GRPO in {procs} process(es) on cuda failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        runs[procs] = torch.load(run_dir / "elite.pt", weights_only=True)["agents"][0]
    one, two = runs[1], runs[2]
    worst = max(float((t - two["weights"][k]).abs().max()) for k, t in one["weights"].items())
    say(f"nccl: steps {one['steps']} vs {two['steps']}, largest weight difference 1 vs 2 processes {worst:.2e} "
        "(the CPU suite's GRPO tolerance: 1e-3)")  # fmt: skip
    if one["steps"] != two["steps"] or worst > 1e-3:
        return f"2 processes under nccl did not take 1 process's steps: steps {one['steps']} vs {two['steps']}, {worst:.2e}"
    return None


RUNNERS: dict[str, Callable[[Path, Path], str | None]] = {
    "fp32": check_fp32,
    "vllm": check_vllm,
    "server": check_server,
    "qlora": check_qlora,
    "nccl": check_nccl,
}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    work = Path(argv[0])
    names = argv[1:] or list(CHECKS)
    unknown = [n for n in names if n not in RUNNERS]
    if unknown:
        say(f"unknown checks {unknown}; choose from {list(CHECKS)}")
        return 2
    import torch

    if not torch.cuda.is_available():
        say("no CUDA device: nothing to check")
        return 2
    from agilerl_plugin_llm.testing import build_tiny_model

    model_dir = build_tiny_model(work / "model")
    failures = []
    for name in names:
        t0 = time.perf_counter()
        try:
            problem = RUNNERS[name](work, model_dir)
        except Skipped as why:
            say(f"{name}: SKIPPED, not checked: {why}")
            continue
        except Exception as exc:  # a check that crashes is a failed check; the others still run
            problem = f"{name} raised {type(exc).__name__}: {exc}"
        say(f"{name}: {'held' if problem is None else 'FAILED'} ({time.perf_counter() - t0:.1f}s)")
        if problem:
            failures.append(problem)
    if failures:
        say("FAILED:\n  " + "\n  ".join(failures))
        return 1
    say("all checks held")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
