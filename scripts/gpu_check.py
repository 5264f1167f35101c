"""The LLM plugin's GPU checks (run by ``scripts/gpu_check.sh`` on a CUDA machine).

Each check prints one ``[gpu_check]`` line with its figures and timings and adds to the failures
when it does not hold:

1. ``fp32``: full fine-tuning keeps float32 master weights on the GPU (a bf16 checkpoint loads as fp32);
2. ``colocate``: GRPO with colocated vLLM (``use_vllm: true``) and full-weight sync trains the tiny
   model: the held-out reward rises;
3. ``logprobs``: the log-probs vLLM reports for its own samples agree with the HF model's;
4. ``server``: ``vllm_config.mode: server`` against a real ``vllm serve`` started here on the tiny
   model: the served greedy replies follow each synced LoRA adapter, and GRPO's reward rises;
5. ``qlora``: SFT on an nf4 base (bitsandbytes) under LoRA: the held-out loss falls.

    python scripts/gpu_check.py WORKDIR [CHECK ...]     # default: all; exit 0 held, 1 failed, 2 no GPU

Importable without CUDA or vLLM (they are imported inside the checks).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "llm"
CHECKS = ("fp32", "colocate", "logprobs", "server", "qlora")


def say(message: str) -> None:
    print(f"[gpu_check] {message}", flush=True)


def grpo_manifest(model_dir: Path, run_dir: Path, *, steps: int, **algo: Any) -> dict[str, Any]:
    """GRPO on say-the-word (examples/llm), 4 prompts x group 4, 16 new tokens, on cuda."""
    network = algo.pop("network", {})
    return {
        "algorithm": {"name": "GRPO", "batch_size": 4, "group_size": 4, "lr": 0.01, "beta": 0.04,
                      "max_output_tokens": 16, "temperature": 1.0, "gradient_checkpointing": False, **algo},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128, **network},
        "environment": {"env_type": "reasoning", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"), "max_reward": 1.0},
        "training": {"max_steps": steps, "evo_steps": max(steps // 3, 1), "seed": 0, "progress": False,
                     "run_dir": str(run_dir), "device": "cuda"},
    }  # fmt: skip


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


def learned(code: int, rows: list[dict[str, Any]], wall: float, steps: int, label: str) -> str | None:
    fitness = [r["fitness"] for r in rows if "fitness" in r]
    rollout = [r["train/rollout_s"] for r in rows if "train/rollout_s" in r]
    say(f"{label}: exit {code}, fitness {fitness}, {wall:.1f}s for {steps} iterations ({wall / steps:.3f} s/iter; "
        f"rollout {sum(rollout) / max(len(rollout), 1):.3f} s/iter)")  # fmt: skip
    if code != 0 or len(fitness) < 2 or not fitness[-1] > fitness[0] + 0.2:
        return f"{label} did not learn: exit {code}, fitness {fitness}"
    return None


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


def check_colocate(work: Path, model_dir: Path) -> str | None:
    steps = 30
    manifest = grpo_manifest(
        model_dir, work / "run-colocate", steps=steps, use_vllm=True,
        vllm_config={"gpu_memory_utilization": 0.2, "sleep_mode": True},
        vllm_engine_args={"enforce_eager": True, "dtype": "float32"},
    )  # fmt: skip
    return learned(*train(manifest, work, "grpo_vllm"), steps, "GRPO + colocated vLLM (full-weight sync)")


def check_logprobs(work: Path, model_dir: Path) -> str | None:
    import torch
    from transformers import AutoModelForCausalLM
    from vllm import LLM, SamplingParams

    from agilerl_plugin_llm.algorithms.base import sequence_logprobs

    llm = LLM(model=str(model_dir), dtype="float32", gpu_memory_utilization=0.2, enforce_eager=True, seed=0)
    prompt = [4, 90, 266, 87, 204]
    params = SamplingParams(max_tokens=12, temperature=1.0, logprobs=0, seed=0)
    sample = llm.generate([{"prompt_token_ids": prompt}], params)[0].outputs[0]
    vllm_lp = torch.tensor([next(iter(d.values())).logprob for d in sample.logprobs])
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    ids = torch.tensor([prompt + list(sample.token_ids)], device="cuda")
    mask = torch.zeros_like(ids)
    mask[:, len(prompt) :] = 1
    with torch.no_grad():
        hf_lp = sequence_logprobs(hf, ids, torch.ones_like(ids), mask)[0, len(prompt) :].cpu()
    gap = float((hf_lp - vllm_lp).abs().max())
    say(f"max |log p_HF - log p_vLLM| over {len(vllm_lp)} sampled tokens: {gap:.2e}")
    del llm
    return None if gap <= 1e-2 else f"vLLM and HF log-probs disagree by {gap:.3g}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(model_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``vllm serve`` on the tiny model with runtime LoRA loading, waited for on ``/health``."""
    env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--port", str(port), "--host", "127.0.0.1", "--dtype", "float32", "--enforce-eager",
           "--gpu-memory-utilization", "0.2", "--max-model-len", "128", "--enable-lora",
           "--max-lora-rank", "16", "--max-loras", "2", "--seed", "0"]  # fmt: skip
    server = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {server.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            time.sleep(2)
    server.terminate()
    raise RuntimeError(f"vllm serve did not come up in 300 s: {log.read_text()[-2000:]}")


def check_server(work: Path, model_dir: Path) -> str | None:
    import torch

    from agilerl_plugin_llm.model import load_model, load_tokenizer
    from agilerl_plugin_llm.rollout.generation import HFGenerateBackend, SamplingConfig
    from agilerl_plugin_llm.rollout.harness import stop_token_ids
    from agilerl_plugin_llm.rollout.vllm_server import VLLMServerBackend

    port = free_port()
    t0 = time.perf_counter()
    server = start_server(model_dir, port, work / "vllm-serve.log")
    say(f"vllm serve up on port {port} in {time.perf_counter() - t0:.1f}s")
    failures = []
    try:
        url = f"http://127.0.0.1:{port}"
        tok = load_tokenizer(model_dir)
        lora = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0}
        model = load_model(model_dir, lora_config=lora, device="cuda")
        client = VLLMServerBackend(url, stop_ids=stop_token_ids(tok), export_dir=str(work / "server-lora"))
        local = HFGenerateBackend(model, tok, stop_ids=stop_token_ids(tok))
        prompts = [
            tok("what is the", add_special_tokens=False)["input_ids"],
            tok("hi", add_special_tokens=False)["input_ids"],
        ]
        greedy = SamplingConfig(temperature=0.0)
        for version in range(2):
            with torch.no_grad():  # a different adapter each time: the server must follow the sync
                for n, p in model.named_parameters():
                    if "lora_B" in n:
                        p.normal_(0, 0.5)
            t1 = time.perf_counter()
            client.sync_weights(model)
            t2 = time.perf_counter()
            served = client.generate(prompts, max_new_tokens=[8, 8], sampling=greedy)
            t3 = time.perf_counter()
            mine = local.generate(prompts, max_new_tokens=[8, 8], sampling=greedy)
            say(f"server adapter v{version + 1}: sync {t2 - t1:.3f}s, generate {t3 - t2:.3f}s, "
                f"served == HF greedy: {served == mine}")  # fmt: skip
            if served != mine:
                failures.append(f"server greedy {served} != HF greedy {mine} after sync {version + 1}")
        client.close()
        steps = 30
        manifest = grpo_manifest(
            model_dir, work / "run-server", steps=steps, use_vllm=True, network={"lora_config": lora}, lr=0.02,
            vllm_config={"mode": "server", "server_base_url": url}, vllm_lora_export_dir=str(work / "grpo-lora"),
        )  # fmt: skip
        problem = learned(*train(manifest, work, "grpo_server"), steps, "GRPO + vLLM server (LoRA sync)")
        if problem:
            failures.append(problem)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return "; ".join(failures) or None


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


RUNNERS: dict[str, Callable[[Path, Path], str | None]] = {
    "fp32": check_fp32,
    "colocate": check_colocate,
    "logprobs": check_logprobs,
    "server": check_server,
    "qlora": check_qlora,
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
