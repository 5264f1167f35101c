"""SFT and DPO: agilerl-plugin-llm side by side with TRL (``SFTTrainer``, ``DPOTrainer``).

Same tiny model (``agilerl_plugin_llm.testing.build_tiny_model``: 2-layer Llama, ~100k parameters,
BPE vocab 400), same rows (``examples/data/llm/sft_tiny.jsonl``, ``dpo_tiny.jsonl``, formatted with
the same ChatML template), same LoRA (r 16, alpha 32, all linear layers, no dropout), batch 8,
max length 128, AdamW, no gradient checkpointing, CPU, 1 torch thread. DPO: beta 0.1, NLL weight
0.2 (TRL: ``loss_type=["sigmoid", "sft"]``), reference = the adapter-disabled base in both.

Each (algorithm, implementation) runs in its own process, so peak RSS (``ru_maxrss``) is that
implementation's alone. Reported: median and mean seconds per optimizer step after warm-up steps
(ours: drawing the batch + the update; TRL: the interval between ``on_step_end`` callbacks, which
includes its data loading and collation), the median process CPU seconds over the same intervals
(steadier than wall time on a shared machine), and peak RSS. Repeats alternate the two sides; the
ratio is the median over repeats of each repeat's ours / TRL (the two ran back to back).
``benchmarks/llm/profile_llm.py`` splits both sides' steps into their parts.

    python benchmarks/llm/bench_sft_dpo.py               # both algorithms, both implementations
    python benchmarks/llm/bench_sft_dpo.py --steps 60 --algorithms dpo
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib

DATA = Path(__file__).resolve().parents[2] / "examples" / "data" / "llm"
BATCH = 8
MAX_LEN = 128
LR = 3e-3
BETA = 0.1
NLL_ALPHA = 0.2
LORA = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": "all-linear"}


def _read(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------------
# workers
# --------------------------------------------------------------------------------------------------


def build_ours(algorithm: str, model_dir: str) -> tuple[Any, Any]:
    """Our agent and dataset env at this benchmark's settings (``profile_llm.py`` builds them here too)."""
    from agilerl.builders import AlgorithmBuildRuntime
    from agilerl_plugin_llm.builder import LLMBuilder
    from agilerl_plugin_llm.dataset.env import make_llm_env
    from agilerl_plugin_llm.dataset.specs import DPOSpec, SFTSpec
    from agilerl_plugin_llm.model import load_tokenizer
    from agilerl_plugin_llm.specs import LLMEnvSpec

    tokenizer = load_tokenizer(model_dir)
    common = {"pretrained_model_name_or_path": model_dir, "max_model_len": MAX_LEN, "lora_config": LORA,
              "batch_size": BATCH, "lr": LR, "gradient_checkpointing": False, "max_grad_norm": 1.0}  # fmt: skip
    if algorithm == "sft":
        spec: Any = SFTSpec(**common)
        env_spec = LLMEnvSpec(env_type="dataset", objective="sft", dataset_path=str(DATA / "sft_tiny.jsonl"),
                              train_test_split=1.0)  # fmt: skip
    else:
        spec = DPOSpec(**common, beta=BETA, nll_alpha=NLL_ALPHA, use_separate_reference_adapter=False)
        env_spec = LLMEnvSpec(env_type="dataset", objective="preference", dataset_path=str(DATA / "dpo_tiny.jsonl"),
                              train_test_split=1.0)  # fmt: skip
    env = make_llm_env(env_spec, tokenizer, data_batch_size_per_gpu=BATCH, max_context_length=MAX_LEN, seed=0)
    agent = LLMBuilder.build(spec, tokenizer=tokenizer, runtime=AlgorithmBuildRuntime(seed=0))
    return agent, env


def run_ours(algorithm: str, model_dir: str, steps: int, warmup: int) -> tuple[list[float], list[float]]:
    agent, env = build_ours(algorithm, model_dir)
    times: list[float] = []
    cpu: list[float] = []
    for i in range(warmup + steps):
        t0, c0 = time.perf_counter(), time.process_time()
        agent.learn(env.next_batch())
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return times, cpu


