"""Learning, side by side: agilerl-plugin-llm GRPO and RLOO vs TRL's ``GRPOTrainer`` and ``RLOOTrainer``,
from the same SFT warm start.

The task is ``agilerl_plugin_llm.tasks``' reverse-three-digits (``reverse 413`` -> ``314``: the answer
depends on the prompt), 512 rows, 3/4 to train on and 128 held out (the split ``training.seed: 0``
makes in both of our runs). One warm start serves every run: the tiny model
(``build_tiny_model``) after ``--sft-steps`` steps of our SFT, exported. From it each side trains for
``--steps`` optimizer steps per seed with the same settings: ``--prompts`` prompts x ``--group``
completions per step, ``--tokens`` new tokens at temperature 1 from the full distribution (``top_k`` 0,
``top_p`` 1: TRL's defaults, and ours since issue 37), the token-level (``dapo``) loss,
clip 0.2, no KL (``beta`` 0), AdamW at ``--lr``, gradients clipped at ``--max-grad-norm`` (default
0.1, our GRPO's default; TRL's own default is 1.0), full fine-tuning, the rubric of
``examples/llm/reverse/reverse_rubric.py``, one torch thread, each run in its own process. TRL's side
ends completions at ``<|im_end|>`` (set as its tokenizer's ``eos_token``), as ours does (its rollout
stops on the chat template's end-of-turn marker), so neither side is scored on text past the turn.

Both sides are scored by the same scorer: greedy exact match on the 128 held-out prompts
(``agilerl_plugin_llm.tasks.exact_match``), before (the warm start) and after. Reported per seed: the
score after, the gain, the wall seconds of training, and the gain per wall second; the summary rows
are the medians over seeds, ours / TRL. Targets (issue 37): our gain >= TRL's on the median seed, gain
per wall second >= 1.5x TRL's, no seed of ours below its warm start.

RLOO (``--algos rloo``) runs the same protocol with each side's RLOO: the advantage is the reward minus
the mean of the other ``--group - 1`` completions of the prompt, not normalised (TRL's
``normalize_advantages`` default and ours), no KL (``beta`` 0 on both sides: TRL's RLOO puts it in the
reward, ours in the loss, so with it the two would differ). TRL's RLOO loss is the clipped
sequence-level ratio (the sum of the token log-ratios) times the advantage, averaged over
completions; with one optimizer step per generation batch its gradient is each completion's token
log-probability sum times its advantage, over the completions, which is ours with
``loss_type: dr_grpo`` (each completion's token sum over ``--tokens``, over the completions) times the
constant ``1 / --tokens``. Our side clips at ``--max-grad-norm / --tokens`` so that both sides clip the
same steps by the same factor; Adam's normalisation then removes the constant.

    python benchmarks/llm/bench_learning.py                 # GRPO and RLOO, 3 seeds per side (minutes on a CPU)
    python benchmarks/llm/bench_learning.py --algos rloo --seeds 0 1 2 3 4 5 6 7
    python benchmarks/llm/bench_learning.py --seeds 0       # one seed per side
"""

from __future__ import annotations

import argparse
import json
import os
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
RUBRIC = ROOT / "examples" / "llm" / "reverse" / "reverse_rubric.py"
SPLIT = 0.75
SPLIT_SEED = 0
#: Each algorithm: (its name in the rows, TRL's trainer, the row key suffix: GRPO keeps the first rows' keys).
ALGOS: dict[str, tuple[str, str, str]] = {
    "grpo": ("GRPO", "TRL GRPOTrainer", ""),
    "rloo": ("RLOO", "TRL RLOOTrainer", "_rloo"),
}


def rubric():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("reverse_rubric", RUBRIC)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.reward_fn


