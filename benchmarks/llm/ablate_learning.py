"""Why our GRPO gained less than TRL's in ``bench_learning.py``: one difference at a time (issue 37).

Every variant trains from ``bench_learning.py``'s warm start with its settings (120 steps of 8 prompts
x 8, 6 new tokens, ``dapo`` loss, clip 0.2, no KL, lr 1e-3, gradients clipped at 0.1) and is scored by
its scorer (greedy exact match on the 128 held-out prompts); each (variant, seed) is its own process.
The variants switch one of the differences left once the loss was shown equal (our per-token
gradient matches TRL's ``dapo`` formula on the same batch to 5e-7, relative) to the other side's:

* ``ours``: our GRPO at its defaults (``top_k: 0`` since issue 37);
* ``ours_topk50``: ``top_k: 50``, our default before (rollouts drew from the 50 likeliest tokens);
* ``ours_topk50_wd0``: that, with AdamW's weight decay 0 (TRL's; torch's default, ours, is 0.01);
* ``ours_topk50_epochs``: that, with the prompts drawn as TRL's sampler draws them (shuffled passes
  over the train rows without replacement; ours draws rows by a per-iteration seed);
* ``ours_topk50_hf_generate``: that, generating with ``model.generate`` instead of our KV-cached sampler;
* ``ours_wd0_epochs``: our defaults with both of the above TRL semantics (every difference switched);
* ``trl``: TRL 1.16's ``GRPOTrainer`` as ``bench_learning.py`` runs it (``top_k=0``);
* ``trl_topk50``: TRL with ``top_k=50``, the reverse switch.

    python benchmarks/llm/ablate_learning.py --variants ours ours_topk50 trl trl_topk50 --seeds 0 1 2 3 4 5 6 7
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_learning
import benchlib

VARIANTS = ("ours", "ours_topk50", "ours_topk50_wd0", "ours_topk50_epochs", "ours_topk50_hf_generate",
            "ours_wd0_epochs", "trl", "trl_topk50")  # fmt: skip


def run_ours(args: argparse.Namespace) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    from agilerl_plugin_llm.model import load_tokenizer
    from agilerl_plugin_llm.rollout.env import make_rollout_envs
    from agilerl_plugin_llm.rollout.grpo import GRPO
    from agilerl_plugin_llm.rollout.specs import GRPOSpec
    from agilerl_plugin_llm.specs import LLMEnvSpec
    from agilerl_plugin_llm.tasks import exact_match

    parts = set(args.variant.split("_"))
    tok = load_tokenizer(args.warm)
    env_spec = LLMEnvSpec(env_type="rollout", dataset_path=args.data, rubric_file_path=str(bench_learning.RUBRIC),
                          train_test_split=bench_learning.SPLIT, max_reward=1.0)  # fmt: skip
    spec = GRPOSpec(pretrained_model_name_or_path=args.warm, batch_size=args.prompts, group_size=args.group,
                    lr=args.lr, beta=0.0, clip_coef=0.2, loss_type="dapo", max_output_tokens=args.tokens,
                    max_model_len=64, temperature=1.0, top_k=50 if "topk50" in parts else 0,
                    max_grad_norm=args.max_grad_norm, gradient_checkpointing=False, seed=args.seed)  # fmt: skip
    envs = make_rollout_envs(env_spec, tok, max_model_len=64, max_output_tokens=args.tokens,
                             seed=bench_learning.SPLIT_SEED)  # fmt: skip
    agent = GRPO(spec, tokenizer=tok)
    train, heldout = bench_learning.split(args.data)
    if "wd0" in parts:
        for group in agent.optimizer.param_groups:
            group["weight_decay"] = 0.0
    if "generate" in parts:
        agent.backend().engine = "generate"  # type: ignore[attr-defined]
    if "epochs" in parts:
        # TRL's RepeatSampler: shuffled passes over the train rows; the dataset env reads row seed % rows.
        rng, stream = random.Random(args.seed), []

        def seeds(count: int) -> list[int]:
            while len(stream) < count:
                order = list(range(len(train)))
                rng.shuffle(order)
                stream.extend(order)
            out = stream[:count]
            del stream[:count]
            return out

        agent._iteration_seeds = seeds  # type: ignore[method-assign]
    t0 = time.perf_counter()
    for _ in range(args.steps):
        agent.learn_iteration(envs)
        agent.steps += 1
    wall = time.perf_counter() - t0
    score = exact_match(agent.model, tok, heldout)
    return {"after": score.mean, "after_stderr": score.stderr, "wall_s": wall}


def run_trl(args: argparse.Namespace) -> dict[str, float]:
    import trl

    if args.variant == "trl_topk50":
        config = trl.GRPOConfig

        def with_top_k_50(**kwargs: Any) -> Any:
            return config(**{**kwargs, "top_k": 50})

        trl.GRPOConfig = with_top_k_50  # bench_learning.run_trl reads it from the module
    return bench_learning.run_trl(args)


def spawn(args: argparse.Namespace, variant: str, seed: int, warm: str, data: str) -> dict[str, float]:
    return bench_learning.run_worker(__file__, ["--variant", variant], args, seed, warm, data)


def main() -> None:
    p = bench_learning.parser()
    p.description = __doc__.split("\n\n")[0]
    p.set_defaults(seeds=[0, 1, 2, 3, 4, 5, 6, 7])
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=["ours", "ours_topk50", "trl", "trl_topk50"])
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.set_defaults(worker=None)
    args = p.parse_args()
    if args.variant:
        result = run_trl(args) if args.variant.startswith("trl") else run_ours(args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    from agilerl_plugin_llm.tasks import exact_match

    record = benchlib.Record("llm/ablate_learning")
    warm, data = bench_learning.warm_start(args, Path(tempfile.mkdtemp(prefix="ablate-learning-")))
    before = exact_match(warm, None, bench_learning.split(data)[1])
    print(f"warm start ({args.sft_steps} SFT steps): held-out exact match {before}", flush=True)
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in args.variants}
    for seed in args.seeds:
        for variant in args.variants:
            res = spawn(args, variant, seed, warm, data)
            res.update(seed=seed, gain=res["after"] - before.mean)
            runs[variant].append(res)
            print(f"seed {seed} {variant:24s}: {before.mean:.3f} -> {res['after']:.3f}", flush=True)
    summary = {}
    for variant, rs in runs.items():
        after = [r["after"] for r in rs]
        sd = statistics.stdev(after) if len(after) > 1 else 0.0
        summary[variant] = {"mean": statistics.mean(after), "median": statistics.median(after), "sd": sd,
                            "se": sd / len(after) ** 0.5, "min": min(after), "n": len(after)}  # fmt: skip
        s = summary[variant]
        print(f"{variant:24s} n={s['n']:2d} held-out exact match mean {s['mean']:.3f} (se {s['se']:.3f}), "
              f"median {s['median']:.3f}, min {s['min']:.3f}", flush=True)  # fmt: skip
    raw = {"args": {k: v for k, v in vars(args).items() if k not in ("worker", "warm", "data", "variant")},
           "warm_start": {"exact_match": before.mean, "stderr": before.stderr, "n": before.n},
           "runs": runs, "by_variant": summary}  # fmt: skip
    record.save(raw)


if __name__ == "__main__":
    main()
