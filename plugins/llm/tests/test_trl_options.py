"""TRL's GRPO options here: loss_type names (each checked against TRL's formula), scale_rewards,
mask_truncated_completions, an entropy coefficient; RLOO (leave-one-out baseline) from a manifest with
exact resume, and learning the reverse task from the SFT warm start with batched reward functions;
and completions you can read (completions.jsonl, ``agilerl completions``)."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from agilerl.errors import ManifestError
from agilerl.models import load_manifest, validate_manifest
from agilerl_plugin_llm.rollout.grpo import entropy_bonus, group_advantages, normalised_loss_sum
from agilerl_plugin_llm.rollout.rloo import leave_one_out_advantages

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"

REWARDS = """
def length(completions, **kwargs):
    return [float(len(c)) for c in completions]

def constant(completions, **kwargs):
    return [1.0] * len(completions)
"""


@pytest.fixture
def rewards_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "trl_rewards.py").write_text(textwrap.dedent(REWARDS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "trl_rewards"
    sys.modules.pop("trl_rewards", None)


def manifest(model_dir: Path, run_dir: Path, *, env: dict[str, Any] | None = None, training: dict[str, Any] | None = None,
             **algo: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "lr": 0.01, "beta": 0.0,
                      "max_output_tokens": 6, "temperature": 1.0, "gradient_checkpointing": False, **algo},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
        "environment": env or {"env_type": "rollout", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                               "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"), "max_reward": 1.0},
        "training": {"max_steps": 2, "evo_steps": 2, "seed": 0, "progress": False, "run_dir": str(run_dir),
                     **(training or {})},
    }  # fmt: skip


def problems(data: dict[str, Any]) -> str:
    try:
        validate_manifest(data)
    except ManifestError as exc:
        return "\n".join(str(p) for p in exc.problems)
    return ""


def agent_and_envs(data: dict[str, Any]) -> tuple[Any, Any]:
    from agilerl.strategies import select_strategy
    from agilerl_plugin_llm.rollout.grpo import GRPO

    m = load_manifest(data)
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    torch.manual_seed(0)
    return GRPO(m.algorithm, tokenizer=envs.tokenizer), envs


# --- loss_type: TRL's names, each TRL's formula ------------------------------------------------------


@pytest.mark.parametrize(
    ("loss_type", "loss_norm"),
    [
        ("grpo", "sequence"),
        ("dr_grpo", "max_tokens"),
        ("dapo", "accumulation_window"),
        ("bnpo", "micro_batch"),
        ("cispo", "sequence"),
    ],
)
def test_each_trl_loss_type_maps_to_a_loss_norm(loss_type: str, loss_norm: str, tiny_model_dir: Path) -> None:
    spec = load_manifest(manifest(tiny_model_dir, Path("run"), loss_type=loss_type)).algorithm
    assert (spec.loss_type, spec.loss_norm) == (loss_type, loss_norm)  # type: ignore[attr-defined]


def test_the_loss_norms_are_trls_formulas() -> None:
    torch.manual_seed(0)
    per_token = torch.randn(3, 7)
    mask = torch.tensor([[1] * 7, [1] * 3 + [0] * 4, [1] + [0] * 6], dtype=torch.float32)
    rows, tokens, max_len = 3, float(mask.sum()), 10
    trl = {  # TRL's GRPOTrainer._compute_loss, per loss_type
        "grpo": ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean(),
        "bnpo": (per_token * mask).sum() / mask.sum().clamp(min=1.0),
        "dr_grpo": (per_token * mask).sum() / (rows * max_len),
        "dapo": (per_token * mask).sum() / tokens,  # over the tokens of the whole optimizer step
    }
    ours = {  # optimize divides by the step's rows (policy tokens for accumulation_window)
        "grpo": normalised_loss_sum(per_token, mask, {}, "sequence") / rows,
        "bnpo": normalised_loss_sum(per_token, mask, {}, "micro_batch") / rows,
        "dr_grpo": normalised_loss_sum(per_token, mask, {}, "max_tokens", max_len) / rows,
        "dapo": normalised_loss_sum(per_token, mask, {}, "accumulation_window") / tokens,
    }
    for name, value in trl.items():
        assert torch.allclose(ours[name], value), name


def test_a_wrong_loss_type_is_refused_with_the_list(tiny_model_dir: Path) -> None:
    text = problems(manifest(tiny_model_dir, Path("run"), loss_type="ppo"))
    assert "loss_type: 'ppo' is not one of grpo, dr_grpo, dapo, bnpo, cispo, gspo" in text
    clash = problems(manifest(tiny_model_dir, Path("run"), loss_type="dapo", loss_norm="sequence"))
    assert "loss_type: dapo normalises the loss as loss_norm: accumulation_window" in clash


def test_trl_names_that_mean_the_same_train_as_ours(rewards_module: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    env = {"env_type": "rollout", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
           "reward_funcs": [f"{rewards_module}:length"]}  # fmt: skip
    data = manifest(tiny_model_dir, tmp_path, env=env, num_generations=3, learning_rate=0.02, num_iterations=2)
    for ours in ("group_size", "lr"):
        del data["algorithm"][ours]
    agent, envs = agent_and_envs(data)
    assert (agent.spec.group_size, agent.spec.lr, agent.spec.update_epochs) == (3, 0.02, 2)
    _seeds, per_seed = agent.episodes_per_iteration()
    assert per_seed == 3
    stats = agent.learn_iteration(envs)
    assert stats["grad_norm"] > 0
    data["algorithm"]["group_size"] = 3
    assert "num_generations and group_size name the same field; keep one of them" in problems(data)


def test_trl_names_with_another_meaning_here_get_a_hint(tiny_model_dir: Path) -> None:
    text = problems(manifest(tiny_model_dir, Path("run"), epsilon_high=0.28, ent_coef=0.1))
    assert "algorithm.epsilon_high: unknown field; did you mean 'clip_coef'?" in text
    assert "algorithm.ent_coef: unknown field; did you mean 'entropy_coef'?" in text


# --- scale_rewards -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scale", "adv_norm"),
    [
        ("group", "mean_std"),
        ("batch", "mean_batch_std"),
        ("none", "mean_only"),
        (True, "mean_std"),
        (False, "mean_only"),
    ],
)
def test_scale_rewards_sets_adv_norm(scale: Any, adv_norm: str, tiny_model_dir: Path) -> None:
    spec = load_manifest(manifest(tiny_model_dir, Path("run"), scale_rewards=scale)).algorithm
    assert spec.adv_norm == adv_norm  # type: ignore[attr-defined]
    other = "mean_only" if adv_norm != "mean_only" else "mean_std"
    assert "keep one of them" in problems(manifest(tiny_model_dir, Path("run"), scale_rewards=scale, adv_norm=other))


def test_batch_scaling_divides_by_the_std_of_every_reward() -> None:
    rewards = torch.tensor([1.0, 0.0, 3.0, 3.0])
    adv = group_advantages(rewards, 2, norm="mean_batch_std")
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]) / (rewards.std() + 1e-4))


# --- mask_truncated_completions and entropy_coef, on a real iteration -------------------------------------


def test_mask_truncated_completions_leaves_cut_replies_out_of_the_loss(
    rewards_module: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    env = {"env_type": "rollout", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
           "reward_funcs": [f"{rewards_module}:length"]}  # fmt: skip
    # min_output_tokens = max_output_tokens: no reply may stop early, so every one is cut at the budget.
    seen = {}
    for mask in (False, True):
        agent, envs = agent_and_envs(manifest(tiny_model_dir, tmp_path, env=env, max_output_tokens=3,
                                              min_output_tokens=3, mask_truncated_completions=mask))  # fmt: skip
        seen[mask] = agent.learn_iteration(envs)
    assert seen[False]["truncated"] == 1.0 and "truncated_masked" not in seen[False]
    assert seen[False]["grad_norm"] > 0
    assert seen[True]["truncated_masked"] == 1.0
    assert seen[True]["loss"] == 0.0 and seen[True]["grad_norm"] == 0.0


def test_entropy_coef_pushes_where_the_advantage_does_not(
    rewards_module: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    env = {"env_type": "rollout", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
           "reward_funcs": [f"{rewards_module}:constant"]}  # fmt: skip
    stats = {}
    for coef in (0.0, 0.1):  # equal rewards: every advantage is 0, so only the entropy term moves the policy
        agent, envs = agent_and_envs(manifest(tiny_model_dir, tmp_path, env=env, entropy_coef=coef))
        stats[coef] = agent.learn_iteration(envs)
    assert stats[0.0]["grad_norm"] == 0.0 and stats[0.1]["grad_norm"] > 0.0
    assert stats[0.1]["entropy"] > 0.0


def test_the_entropy_bonus_raises_the_entropy() -> None:
    torch.manual_seed(0)
    logits = torch.nn.Parameter(torch.tensor([3.0, 0.0, -1.0, -2.0]))
    opt = torch.optim.SGD([logits], lr=0.5)

    def entropy() -> float:
        p = torch.softmax(logits.detach(), -1)
        return float(-(p * p.log()).sum())

    before = entropy()
    for _ in range(50):
        logp = torch.log_softmax(logits, -1)
        tokens = torch.multinomial(logp.exp().detach(), 64, replacement=True)
        loss = entropy_bonus(logp[tokens], 0.1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert entropy() > before + 0.3


# --- RLOO ----------------------------------------------------------------------------------------------


def test_rloo_baseline_is_the_mean_of_the_other_completions() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0, 2.0, 2.0])
    adv = leave_one_out_advantages(rewards, 3)
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5, 0.0, 0.0, 0.0]))
    normed = leave_one_out_advantages(rewards, 3, normalize=True)
    assert torch.allclose(normed, (adv - adv.mean()) / (adv.std() + 1e-4))


def test_rloo_refuses_grpo_scaling(tiny_model_dir: Path) -> None:
    text = problems(manifest(tiny_model_dir, Path("run"), name="RLOO", scale_rewards="group"))
    assert "RLOO's advantage is the reward minus the mean of the other completions" in text


def test_rloo_trains_from_a_manifest_and_resumes_exactly(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    def rows(run_dir: Path) -> dict[int, dict[str, Any]]:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return {r["steps"]: r for r in map(json.loads, lines) if r["generation"] >= 0}

    training = {"max_steps": 4, "evo_steps": 2, "checkpoint_steps": 2}
    whole = manifest(tiny_model_dir, tmp_path / "whole", name="RLOO", normalize_advantages=True, training=training)
    code, out, err = run_cli("train", write_manifest(whole))
    assert code == 0, out + err
    half = manifest(tiny_model_dir, tmp_path / "half", name="RLOO", normalize_advantages=True,
                    training={**training, "max_steps": 2})  # fmt: skip
    path = write_manifest(half, "half.yaml")
    assert run_cli("train", path)[0] == 0
    code, out, err = run_cli("train", path, "--resume", str(tmp_path / "half"), "--set", "training.max_steps=4")
    assert code == 0, out + err
    a, b = rows(tmp_path / "whole"), rows(tmp_path / "half")
    assert set(a) == set(b) == {2, 4}
    for key in ("train/reward", "train/loss", "fitness"):
        assert a[4][key] == b[4][key], key  # the same prompts, samples and weights after the resume


# --- completions you can read -----------------------------------------------------------------------------


def test_a_short_run_logs_completions_and_the_cli_prints_them(
    tiny_model_dir: Path, tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    from agilerl.training.trainer import LocalTrainer

    run = tmp_path / "run"
    LocalTrainer(load_manifest(manifest(tiny_model_dir, run, log_completions_count=3,
                                        training={"max_steps": 3, "evo_steps": 3}))).train()  # fmt: skip
    records = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 0, 0]  # the default (every 10 iterations) logs the first
    assert {"prompt", "completion", "reward", "advantage", "truncated"} <= set(records[0])
    assert "Which number" in records[0]["prompt"] or "magic" in records[0]["prompt"]
    assert list((run / "tensorboard").glob("events.*"))  # the text panel's events beside the scalars
    code, out, _ = run_cli("completions", str(run), "--last", "1")
    assert code == 0 and out.count("=== step 0") == 3 and "--- completion ---" in out
    best = max(r["reward"] for r in records)
    code, out, _ = run_cli("completions", str(run), "--min-reward", str(best + 1))
    assert "no completions match" in out
    code, _, err = run_cli("completions", str(tmp_path / "nowhere"))
    assert code != 0 and "no such directory" in err


def test_log_completions_steps_sets_how_often_and_zero_turns_it_off(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agilerl.training.trainer import LocalTrainer

    for every, wanted in ((2, [0, 2]), (0, None)):
        run = tmp_path / f"every{every}"
        LocalTrainer(load_manifest(manifest(tiny_model_dir, run, log_completions_steps=every, log_completions_count=1,
                                            training={"max_steps": 3, "evo_steps": 3}))).train()  # fmt: skip
        path = run / "completions.jsonl"
        if wanted is None:
            assert not path.exists()
        else:
            assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == wanted


def test_completions_reach_tensorboard_as_text(tmp_path: Path) -> None:
    import types

    from agilerl.training.metrics import MetricsLogger
    from agilerl_plugin_llm.rollout.completions_log import write_completions

    sinks = types.SimpleNamespace(tensorboard=True, wandb=None)
    run = types.SimpleNamespace(run_dir=tmp_path, logger=MetricsLogger(tmp_path),
                                manifest=types.SimpleNamespace(logging=sinks))  # fmt: skip
    records = [{"step": 3, "agent": 0, "prompt": "<|im_start|>user\nsay eight", "completion": "eight",
                "reward": 1.0, "rewards": {"eight": 1.0}, "advantage": 0.5, "truncated": False}]  # fmt: skip
    write_completions(run, records)
    run.logger.close()  # flushes the run's one TensorBoard writer
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    (event,) = acc.Tensors("member/0/completions/text_summary")
    text = event.tensor_proto.string_val[0].decode()
    assert event.step == 3 and "say eight" in text and "eight: 1" in text


def test_completions_reach_wandb_as_a_table_in_an_offline_run(
    rewards_module: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real W&B run (offline, TensorBoard off): each logged step's completions are a table in the
    run's files, one column per reward function, the same rows as completions.jsonl."""
    pytest.importorskip("wandb")
    from agilerl.training.trainer import LocalTrainer

    monkeypatch.setenv("WANDB_SILENT", "true")
    env = {"env_type": "rollout", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
           "reward_funcs": [f"{rewards_module}:length", f"{rewards_module}:constant"]}  # fmt: skip
    data = manifest(tiny_model_dir, tmp_path / "run", env=env, log_completions_steps=1, log_completions_count=2,
                    training={"max_steps": 2, "evo_steps": 1})  # fmt: skip
    data["logging"] = {"tensorboard": False, "wandb": {"project": "agilerl-tests", "mode": "offline"}}
    LocalTrainer(load_manifest(data)).train()
    run = tmp_path / "run"
    logged = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [0, 0, 1, 1]
    tables = [json.loads(p.read_text()) for p in run.glob("wandb/offline-run-*/files/media/table/member/0/*.json")]
    assert len(tables) == 2  # one per logged step, none lost for want of TensorBoard
    rows = []
    for table in sorted(tables, key=lambda t: t["data"][0][0]):
        assert table["columns"] == ["step", "prompt", "completion", "reward", "constant", "length", "advantage"]
        rows += table["data"]
    assert rows == [[r["step"], r["prompt"], r["completion"], r["reward"], r["rewards"]["constant"],
                     r["rewards"]["length"], r["advantage"]] for r in logged]  # fmt: skip


