"""Reward models: RewardModel training from a manifest (Bradley-Terry with margin, held-out preference
accuracy, resume), its export, and that export scoring a GRPO run as ``environment.reward_model``;
a reward model whose head is not one logit is refused at validation."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from agilerl.models import load_manifest

WORDS = "red blue green cat dog bird fish cow apple pear milk tea sun moon star sky".split()


def _chat(text: str, role: str = "user") -> list[dict[str, str]]:
    return [{"role": role, "content": text}]


def preference_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Conversational pairs where the chosen answer says 'please' and the rejected one does not."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        word, other = rng.sample(WORDS, 2)
        rows.append({"prompt": _chat(f"say {word}"), "chosen": _chat(f"{word} please.", "assistant"),
                     "rejected": _chat(f"{word} {other}.", "assistant")})  # fmt: skip
    return rows


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def reward_manifest(model_dir: Path, data: Path, run_dir: Path, **training: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agilerl.com/v1",
        "algorithm": {"name": "RewardModel", "lr": 3e-3, "batch_size": 8, "gradient_checkpointing": False},
        "network": {
            "pretrained_model_name_or_path": str(model_dir),
            "max_context_length": 64,
            "lora_config": {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0},
        },
        "environment": {"env_type": "dataset", "dataset_path": str(data), "train_test_split": 0.75},
        "training": {
            "seed": 0,
            "run_dir": str(run_dir),
            "progress": False,
            "max_steps": 20,
            "evo_steps": 10,
            **training,
        },
    }


def one_logit_model(model_dir: Path, out: Path, seed: int = 0) -> Path:
    """A real (untrained) reward model: the tiny model under a fresh one-logit head, with its tokenizer."""
    from transformers import AutoModelForSequenceClassification

    from agilerl_plugin_llm.model import load_tokenizer

    torch.manual_seed(seed)  # the new head's initial weights
    AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1).save_pretrained(out)
    load_tokenizer(model_dir).save_pretrained(out)
    return out


def _evals(run_dir: Path, key: str) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r[key] for r in rows if key in r]


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A RewardModel run on conversational pairs (checkpointed), and its export."""
    from agilerl.cli import main

    tmp = tmp_path_factory.mktemp("reward-model")
    data = _jsonl(tmp / "pairs.jsonl", preference_rows(48))
    manifest = reward_manifest(tiny_model_dir, data, tmp / "run", checkpoint_steps=10,
                               checkpoint_path=str(tmp / "ckpt" / "rm"))  # fmt: skip
    path = tmp / "manifest.yaml"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    assert main(["train", str(path)]) == 0
    assert main(["export", str(tmp / "run"), str(tmp / "export")]) == 0
    return {"run": tmp / "run", "export": tmp / "export", "manifest": path, "ckpt": tmp / "ckpt", "data": data}


@pytest.mark.slow
def test_reward_model_training_raises_heldout_preference_accuracy(trained: dict[str, Path]) -> None:
    accuracy, loss = _evals(trained["run"], "eval/accuracy"), _evals(trained["run"], "eval/loss")
    assert len(accuracy) == 3  # the baseline, then one per generation
    assert accuracy[-1] >= 0.9 and accuracy[-1] > accuracy[0], accuracy
    assert loss[-1] < loss[0], loss