def split(data: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from agilerl_plugin_llm.rollout.sources import split_rows
    from agilerl_plugin_llm.tasks import read_rows

    return split_rows(read_rows(data), SPLIT, SPLIT_SEED)


def warm_start(args: argparse.Namespace, work: Path) -> tuple[str, str]:
    """The tiny model after ``args.sft_steps`` of our SFT, exported; returns (model dir, data file)."""
    import yaml

    from agilerl_plugin_llm.tasks import reverse_rows, write_rows
    from agilerl_plugin_llm.testing import build_tiny_model

    build_tiny_model(work / "tiny-model")
    data = write_rows(reverse_rows(args.rows, seed=0), work / "reverse.jsonl")
    manifest = {
        "algorithm": {"name": "SFT", "batch_size": 16, "lr": 3e-3, "max_grad_norm": 1.0, "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": str(work / "tiny-model"), "max_context_length": 64},
        "environment": {"env_type": "dataset", "dataset_path": str(data), "train_test_split": SPLIT},
        "training": {"max_steps": args.sft_steps, "evo_steps": args.sft_steps, "seed": SPLIT_SEED,
                     "progress": False, "run_dir": str(work / "sft")},
    }  # fmt: skip
    (work / "sft.yaml").write_text(yaml.safe_dump(manifest))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for cmd in (["train", str(work / "sft.yaml")], ["export", str(work / "sft"), str(work / "sft-model")]):
        out = subprocess.run([sys.executable, "-m", "agilerl.cli", *cmd], env=env, capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f"agilerl {cmd[0]} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return str(work / "sft-model"), str(data)


def run_ours(args: argparse.Namespace) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    from agilerl_plugin_llm.model import load_tokenizer
    from agilerl_plugin_llm.rollout.env import make_rollout_envs
    from agilerl_plugin_llm.rollout.grpo import GRPO
    from agilerl_plugin_llm.rollout.rloo import RLOO
    from agilerl_plugin_llm.rollout.specs import GRPOSpec, RLOOSpec
    from agilerl_plugin_llm.specs import LLMEnvSpec
    from agilerl_plugin_llm.tasks import exact_match

    tok = load_tokenizer(args.warm)
    env_spec = LLMEnvSpec(env_type="rollout", dataset_path=args.data, rubric_file_path=str(RUBRIC),
                          train_test_split=SPLIT, max_reward=1.0)  # fmt: skip
    spec_class, algo_class, loss_type = (RLOOSpec, RLOO, "dr_grpo") if args.algo == "rloo" else (GRPOSpec, GRPO, "dapo")
    # RLOO: our dr_grpo gradient is TRL's RLOO gradient over --tokens, so its clipping threshold is too.
    clip = args.max_grad_norm / args.tokens if args.algo == "rloo" else args.max_grad_norm
    spec = spec_class(pretrained_model_name_or_path=args.warm, batch_size=args.prompts, group_size=args.group,
                      lr=args.lr, beta=0.0, clip_coef=0.2, loss_type=loss_type, max_output_tokens=args.tokens,
                      max_model_len=64, temperature=1.0, top_k=0, top_p=1.0, max_grad_norm=clip,
                      gradient_checkpointing=False, seed=args.seed)  # fmt: skip
    envs = make_rollout_envs(env_spec, tok, max_model_len=64, max_output_tokens=args.tokens, seed=SPLIT_SEED)
    agent = algo_class(spec, tokenizer=tok)
    _, heldout = split(args.data)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        agent.learn_iteration(envs)
        agent.steps += 1  # as the training loop does: each iteration draws the next prompts
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    score = exact_match(agent.model, tok, heldout)
    return {"after": score.mean, "after_stderr": score.stderr, "wall_s": wall, "cpu_s": cpu}


def trl_model(warm: str) -> tuple[Any, Any]:
    """The warm start as TRL's side loads it: (tokenizer, float32 model), completions ending at the
    end of the assistant turn (``<|im_end|>`` as the tokenizer's eos), as ours end."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(warm)
    tok.eos_token = "<|im_end|>"
    model = AutoModelForCausalLM.from_pretrained(warm, dtype=torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    return tok, model


def trl_settings(args: argparse.Namespace, *, prefix: str) -> dict[str, Any]:
    """The TRL config fields GRPOConfig and RLOOConfig share, set as the module docstring says."""
    return dict(
        output_dir=tempfile.mkdtemp(prefix=prefix), per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group, max_completion_length=args.tokens, learning_rate=args.lr, beta=0.0,
        epsilon=0.2, temperature=1.0, top_k=0, top_p=1.0, max_grad_norm=args.max_grad_norm,
        lr_scheduler_type="constant", warmup_steps=0, max_steps=args.steps, logging_steps=10**6, save_strategy="no",
        report_to=[], use_cpu=True, bf16=False, gradient_checkpointing=False, disable_tqdm=True, seed=args.seed,
        dataloader_num_workers=0,
    )  # fmt: skip


def run_trl(args: argparse.Namespace) -> dict[str, float]:
    import datasets
    import torch
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    from agilerl_plugin_llm.tasks import exact_match

    torch.set_num_threads(1)
    train, heldout = split(args.data)
    ds = datasets.Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in train]
    )
    fn = rubric()

    def reward(completions, answer, **_):  # type: ignore[no-untyped-def]
        return [
            fn(c[0]["content"] if isinstance(c, list) else c, a, None)
            for c, a in zip(completions, answer, strict=False)
        ]

    tok, model = trl_model(args.warm)
    common = trl_settings(args, prefix="trl-learning-")
    if args.algo == "rloo":
        rloo_config = RLOOConfig(**common, normalize_advantages=False)
        trainer = RLOOTrainer(
            model=model, reward_funcs=reward, args=rloo_config, train_dataset=ds, processing_class=tok
        )
    else:
        config = GRPOConfig(**common, loss_type="dapo", scale_rewards="group")
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=ds, processing_class=tok)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.train()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    score = exact_match(trainer.model, tok, heldout)
    return {"after": score.mean, "after_stderr": score.stderr, "wall_s": wall, "cpu_s": cpu}


def spawn(which: str, args: argparse.Namespace, seed: int, warm: str, data: str) -> dict[str, float]:
    return run_worker(__file__, ["--worker", which], args, seed, warm, data)


def run_worker(
    script: str, select: list[str], args: argparse.Namespace, seed: int, warm: str, data: str
) -> dict[str, float]:
    """Run one training of ``script`` (its side or variant named by ``select``) from the warm start
    in a process of its own, one torch thread, with this parser's settings; its ``RESULT`` line."""
    cmd = [sys.executable, script, *select, "--warm", warm, "--data", data, "--seed", str(seed),
           "--steps", str(args.steps), "--tokens", str(args.tokens), "--prompts", str(args.prompts),
           "--group", str(args.group), "--lr", str(args.lr), "--max-grad-norm", str(args.max_grad_norm),
           "--algo", args.algo]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "AGILERL_STRICT_PLUGINS": "1"}  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]
    raise RuntimeError(f"{' '.join(select)} worker failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="RL seeds per side (one warm start)")
    p.add_argument("--rows", type=int, default=512, help="task rows (3/4 train, 1/4 held out)")
    p.add_argument("--sft-steps", type=int, default=90, help="SFT steps of the shared warm start")
    p.add_argument("--steps", type=int, default=120, help="GRPO optimizer steps per run")
    p.add_argument("--tokens", type=int, default=6, help="max new tokens per completion")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-grad-norm", type=float, default=0.1,
                   help="gradient clipping on both sides (0.1: our GRPO default; TRL's default is 1.0)")  # fmt: skip
    p.add_argument("--algos", nargs="+", choices=list(ALGOS), default=list(ALGOS), help="algorithms to compare")
    p.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--algo", choices=list(ALGOS), default="grpo", help=argparse.SUPPRESS)
    p.add_argument("--warm", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = parser().parse_args()
    if args.worker:
        result = run_ours(args) if args.worker == "ours" else run_trl(args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    from agilerl_plugin_llm.tasks import exact_match

    record = benchlib.Record("llm/bench_learning")
    warm, data = warm_start(args, Path(tempfile.mkdtemp(prefix="bench-learning-")))
    before = exact_match(warm, None, split(data)[1])
    print(f"warm start ({args.sft_steps} SFT steps): held-out exact match {before}", flush=True)
    sides = ["ours", "trl"] if benchlib.has_module("trl", "TRL") else ["ours"]
    given = {k: v for k, v in vars(args).items() if k != "algo"}
    warm_score = {"exact_match": before.mean, "stderr": before.stderr, "n": before.n}
    raw: dict[str, Any] = {"args": given, "warm_start": warm_score}
    for algo in args.algos:
        args.algo = algo
        raw[algo] = compare(args, record, sides, before, warm, data)
    record.save(raw)


def compare(
    args: argparse.Namespace, record: benchlib.Record, sides: list[str], before: Any, warm: str, data: str
) -> dict[str, Any]:
    """``args.algo`` on each side over ``args.seeds`` (sides alternating per seed), its rows added to ``record``."""
    name, against, suffix = ALGOS[args.algo]
    runs: dict[str, list[dict[str, float]]] = {which: [] for which in sides}
    for i, seed in enumerate(args.seeds):
        for which in sides if i % 2 == 0 else sides[::-1]:  # alternate against load drift
            res = spawn(which, args, seed, warm, data)
            res.update(seed=seed, gain=res["after"] - before.mean)
            res["gain_per_s"] = res["gain"] / res["wall_s"]
            runs[which].append(res)
            print(f"{name} seed {seed} {which:4s}: exact match {before.mean:.3f} -> {res['after']:.3f} "
                  f"(+/- {res['after_stderr']:.3f}), gain {res['gain']:+.3f} in {res['wall_s']:.1f} s "
                  f"({res['gain_per_s']:+.4f} / s)", flush=True)  # fmt: skip
    summary: dict[str, Any] = {
        k: {m: statistics.median(r[m] for r in v) for m in ("after", "gain", "wall_s", "gain_per_s")}
        for k, v in runs.items()
    }
    summary["warm_start"] = {"exact_match": before.mean, "stderr": before.stderr, "n": before.n}
    if "trl" in runs:
        s, t = summary["ours"], summary["trl"]
        below = [r["seed"] for r in runs["ours"] if r["after"] < before.mean]
        gain_ratio = s["gain"] / t["gain"] if t["gain"] > 0 else None
        per_s_ratio = s["gain_per_s"] / t["gain_per_s"] if t["gain_per_s"] > 0 else None
        detail = (f"{len(args.seeds)} seeds, {args.steps} steps from {before.mean:.3f} (n={before.n}); median gain "
                  f"{s['gain']:+.3f} vs {t['gain']:+.3f}, per wall s {s['gain_per_s']:+.4f} vs {t['gain_per_s']:+.4f}; "
                  f"ours below the warm start on seeds {below or 'none'}")  # fmt: skip
        record.row(f"llm_learning_gain{suffix}",
                   what=f"{name} held-out exact-match gain from an SFT warm start (median seed)",
                   against=against, wall=gain_ratio, cpu=None, target="gain >= 1.0x, no seed below start",
                   met=None if gain_ratio is None else gain_ratio >= 1.0 and not below, repeats=len(args.seeds),
                   detail=detail)  # fmt: skip
        record.row(f"llm_learning_gain_per_s{suffix}",
                   what=f"{name} held-out exact-match gain per wall second (median seed)",
                   against=against, wall=per_s_ratio, cpu=None, target="per wall s >= 1.5x",
                   met=None if per_s_ratio is None else per_s_ratio >= 1.5, repeats=len(args.seeds),
                   detail=detail)  # fmt: skip
    return {"runs": runs, "summary": summary}


if __name__ == "__main__":
    main()