@pytest.mark.slow
def test_the_rloo_example_runs_from_batched_reward_functions_smoke(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., Any]
) -> None:
    """Smoke test: examples/rloo_tiny.yaml as shipped (LoRA, reward_funcs from a file) trains and its
    completions read back. It asserts nothing about learning: "say eight" answers every prompt alike;
    RLOO's learning evidence is :func:`test_rloo_from_sft_warm_start_raises_heldout_exact_match`."""
    root = EXAMPLES.parents[1]
    monkeypatch.chdir(root)  # the example names its files relative to the repository
    code, out, err = run_cli("train", "examples/rloo_tiny.yaml", "--run-dir", str(tmp_path / "run"),
                             "--set", f"network.pretrained_model_name_or_path={tiny_model_dir}")  # fmt: skip
    assert code == 0, out + err
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [r["steps"] for r in map(json.loads, lines) if "fitness" in r] == [0, 10, 20, 30, 40]
    code, out, _ = run_cli("completions", str(tmp_path / "run"), "--last", "1")
    assert code == 0 and "says_answer" in out and "=== step 30" in out


#: TRL-style batched reward functions for the reverse task: the exact answer, and half a point times
#: the share of digits in place otherwise (the two parts of examples/llm/reverse/reverse_rubric.py).
REVERSE_REWARDS = """
def exact(completions, answer, **kwargs):
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]

def digits_in_place(completions, answer, **kwargs):
    out = []
    for c, a in zip(completions, answer):
        r = c.strip()
        out.append(0.0 if r == a else 0.5 * sum(x == y for x, y in zip(r, a)) / max(len(a), len(r)))
    return out
"""


