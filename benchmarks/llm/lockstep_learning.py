"""Our GRPO and TRL's ``GRPOTrainer`` in lock step: the same prompts and the same sampling draws per step (issue 37).

``bench_learning.py`` compares the two sides' held-out scores over seeds; a seed's score is a
chaotic function of everything upstream (a weight perturbation at float precision flips one sampled
token within a few dozen steps, and the runs then part), so a gap between means only says something
over many seeds. This script takes the noise out instead: from ``bench_learning.py``'s warm start and
settings, TRL trains first and records, per optimizer step, the prompts its sampler drew and its
completions; its generator is reseeded to ``1000 + step`` before each generation. Our GRPO then trains
on those very prompts, in that order, with its generator reseeded the same way, and weight decay 0
(transformers' default; torch's AdamW default, ours, is 0.01: ``--ours-weight-decay 0.01`` keeps it).
If the two pipelines are the same (prompt tokens, sampling, stop tokens, loss tokens, rewards,
advantages, loss, clipping, AdamW, learning rate, step count), every completion is the same until
float rounding flips a first token. Reported per seed: the first step whose completions differ, the
share of identical completions per 10 steps, and the held-out exact match of both sides.

    python benchmarks/llm/lockstep_learning.py --seeds 0 1 2
    python benchmarks/llm/lockstep_learning.py --seeds 0 --steps 7 --ours-weight-decay 0.01
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_learning
import benchlib

#: The sampling generator's seed before step ``s``'s generation, on both sides.
SEED_BASE = 1000


def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    """``bench_learning.run_trl``'s trainer, reseeded per step, recording each step's prompts and completions."""
    import datasets
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from agilerl_plugin_llm.tasks import exact_match

    torch.set_num_threads(1)
    train, heldout = bench_learning.split(args.data)
    index = {r["prompt"]: i for i, r in enumerate(train)}
    ds = datasets.Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in train]
    )
    fn = bench_learning.rubric()
    steps: list[dict[str, Any]] = []

    def reward(prompts, completions, answer, completion_ids, **_):  # type: ignore[no-untyped-def]
        values = [fn(c[0]["content"], a, None) for c, a in zip(completions, answer, strict=True)]
        rows = [index[p[-1]["content"]] for p in prompts[:: args.group]]
        steps.append({"rows": rows, "completions": [list(c) for c in completion_ids], "rewards": values})
        return values

    tok, model = bench_learning.trl_model(args.warm)
    config = GRPOConfig(**bench_learning.trl_settings(args, prefix="trl-lockstep-"), loss_type="dapo",
                        scale_rewards="group")  # fmt: skip

    class Reseeded(GRPOTrainer):  # type: ignore[misc]
        def _generate_single_turn(self, *a: Any, **k: Any) -> Any:
            torch.random.default_generator.manual_seed(SEED_BASE + self.state.global_step)
            return super()._generate_single_turn(*a, **k)

    trainer = Reseeded(model=model, reward_funcs=reward, args=config, train_dataset=ds, processing_class=tok)
    trainer.train()
    Path(args.record).write_text(json.dumps(steps))
    torch.save({k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, args.record + ".trl.pt")
    return {"after": exact_match(trainer.model, tok, heldout).mean, "optimizer_steps": trainer.state.global_step}


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    """``bench_learning.run_ours``'s agent on TRL's recorded prompts, reseeded per step; compared step by step."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    from agilerl_plugin_llm.model import load_tokenizer
    from agilerl_plugin_llm.rollout.env import make_rollout_envs
    from agilerl_plugin_llm.rollout.grpo import GRPO
    from agilerl_plugin_llm.rollout.specs import GRPOSpec
    from agilerl_plugin_llm.specs import LLMEnvSpec
    from agilerl_plugin_llm.tasks import exact_match

    theirs = json.loads(Path(args.record).read_text())
    tok = load_tokenizer(args.warm)
    env_spec = LLMEnvSpec(env_type="rollout", dataset_path=args.data, rubric_file_path=str(bench_learning.RUBRIC),
                          train_test_split=bench_learning.SPLIT, max_reward=1.0)  # fmt: skip
    spec = GRPOSpec(pretrained_model_name_or_path=args.warm, batch_size=args.prompts, group_size=args.group,
                    lr=args.lr, beta=0.0, clip_coef=0.2, loss_type="dapo", max_output_tokens=args.tokens,
                    max_model_len=64, temperature=1.0, top_k=0, top_p=1.0, max_grad_norm=args.max_grad_norm,
                    gradient_checkpointing=False, seed=args.seed)  # fmt: skip
    envs = make_rollout_envs(env_spec, tok, max_model_len=64, max_output_tokens=args.tokens,
                             seed=bench_learning.SPLIT_SEED)  # fmt: skip
    agent = GRPO(spec, tokenizer=tok)
    for group in agent.optimizer.param_groups:
        group["weight_decay"] = args.ours_weight_decay
    # The dataset env plays train row ``seed % rows``: TRL's rows are the seeds.
    agent._iteration_seeds = lambda count: theirs[agent.steps]["rows"]  # type: ignore[method-assign]
    backend = agent.backend()
    generate = backend.generate
    backend.generate = lambda prompts, **k: generate(prompts, **{**k, "seed": SEED_BASE + agent.steps})  # type: ignore[method-assign]
    rollout = agent.rollout
    ours: list[dict[str, Any]] = []

    def recording_rollout(*a: Any, **k: Any) -> Any:
        trajs = rollout(*a, **k)
        if not k.get("greedy"):
            ours.append({"completions": [t.token_ids[t.prompt_len :] for t in trajs],
                         "rewards": [t.total_reward for t in trajs]})  # fmt: skip
        return trajs

    agent.rollout = recording_rollout  # type: ignore[method-assign]
    for _ in range(args.steps):
        agent.learn_iteration(envs)
        agent.steps += 1
    same = [
        sum(a == b for a, b in zip(o["completions"], t["completions"], strict=True)) / len(o["completions"])
        for o, t in zip(ours, theirs, strict=True)
    ]
    first = next((i for i, s in enumerate(same) if s < 1.0), None)
    rewards_equal = all(
        r == q
        for o, t in zip(ours, theirs, strict=True)
        for a, b, r, q in zip(o["completions"], t["completions"], o["rewards"], t["rewards"], strict=True)
        if a == b
    )
    trl_weights = torch.load(args.record + ".trl.pt")
    from safetensors.torch import load_file

    start = load_file(str(Path(args.warm) / "model.safetensors"))
    names = [k for k in trl_weights if k in start]
    state = agent.model.state_dict()
    gap = sum(float(((state[k] - trl_weights[k]) ** 2).sum()) for k in names) ** 0.5
    moved = sum(float(((trl_weights[k] - start[k]) ** 2).sum()) for k in names) ** 0.5
    _, heldout = bench_learning.split(args.data)
    return {
        "after": exact_match(agent.model, tok, heldout).mean,
        "first_differing_step": first,
        "identical_per_10_steps": [round(statistics.mean(same[i : i + 10]), 3) for i in range(0, len(same), 10)],
        "rewards_equal_where_completions_equal": rewards_equal,
        "weight_gap_over_distance_moved": gap / max(moved, 1e-12),
    }


