"""Where an LLM optimizer step's time goes, ours and TRL's, at the settings of the side-by-side benchmarks.

    python benchmarks/llm/profile_llm.py                     # SFT, DPO, GRPO; ours and TRL (if installed)
    python benchmarks/llm/profile_llm.py --algorithms grpo --steps 30

Each (algorithm, implementation) trains in its own process with one torch thread, exactly as
``bench_sft_dpo.py`` / ``bench_grpo.py`` set it up (same tiny model, rows, batch, LoRA or full
fine-tuning, optimizer, generation length), and the process CPU time of each part of a step is
taken by wrapping the methods that do it (a part's time excludes the wrapped parts inside it, so the
parts add up to the step). ``rest`` is what no wrapped method covers: for ours the algorithm's own
bookkeeping, for TRL the ``Trainer`` loop (callbacks, mode switches, FLOP counting, the learning-rate
scheduler). CPU time, so other jobs on a shared machine inflate every part alike; the shares are the
figure to read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import benchlib  # noqa: E402

#: Parts in the order the README's table shows them.
PARTS = ("data: sampling + collation", "generation", "harness: chat template, tokenise, decode", "reward",
         "batching + advantages", "reference log-probs (no grad)", "forward: log-probs + loss", "backward",
         "grad clip", "optimizer (AdamW, zero_grad)", "rest")  # fmt: skip


class Timers:
    """Exclusive CPU seconds per label: a wrapped call's time minus the wrapped calls inside it."""

    def __init__(self) -> None:
        self.cpu: Counter[str] = Counter()
        self.on = False
        self._stack: list[float] = []  # time spent in wrapped children of each open call

    def wrap(self, owner: Any, name: str, label: str | Callable[..., str]) -> None:
        fn: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return fn(*args, **kwargs)
            tag = label(*args, **kwargs) if callable(label) else label
            self._stack.append(0.0)
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.process_time() - start
                inner = self._stack.pop()
                self.cpu[tag] += spent - inner
                if self._stack:
                    self._stack[-1] += spent

        setattr(owner, name, timed)


def _by_grad(*args: Any, **kwargs: Any) -> str:
    """A log-prob pass's part: the loss's (with gradients) or the reference's (without)."""
    import torch

    return "forward: log-probs + loss" if torch.is_grad_enabled() else "reference log-probs (no grad)"


def _common_torch(timers: Timers, optimizer_owner: Any) -> None:
    import torch

    timers.wrap(torch.Tensor, "backward", "backward")
    timers.wrap(torch.nn.utils, "clip_grad_norm_", "grad clip")
    timers.wrap(optimizer_owner, "step", "optimizer (AdamW, zero_grad)")
    timers.wrap(optimizer_owner, "zero_grad", "optimizer (AdamW, zero_grad)")


def _our_step_parts(timers: Timers) -> None:
    """Our optimizer step calls torch's kernels through ``fast_step`` (see its docstring)."""
    from agilerl_plugin_llm import fast_step

    timers.wrap(fast_step, "clip_grad_norm", "grad clip")
    timers.wrap(fast_step, "adamw_step", "optimizer (AdamW, zero_grad)")
    timers.wrap(fast_step, "drop_grads", "optimizer (AdamW, zero_grad)")


def profile_ours(algorithm: str, model_dir: str, steps: int, warmup: int) -> tuple[float, dict[str, float]]:
    import torch

    timers = Timers()
    if algorithm == "grpo":
        import bench_grpo

        from agilerl_plugin_llm.model import load_tokenizer
        from agilerl_plugin_llm.rollout import base as rollout_base
        from agilerl_plugin_llm.rollout import harness, sources
        from agilerl_plugin_llm.rollout.env import make_rollout_envs
        from agilerl_plugin_llm.rollout.grpo import GRPO
        from agilerl_plugin_llm.rollout.specs import GRPOSpec
        from agilerl_plugin_llm.specs import LLMEnvSpec

        args = bench_grpo.defaults()
        tok = load_tokenizer(model_dir)
        env_spec = LLMEnvSpec(env_type="rollout", dataset_path=str(bench_grpo.DATA),
                              rubric_file_path=str(bench_grpo.RUBRIC))  # fmt: skip
        spec = GRPOSpec(**bench_grpo.ours_fields(args, model_dir, "hf"))
        envs = make_rollout_envs(env_spec, tok, max_model_len=256, max_output_tokens=args.tokens, seed=args.seed)
        agent: Any = GRPO(spec, tokenizer=tok)
        timers.wrap(agent.backend(), "generate", "generation")
        for method in ("begin", "reply", "finish_step"):
            timers.wrap(harness.RolloutHarness, method, "harness: chat template, tokenise, decode")
        timers.wrap(sources.RubricEnv, "step", "reward")
        timers.wrap(rollout_base, "pad_trajectories", "batching + advantages")
        timers.wrap(GRPO, "advantages", "batching + advantages")
        timers.wrap(rollout_base.RolloutLLMAlgorithm, "_chunked_logprobs", "reference log-probs (no grad)")
        timers.wrap(GRPO, "loss", "forward: log-probs + loss")
        _common_torch(timers, agent.optimizer)
        _our_step_parts(timers)

        def step() -> None:
            agent.learn_iteration(envs)
            agent.steps += 1
    else:
        import bench_sft_dpo

        from agilerl_plugin_llm.dataset.dpo import DPO

        agent, env = bench_sft_dpo.build_ours(algorithm, model_dir)
        timers.wrap(env, "next_batch", "data: sampling + collation")
        if algorithm == "dpo":  # the reference's pass is the one without gradients
            timers.wrap(DPO, "_answer_logps", _by_grad)
        timers.wrap(type(agent), "_loss", "forward: log-probs + loss")
        _common_torch(timers, agent.optimizer)
        _our_step_parts(timers)

        def step() -> None:
            agent.learn(env.next_batch())

    torch.set_num_threads(1)
    for _ in range(warmup):
        step()
    timers.on = True
    start = time.process_time()
    for _ in range(steps):
        step()
    total = time.process_time() - start
    return total / steps, {k: v / steps for k, v in timers.cpu.items()}