@pytest.mark.slow
def test_rloo_from_sft_warm_start_raises_heldout_exact_match(
    reverse_warm_start: dict[str, Any], reverse_manifest: Callable[..., Path]
) -> None:
    """RLOO with batched reward functions (TRL's way) from the session's SFT warm start on the reverse
    task (conftest.py): the reverse example's GRPO manifest as RLOO, 120 iterations, greedy exact match
    on 128 held-out prompts."""
    from agilerl.cli import main

    work = reverse_warm_start["work"]
    (work / "reverse_rewards.py").write_text(REVERSE_REWARDS)
    path = reverse_manifest("grpo.yaml", work, run_dir=str(work / "rloo"))
    data = yaml.safe_load(path.read_text())
    data["algorithm"]["name"] = "RLOO"
    del data["environment"]["rubric_file_path"]
    data["environment"]["reward_funcs"] = [
        f"{work}/reverse_rewards.py:exact",
        f"{work}/reverse_rewards.py:digits_in_place",
    ]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["train", str(path)]) == 0
    rows = [json.loads(line) for line in (work / "rloo" / "metrics.jsonl").read_text().splitlines()]
    scores = [r["eval/eval_greedy_success"] for r in rows]
    assert scores[0] == pytest.approx(reverse_warm_start["after"].mean) and rows[0]["eval/eval_prompts"] == 128
    # Measured 0.594 -> 0.680 / 0.703 / 0.812 at iterations 40 / 80 / 120 (seed 0): asserted above the
    # start by more than one standard error.
    assert scores[-1] > scores[0] + rows[-1]["eval/eval_success_stderr"], scores