def main() -> None:
    p = bench_learning.parser()
    p.description = __doc__.split("\n\n")[0]
    p.set_defaults(worker=None)
    p.add_argument("--ours-weight-decay", type=float, default=0.0,
                   help="our AdamW's weight decay (0: TRL's; our default is torch's 0.01)")  # fmt: skip
    p.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--record", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        result = run_trl(args) if args.side == "trl" else run_ours(args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    record_file = benchlib.Record("llm/lockstep_learning")
    work = Path(tempfile.mkdtemp(prefix="lockstep-learning-"))
    warm, data = (args.warm, args.data) if args.warm and args.data else bench_learning.warm_start(args, work)
    runs: list[dict[str, Any]] = []
    for seed in args.seeds:
        record = ["--record", str(work / f"trl-{seed}.json"), "--ours-weight-decay", str(args.ours_weight_decay)]
        trl = bench_learning.run_worker(__file__, ["--side", "trl", *record], args, seed, warm, data)
        ours = bench_learning.run_worker(__file__, ["--side", "ours", *record], args, seed, warm, data)
        print(f"seed {seed}: held-out exact match ours {ours['after']:.3f}, TRL {trl['after']:.3f} "
              f"({trl['optimizer_steps']} TRL steps); first step with a differing completion: "
              f"{ours['first_differing_step']}; identical completions per 10 steps {ours['identical_per_10_steps']}; "
              f"rewards equal where completions are: {ours['rewards_equal_where_completions_equal']}; "
              f"weight gap / distance moved {ours['weight_gap_over_distance_moved']:.2e}", flush=True)  # fmt: skip
        runs.append({"seed": seed, "ours": ours, "trl": trl})
    record_file.save({"args": vars(args), "runs": runs})


if __name__ == "__main__":
    main()