def profile_trl(algorithm: str, model_dir: str, steps: int, warmup: int) -> tuple[float, dict[str, float]]:
    import accelerate.optimizer
    import torch
    import transformers

    timers = Timers()
    marks: list[float] = []

    class Clock(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            marks.append(time.process_time())
            timers.on = len(marks) > warmup  # the parts of steps warmup+1 .. warmup+steps

    _common_torch(timers, accelerate.optimizer.AcceleratedOptimizer)
    timers.wrap(torch.nn.Module, "zero_grad", "optimizer (AdamW, zero_grad)")
    timers.wrap(transformers.Trainer, "get_batch_samples", "data: sampling + collation")
    # transformers 5 clips through accelerate's clip_grad_norm_, which the torch wrapper does not see.
    if hasattr(transformers.Trainer, "_clip_grad_norm"):
        timers.wrap(transformers.Trainer, "_clip_grad_norm", "grad clip")
    if algorithm == "grpo":
        import bench_grpo
        from trl import GRPOTrainer

        timers.wrap(GRPOTrainer, "_generate", "generation")
        timers.wrap(GRPOTrainer, "_calculate_rewards", "reward")
        timers.wrap(GRPOTrainer, "_generate_and_score_completions", "batching + advantages")
        timers.wrap(GRPOTrainer, "_get_per_token_logps_and_entropies", _by_grad)
        timers.wrap(GRPOTrainer, "compute_loss", "forward: log-probs + loss")
        args = bench_grpo.defaults()
        args.warmup, args.steps = warmup, steps + 1
        trainer = bench_grpo.build_trl(args, model_dir, callbacks=[Clock()])
    else:
        import bench_sft_dpo
        from trl import DPOTrainer, SFTTrainer

        owner: Any = SFTTrainer if algorithm == "sft" else DPOTrainer
        timers.wrap(owner, "compute_loss", "forward: log-probs + loss")
        if algorithm == "dpo":  # the reference's forward is the one without gradients (inside compute_loss)
            from peft import PeftModelForCausalLM

            timers.wrap(PeftModelForCausalLM, "forward", _by_grad)
        trainer = bench_sft_dpo.build_trl(algorithm, model_dir, steps=warmup + steps + 1, callbacks=[Clock()])
    torch.set_num_threads(1)
    trainer.train()
    total = marks[warmup + steps] - marks[warmup]
    return total / steps, {k: v / steps for k, v in timers.cpu.items()}


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)  # as the benchmarks' workers (GRPO's seed is 0 too)
    run = profile_ours if args.impl == "ours" else profile_trl
    total, parts = run(args.algorithm, args.model, args.steps, args.warmup)
    print("RESULT " + json.dumps({"cpu_s_per_step": total, "parts": parts}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", default="sft,dpo,grpo")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--algorithm", help=argparse.SUPPRESS)
    parser.add_argument("--impl", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    from agilerl_plugin_llm.testing import build_tiny_model

    record = benchlib.Record("llm/profile_llm")
    impls = ["ours", "trl"] if benchlib.has_module("trl", "TRL") else ["ours"]
    # The tiny model both benchmarks build (seed 0).
    model = str(build_tiny_model(Path(tempfile.mkdtemp(prefix="profile-llm-")) / "model", seed=0))
    raw: dict[str, dict[str, Any]] = {}
    for algorithm in args.algorithms.split(","):
        for impl in impls:
            cmd = [sys.executable, __file__, "--worker", "--algorithm", algorithm, "--impl", impl, "--model", model,
                   "--steps", str(args.steps), "--warmup", str(args.warmup)]  # fmt: skip
            env = {**os.environ, "AGILERL_STRICT_PLUGINS": "1"}
            out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(f"{algorithm}/{impl} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
            result = json.loads(line[len("RESULT ") :])
            parts = result["parts"]
            parts["rest"] = max(result["cpu_s_per_step"] - sum(parts.values()), 0.0)
            raw.setdefault(algorithm, {})[impl] = {"cpu_s_per_step": result["cpu_s_per_step"], "parts": parts}
            shown = ", ".join(f"{k} {v * 1e3:.2f}" for k in PARTS if (v := parts.get(k)))
            print(f"{algorithm} {impl}: {result['cpu_s_per_step'] * 1e3:.1f} CPU ms/step ({shown})", flush=True)
    record.save({"steps": args.steps, "warmup": args.warmup, "parts_order": list(PARTS), "profiles": raw})


if __name__ == "__main__":
    main()
