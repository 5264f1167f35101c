"""GRPO: the loss pieces by hand, and "say the magic number" from a YAML manifest through ``agilerl
train`` as a smoke test. Learning on a task whose answer depends on the prompt, with full fine-tuning
and with LoRA: test_learning_reverse.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agilerl_plugin_llm.rollout.grpo import group_advantages, policy_loss

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"


def grpo_manifest(model_dir: Path, run_dir: Path, **algo: Any) -> dict[str, Any]:
    algorithm = {
        "name": "GRPO",
        "batch_size": 4,
        "group_size": 4,
        "lr": 0.01,
        "beta": 0.04,
        "max_output_tokens": 8,
        "temperature": 1.0,
        "gradient_checkpointing": False,
        **algo,
    }
    return {
        "algorithm": algorithm,
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
        "environment": {
            "env_type": "rollout",
            "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
            "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"),
            "max_reward": 1.0,
        },
        "training": {"max_steps": 30, "evo_steps": 10, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }


def fitness_history(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [float(r["fitness"]) for r in rows]


# --- the loss, by hand -----------------------------------------------------------------------------


def test_group_advantages_are_relative_to_the_group() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5])
    adv = group_advantages(rewards, 4, norm="mean_only")
    assert torch.allclose(adv, torch.tensor([0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0, 0.0]))
    std = group_advantages(rewards, 4, norm="mean_std")
    assert torch.allclose(std[:4], adv[:4] / (rewards[:4].std() + 1e-4))
    assert torch.all(std[4:] == 0)  # a group with equal rewards teaches nothing


def test_policy_loss_clips_the_ratio_on_the_side_the_advantage_pushes() -> None:
    mask = torch.ones(1, 2)
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5]]))  # ratios 1.5 and 0.5
    pos, clipped = policy_loss(logp, old, torch.tensor([1.0]), mask, clip_coef=0.2)
    # A > 0: the gain is capped at 1 + eps; below 1 - eps the unclipped (worse) ratio counts.
    assert torch.allclose(pos, torch.tensor([[-1.2, -0.5]]))
    assert clipped.tolist() == [[1.0, 1.0]]
    neg, _ = policy_loss(logp, old, torch.tensor([-1.0]), mask, clip_coef=0.2)
    assert torch.allclose(neg, torch.tensor([[1.5, 0.8]]))


def test_gspo_and_cispo_variants() -> None:
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    old = torch.zeros(1, 3)
    logp = torch.tensor([[0.1, -0.1, 5.0]], requires_grad=True)
    gspo, _ = policy_loss(logp, old, torch.tensor([1.0]), mask, clip_coef=0.2, loss_type="gspo")
    # One sequence-level ratio: the geometric mean of the masked token ratios (= 1 here).
    assert torch.allclose(gspo[0, :2], torch.tensor([-1.0, -1.0]))
    cispo, _ = policy_loss(logp, old, torch.tensor([2.0]), mask, clip_coef=0.2, loss_type="cispo")
    (cispo * mask).sum().backward()
    # Weight = clip(ratio, max 1.2), detached: the gradient is -A * weight on each token.
    expected = -2.0 * torch.clamp(torch.exp(torch.tensor([0.1, -0.1])), max=1.2)
    assert torch.allclose(logp.grad[0, :2], expected)


# --- learning from manifests -----------------------------------------------------------------------


def test_grpo_say_the_word_smoke(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    """A smoke test: a short GRPO run from a manifest trains, evaluates and saves. "Say eight" is no
    learning evidence (its answer ignores the prompt); test_learning_reverse.py is."""
    manifest = grpo_manifest(tiny_model_dir, tmp_path / "run")
    manifest["training"].update(max_steps=6, evo_steps=3)
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    history = fitness_history(tmp_path / "run")
    assert len(history) == 3 and all(0.0 <= f <= 1.0 for f in history), history
    assert (tmp_path / "run" / "elite.pt").is_file()


def test_grpo_evaluation_interval_logs_heldout_rows_every_n_iterations(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    """``training.evaluation_interval: 2`` (AgileRL's: a held-out evaluation every 2 iterations): its
    own rows at steps 2 and 4; step 5 ends the generation, whose row holds the fitness evaluation."""
    manifest = grpo_manifest(tiny_model_dir, tmp_path / "run", batch_size=2, group_size=2, max_output_tokens=4)
    manifest["training"].update(max_steps=5, evo_steps=5, evaluation_interval=2)
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/eval_reward" in r and "fitness" not in r]
    assert [(r["generation"], r["steps"]) for r in evals] == [(0, 2), (0, 4)], rows
    assert all(0.0 <= r["eval/eval_reward"] <= 1.0 for r in evals), evals
    assert [r["steps"] for r in rows if r.get("generation") == 0 and "fitness" in r] == [5]


def test_grpo_population_mutates_checkpoints_and_resumes(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    import torch

    manifest = grpo_manifest(tiny_model_dir, tmp_path / "run", batch_size=2, group_size=2, max_output_tokens=4)
    manifest["network"]["lora_config"] = {"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0}
    manifest["training"].update(max_steps=4, evo_steps=2, pop_size=2, checkpoint_steps=2)
    manifest["mutation"] = {
        "probabilities": {"no_mut": 0.0, "arch_mut": 0.0, "new_layer": 0.0, "params_mut": 0.0, "rl_hp_mut": 1.0},
        "rl_hp_selection": {"lr": {"min": 0.001, "max": 0.1}},
    }
    manifest["tournament_selection"] = {"tournament_size": 2, "elitism": True}
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    baseline = [r for r in rows if r["generation"] == -1]  # the step-0 evaluation, one per agent
    assert [(r["agent"], r["steps"]) for r in baseline] == [(0, 0), (1, 0)]
    assert all("eval/eval_reward" in r and "fitness" in r for r in baseline)
    rows = [r for r in rows if r["generation"] >= 0]
    assert {r["generation"] for r in rows} == {0, 1} and len(rows) == 4
    assert any(r["mutation"] == "lr" for r in rows if r["generation"] == 1)
    first = tmp_path / "run" / "checkpoint_2.pt"
    state = torch.load(first, weights_only=True)  # weights-only safe
    assert [a["steps"] for a in state["agents"]] == [2, 2]
    code, out, err = run_cli(
        "train", "--resume", str(first), "--run-dir", str(tmp_path / "resumed"), "--trust-checkpoint"
    )  # the stored manifest names a rubric file: resuming from it alone needs the explicit flag
    assert code == 0, out + err
    final = torch.load(tmp_path / "resumed" / "elite.pt", weights_only=True)
    assert final["agents"][0]["steps"] == 4