def build_trl(algorithm: str, model_dir: str, *, steps: int, callbacks: list[Any]) -> Any:
    """TRL's ``SFTTrainer`` / ``DPOTrainer`` at this benchmark's settings, for ``steps`` optimizer steps."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    peft_config = LoraConfig(r=LORA["lora_r"], lora_alpha=LORA["lora_alpha"], lora_dropout=0.0,
                             target_modules="all-linear", task_type="CAUSAL_LM")  # fmt: skip
    common = {"output_dir": tempfile.mkdtemp(prefix="trl-bench-"), "per_device_train_batch_size": BATCH,
              "max_steps": steps, "learning_rate": LR, "use_cpu": True, "bf16": False,
              "gradient_checkpointing": False, "report_to": [], "save_strategy": "no", "logging_strategy": "no",
              "disable_tqdm": True, "seed": 0, "dataloader_num_workers": 0, "max_grad_norm": 1.0,
              "max_length": MAX_LEN}  # fmt: skip
    user = lambda text: [{"role": "user", "content": text}]  # noqa: E731
    assistant = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
    if algorithm == "sft":
        from trl import SFTConfig, SFTTrainer

        rows = [{"prompt": user(r["prompt"]), "completion": assistant(r["response"])} for r in _read("sft_tiny.jsonl")]
        return SFTTrainer(model=model, args=SFTConfig(**common, completion_only_loss=True),
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          peft_config=peft_config, callbacks=callbacks)  # fmt: skip
    from trl import DPOConfig, DPOTrainer

    rows = [{"prompt": user(r["prompt"]), "chosen": assistant(r["chosen"]), "rejected": assistant(r["rejected"])}
            for r in _read("dpo_tiny.jsonl")]  # fmt: skip
    config = DPOConfig(**common, beta=BETA, loss_type=["sigmoid", "sft"], loss_weights=[1.0, NLL_ALPHA])
    return DPOTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows),
                      processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks)  # fmt: skip


def run_trl(algorithm: str, model_dir: str, steps: int, warmup: int) -> tuple[list[float], list[float]]:
    from transformers import TrainerCallback

    stamps: list[tuple[float, float]] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            stamps.append((time.perf_counter(), time.process_time()))

    build_trl(algorithm, model_dir, steps=warmup + steps + 1, callbacks=[Clock()]).train()
    pairs = list(itertools.pairwise(stamps))[warmup : warmup + steps]
    return [b[0] - a[0] for a, b in pairs], [b[1] - a[1] for a, b in pairs]


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    run = run_ours if args.impl == "ours" else run_trl
    times, cpu = run(args.algorithm, args.model, args.steps, args.warmup)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"algorithm": args.algorithm, "impl": args.impl, "steps": len(times),
                                  "median_s": statistics.median(times), "mean_s": statistics.fmean(times),
                                  "cpu_median_s": statistics.median(cpu),
                                  "peak_rss_mb": peak_mb}))  # fmt: skip


# --------------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", default="sft,dpo")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="runs per (algorithm, impl), alternating; medians")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--algorithm", help=argparse.SUPPRESS)
    parser.add_argument("--impl", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    record = benchlib.Record("llm/bench_sft_dpo")
    impls = ["ours", "trl"] if benchlib.has_module("trl", "TRL") else ["ours"]
    from agilerl_plugin_llm.testing import build_tiny_model

    model_dir = str(build_tiny_model(Path(tempfile.mkdtemp(prefix="tiny-llm-")) / "model"))
    print(f"tiny model: {model_dir}; batch {BATCH}, {args.steps} timed steps after {args.warmup} warm-up, "
          "1 torch thread")  # fmt: skip
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for algorithm in args.algorithms.split(","):
        runs[algorithm] = {impl: [] for impl in impls}
        for rep in range(args.repeats):
            for impl in impls if rep % 2 == 0 else impls[::-1]:  # alternate against load drift
                cmd = [sys.executable, __file__, "--worker", "--algorithm", algorithm, "--impl", impl,
                       "--model", model_dir, "--steps", str(args.steps), "--warmup", str(args.warmup)]  # fmt: skip
                out = subprocess.run(cmd, capture_output=True, text=True, check=False)
                line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
                if line is None:
                    raise SystemExit(f"{algorithm}/{impl} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
                runs[algorithm][impl].append(json.loads(line[len("RESULT ") :]))
                print(f"  {algorithm} {impl}: {runs[algorithm][impl][-1]}", flush=True)
    if len(impls) < 2:
        record.save(runs)
        return
    print("\n| algorithm | agilerl s/step (median) | TRL s/step (median) | ratio (wall) "
          "| CPU s/step agilerl / TRL (ratio) | agilerl peak RSS | TRL peak RSS |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for algorithm, by_impl in runs.items():
        med = {i: {k: statistics.median(r[k] for r in v) for k in ("median_s", "cpu_median_s", "peak_rss_mb")}
               for i, v in by_impl.items()}  # fmt: skip
        ours, theirs = med["ours"], med["trl"]
        # Each repeat's two sides ran back to back: the median of the per-repeat ratios (benchlib.paired).
        wall, walls = benchlib.paired([r["median_s"] for r in by_impl["ours"]], [r["median_s"] for r in by_impl["trl"]])
        cpu, _ = benchlib.paired([r["cpu_median_s"] for r in by_impl["ours"]],
                                 [r["cpu_median_s"] for r in by_impl["trl"]])  # fmt: skip
        print(f"| {algorithm.upper()} | {ours['median_s'] * 1e3:.1f} ms | {theirs['median_s'] * 1e3:.1f} ms "
              f"| {wall:.2f}x | {ours['cpu_median_s'] * 1e3:.1f} / {theirs['cpu_median_s'] * 1e3:.1f} ms ({cpu:.2f}x) "
              f"| {ours['peak_rss_mb']:.0f} MB | {theirs['peak_rss_mb']:.0f} MB |")  # fmt: skip
        record.row(f"llm_{algorithm}_step", what=f"{algorithm.upper()} s per optimizer step, tiny model",
                   against="TRL", wall=wall, cpu=cpu, target="wall <= 0.5x", met=wall <= 0.5, repeats=args.repeats,
                   detail=f"{ours['median_s'] * 1e3:.1f} vs {theirs['median_s'] * 1e3:.1f} ms; "
                          f"{ours['cpu_median_s'] * 1e3:.1f} vs {theirs['cpu_median_s'] * 1e3:.1f} CPU ms; wall ratio "
                          f"per repeat {', '.join(f'{x:.2f}' for x in walls)}")  # fmt: skip
    record.save(runs)


if __name__ == "__main__":
    main()