@pytest.mark.slow
def test_reward_model_resumes_from_its_checkpoint(
    trained: dict[str, Path], tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    checkpoint = sorted(trained["ckpt"].glob("rm_*.pt"))[-1]
    state = torch.load(checkpoint, weights_only=True)["agents"][0]
    assert any("lora_" in k for k in state["weights"]) and any(".score." in k for k in state["weights"])
    code, out, err = run_cli("train", str(trained["manifest"]), "--resume", str(checkpoint),
                             "--set", "training.max_steps=30", "--run-dir", str(tmp_path / "resumed"))  # fmt: skip
    assert code == 0, out + err
    assert _evals(tmp_path / "resumed", "eval/accuracy")[-1] >= 0.9


@pytest.mark.slow
def test_export_is_a_one_logit_classifier_that_scores_like_the_trained_model(trained: dict[str, Path]) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from agilerl_plugin_llm.reward_model import reward_model_problems

    out = trained["export"]
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"] and len(config["id2label"]) == 1
    assert reward_model_problems(str(out)) == []
    assert "AutoModelForSequenceClassification.from_pretrained" in (out / "README.md").read_text()
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    texts = [tokenizer.apply_chat_template([*_chat("say cat"), *_chat(a, "assistant")], tokenize=False)
             for a in ("cat please.", "cat dog.")]  # fmt: skip
    with torch.no_grad():
        scores = [float(model(**tokenizer(t, return_tensors="pt")).logits[0, 0]) for t in texts]
    assert scores[0] > scores[1] + 1.0, scores


@pytest.mark.slow
def test_grpo_takes_the_export_as_its_reward_model_and_its_rewards_come_from_it(
    trained: dict[str, Path], tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any],
) -> None:  # fmt: skip
    from agilerl.strategies import select_strategy
    from agilerl_plugin_llm.reward_model import RewardModelScorer
    from agilerl_plugin_llm.rollout.grpo import GRPO

    prompts = _jsonl(tmp_path / "prompts.jsonl", [{"prompt": _chat(f"say {w}")} for w in WORDS])
    manifest = {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 4, "lr": 0.01, "beta": 0.0,
                      "max_output_tokens": 6, "temperature": 1.0, "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "max_context_length": 96},
        "environment": {"env_type": "rollout", "dataset_path": str(prompts), "reward_model": str(trained["export"])},
        "training": {"max_steps": 2, "evo_steps": 2, "seed": 0, "progress": False, "run_dir": str(tmp_path / "run")},
    }  # fmt: skip
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    assert _evals(tmp_path / "run", "train/reward")
    # The rewards are the reward model's scores of each prompt + completion (no rubric).
    m = load_manifest(manifest)
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = GRPO(m.algorithm, tokenizer=envs.tokenizer)
    trajs = agent.rollout(envs.make_train, [1, 1, 1, 1, 2, 2, 2, 2], generation_seed=0)
    scorer = RewardModelScorer(str(trained["export"]))
    completions = [envs.tokenizer.decode([i for i, m in zip(t.token_ids, t.policy_mask, strict=True) if m],
                                         skip_special_tokens=True) for t in trajs]  # fmt: skip
    rows = [json.loads(line)["prompt"] for line in prompts.read_text().splitlines()]
    rendered = {envs.tokenizer.apply_chat_template(r, tokenize=False, add_generation_prompt=True): r for r in rows}
    asked = [rendered[envs.tokenizer.decode(t.token_ids[: t.prompt_len])] for t in trajs]
    expected = scorer(asked, completions)
    rewards = [t.rewards[-1] for t in trajs]
    assert rewards == pytest.approx(expected, abs=1e-4)
    assert [t.info["rewards"]["reward_model"] for t in trajs] == pytest.approx(rewards)
    distinct = {c: r for c, r in zip(completions, rewards, strict=True)}
    assert len(distinct) > 1 and len({round(r, 4) for r in distinct.values()}) > 1  # they differ by completion


def test_margin_enters_the_bradley_terry_loss(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agilerl_plugin_llm.dataset.reward_env import make_reward_env
    from agilerl_plugin_llm.dataset.reward_model import RewardModel
    from agilerl_plugin_llm.dataset.specs import RewardModelSpec
    from agilerl_plugin_llm.model import load_tokenizer
    from agilerl_plugin_llm.specs import LLMEnvSpec

    rows = [{"prompt": "say red", "chosen": "red please.", "rejected": "red.", "margin": m} for m in (0.0, 2.5)]
    tokenizer = load_tokenizer(tiny_model_dir)
    spec = LLMEnvSpec(env_type="dataset", dataset_path=str(_jsonl(tmp_path / "p.jsonl", rows)), train_test_split=1.0)
    env = make_reward_env(spec, tokenizer, seed=0)
    batch = env.collate(sorted(env.train_rows, key=lambda r: r.index))
    assert batch["margin"].tolist() == [0.0, 2.5] and batch["input_ids"].shape[:2] == (2, 2)
    # Standard rows are scored as plain text + EOS (TRL's RewardTrainer), never chat-templated.
    assert tokenizer.decode(batch["input_ids"][0, 0][batch["attention_mask"][0, 0].bool()]) == "say redred please.</s>"
    agent = RewardModel(RewardModelSpec(pretrained_model_name_or_path=str(tiny_model_dir), center_rewards_coefficient=0.1),
                        tokenizer=tokenizer)  # fmt: skip
    with torch.no_grad():
        r = agent.pair_scores(batch)
        terms = agent._terms(batch)
    expected = -F.logsigmoid(r[:, 0] - r[:, 1] - batch["margin"]) + 0.1 * (r[:, 0] + r[:, 1]) ** 2
    assert torch.allclose(terms["loss"], expected)
    assert r[0, 0] == r[1, 0]  # the same text scores the same; only the margin differs
    # Full fine-tuning (no lora_config) trains every weight and the new head.
    before = agent.learn(batch)["loss"]
    for _ in range(5):
        after = agent.learn(batch)["loss"]
    assert after < before


def test_a_reward_model_whose_head_is_not_one_logit_is_refused_at_validation(
    tiny_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    from transformers import AutoModelForSequenceClassification

    from agilerl_plugin_llm.model import load_tokenizer

    two = tmp_path / "two-labels"
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2)
    model.save_pretrained(two)
    load_tokenizer(tiny_model_dir).save_pretrained(two)
    prompts = _jsonl(tmp_path / "prompts.jsonl", [{"prompt": "say red"}])
    for reward_model, needle in (
        (two, "its head gives 2 logits (num_labels 2, from config.json)"),
        (tiny_model_dir, "is a LlamaForCausalLM, not a sequence classifier"),
        (tmp_path / "nowhere", "is not a directory"),
    ):
        manifest = {
            "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2},
            "network": {"pretrained_model_name_or_path": str(tiny_model_dir)},
            "environment": {"env_type": "rollout", "dataset_path": str(prompts), "reward_model": str(reward_model)},
            "training": {"max_steps": 1, "run_dir": str(tmp_path / "run")},
        }
        code, out, err = run_cli("validate", write_manifest(manifest))
        assert code != 0 and "environment.reward_model" in out + err and needle in out + err, out + err


def test_reward_model_field_is_refused_where_it_cannot_score(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from agilerl_plugin_llm.specs import LLMEnvSpec

    with pytest.raises(ValidationError, match="an entrypoint or env_url env scores its own replies"):
        LLMEnvSpec(env_type="rollout", entrypoint="mod:Env", reward_model=str(tmp_path))
    with pytest.raises(ValidationError, match=re.escape("algorithm: {name: RewardModel}")):
        LLMEnvSpec(env_type="dataset", dataset_path=str(tmp_path / "x.jsonl"), reward_model=str(tmp_path))


@pytest.mark.parametrize(("field", "value"), [("beta", 0.5), ("chunk_rows", 8), ("use_liger_loss", True),
                                              ("quantization", "nf4"), ("use_separate_reference_adapter", True)])  # fmt: skip
def test_reward_model_refuses_fields_it_would_not_use(field: str, value: Any) -> None:
    from pydantic import ValidationError

    from agilerl_plugin_llm.dataset.specs import RewardModelSpec

    with pytest.raises(ValidationError, match=re.escape(field)):
        RewardModelSpec(**{field: value})


def test_a_non_finite_score_is_an_error_naming_the_completion(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agilerl_plugin_llm.reward_model import RewardModelError, RewardModelScorer

    scorer = RewardModelScorer(str(one_logit_model(tiny_model_dir, tmp_path / "rm")))
    with torch.no_grad():
        scorer.model.score.weight.fill_(float("nan"))
    with pytest.raises(RewardModelError, match="scored completion 0 as nan"):
        scorer([_chat("say cat")], ["cat please."])


LENGTH_REWARD = "def length(completions, **kwargs):\n    return [float(len(c[0]['content'])) for c in completions]\n"


def test_reward_funcs_and_a_reward_model_score_each_completion_as_their_weighted_sum(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """TRL's reward_funcs with a reward model among them: one weight each, the model's last; the
    completions log shows each part."""
    from agilerl.training.trainer import LocalTrainer
    from agilerl_plugin_llm.model import load_tokenizer
    from agilerl_plugin_llm.reward_model import RewardModelScorer

    rm = one_logit_model(tiny_model_dir, tmp_path / "rm")
    (tmp_path / "rewards.py").write_text(LENGTH_REWARD, encoding="utf-8")
    rows = [{"prompt": [*_chat("Answer politely.", "system"), *_chat(f"say {w}")]} for w in WORDS]
    prompts = _jsonl(tmp_path / "prompts.jsonl", rows)
    manifest = {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "lr": 0.01, "beta": 0.0,
                      "max_output_tokens": 6, "temperature": 1.0, "gradient_checkpointing": False,
                      "log_completions_steps": 1},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "max_context_length": 96},
        "environment": {"env_type": "rollout", "dataset_path": str(prompts), "reward_model": str(rm),
                        "reward_funcs": [f"{tmp_path / 'rewards.py'}:length"], "reward_weights": [0.5, 2.0]},
        "training": {"max_steps": 1, "evo_steps": 1, "seed": 0, "progress": False, "run_dir": str(tmp_path / "run")},
    }  # fmt: skip
    LocalTrainer(load_manifest(manifest)).train()
    logged = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert len(logged) == 4  # the whole batch of one iteration
    tokenizer = load_tokenizer(tiny_model_dir)
    rendered = {tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True): r["prompt"]
                for r in rows}  # fmt: skip
    scorer = RewardModelScorer(str(rm))
    for r in logged:
        assert "Answer politely." in r["prompt"] and r["prompt"] in rendered  # as the policy saw it, system included
        assert set(r["rewards"]) == {"length", "reward_model"}
        assert r["rewards"]["length"] == float(len(r["completion"]))
        # the reward model's part is its own score of the row's messages + the completion
        expected = scorer([rendered[r["prompt"]]], [r["completion"]])[0]
        assert r["rewards"]["reward_model"] == pytest.approx(expected, abs=1e-4)
        assert r["reward"] == pytest.approx(0.5 * r["rewards"]["length"] + 2.0 * r["rewards"]["reward_model"], abs=1e-4)
    assert len({round(r["rewards"]["reward_model"], 4) for r in logged}) > 1  # it scores each completion


def test_reward_weights_cover_the_reward_model_last_as_trl(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from agilerl_plugin_llm.reward_model import reward_model_func
    from agilerl_plugin_llm.specs import LLMEnvSpec

    env = {"env_type": "rollout", "dataset_path": str(tmp_path / "x.jsonl"), "reward_model": str(tmp_path)}
    with pytest.raises(ValidationError, match=re.escape("one per reward_funcs entry (1), then the reward_model's")):
        LLMEnvSpec(**env, reward_funcs=["r.py:length"], reward_weights=[1.0])
    with pytest.raises(ValidationError, match="reward_model would name two reward sources"):
        LLMEnvSpec(**env, reward_funcs=["r.py:reward_model"])
    with pytest.raises(ValidationError, match="1 weights for 2 reward sources"):
        LLMEnvSpec(**env, reward_funcs=["r.py:length"], reward_weights=[3.0])
    spec = LLMEnvSpec(**env, reward_weights=[3.0])  # the reward model alone: one weight
    assert spec.reward_weights == [3.0]
    assert reward_model_func(LLMEnvSpec(env_type="rollout", dataset_path=str(tmp_path / "x.jsonl"))) is None


def test_a_rubric_file_and_a_reward_model_are_one_way_of_scoring_too(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agilerl.errors import ManifestError
    from agilerl.models import validate_manifest

    prompts = _jsonl(tmp_path / "prompts.jsonl", [{"prompt": _chat("say cat")}])
    rubric = tmp_path / "rubric.py"
    rubric.write_text("def reward_fn(completion, answer, question):\n    return 1.0\n", encoding="utf-8")
    data = {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "max_context_length": 96},
        "environment": {"env_type": "rollout", "dataset_path": str(prompts), "rubric_file_path": str(rubric),
                        "reward_model": str(one_logit_model(tiny_model_dir, tmp_path / "rm"))},
    }  # fmt: skip
    with pytest.raises(ManifestError) as err:
        validate_manifest(data)
    text = "\n".join(str(p) for p in err.value.problems)
    assert "environment.rubric_file_path: reward_model already score the completions" in text, text
