"""``vllm_importance_sampling_correction`` (AgileRL's truncated importance sampling for vLLM rollouts).

The math runs everywhere: given log-probs, each policy token's loss term is weighted by
``min(exp(log p_policy - log p_vLLM), vllm_importance_sampling_cap)`` with no gradient, in GRPO,
CISPO, LLMREINFORCE and LLMPPO (the policy term only: not the KL, not PPO's value loss); the sampling
log-probs a reply carries land on its policy tokens, turn after turn; the field is refused by name
where no vLLM engine samples. The ``vllm`` tests run the real colocated engine (CI's vLLM venv,
``AGILERL_REQUIRE_VLLM=1``): its sampled-token log-probs, the weight they give, and training with it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl.strategies import select_strategy
from agilerl_plugin_llm.rollout.base import pad_trajectories, truncated_is_weight
from agilerl_plugin_llm.rollout.harness import RolloutHarness

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"
TWO_TURN = f"{EXAMPLES / 'two_turn_env.py'}:TwoTurnEnv"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
DEVICE = os.environ.get("AGILERL_TEST_DEVICE", "cpu")
if not HAS_VLLM and os.environ.get("AGILERL_REQUIRE_VLLM") == "1":
    raise RuntimeError("AGILERL_REQUIRE_VLLM=1 but vllm is not installed: bash scripts/install.sh --vllm")
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed (bash scripts/install.sh --vllm)")


def manifest(model_dir: Path, run_dir: Path, name: str = "GRPO", **algo: Any) -> dict[str, Any]:
    algorithm: dict[str, Any] = {"name": name, "batch_size": 4, "lr": 0.01, "beta": 0.0, "max_output_tokens": 8,
                                 "temperature": 1.0, "gradient_checkpointing": False, **algo}  # fmt: skip
    if name in ("GRPO", "GSPO", "CISPO"):
        algorithm.setdefault("group_size", 4)
    if name in ("LLMPPO", "LLMREINFORCE"):
        algorithm["batch_size"] = 16
    if name == "LLMPPO":
        algorithm.update(lr_actor=algorithm.pop("lr"), lr_critic=0.01)
    return {
        "algorithm": algorithm,
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
        "environment": {"env_type": "rollout", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"), "max_reward": 1.0},
        "training": {"max_steps": 12, "evo_steps": 4, "seed": 0, "progress": False, "run_dir": str(run_dir),
                     "device": DEVICE},
    }  # fmt: skip


def build(data: dict[str, Any]) -> tuple[Any, Any]:
    m = load_manifest(data)
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(m.algorithm, env=envs, manifest=m,
                                                      runtime=AlgorithmBuildRuntime(seed=0))  # fmt: skip
    return agent, envs


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_manifest(data)
    return [f"{p.path}: {p.message}" for p in info.value.problems]


# --- the weight ------------------------------------------------------------------------------------


def test_the_weight_is_the_probability_ratio_truncated_at_the_cap_without_gradient() -> None:
    log_ratio = torch.tensor([[0.0, math.log(1.5), math.log(3.0), -1.0, float("nan"), 7.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0, 1.0, 0.0]])
    weight, stats = truncated_is_weight(log_ratio, mask, cap=2.0)
    # Outside the mask (a prompt token, padding) and where the engine gave no log-prob: weight 1.
    expected = torch.tensor([[1.0, 1.5, 2.0, math.exp(-1.0), 1.0, 1.0]])
    torch.testing.assert_close(weight, expected)
    assert not weight.requires_grad  # a weight, not a path for the gradient
    assert stats["vllm_is_ratio"] == pytest.approx((1.5 + 2.0 + math.exp(-1.0)) / 3)
    assert stats["vllm_is_clamped"] == pytest.approx(1 / 3)
    assert stats["vllm_is_logprob_gap"] == pytest.approx((math.log(1.5) + math.log(3.0) + 1.0) / 3)


@pytest.mark.parametrize("name", ["GRPO", "CISPO", "LLMREINFORCE", "LLMPPO"])
def test_the_loss_weights_each_policy_token_as_if_its_advantage_were_scaled(
    name: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """With sampling log-probs ``log p - log w``, the loss and its gradient equal those of the same batch
    without them and each token's advantage multiplied by ``min(w, cap)`` (cap 2.0, AgileRL's default): the weight scales the policy
    term (for LLMPPO not the value loss; nothing the KL to the reference, which is the same in both)."""
    beta = 0.0 if name == "LLMPPO" else 0.04
    # (Here HF generate samples; the batch is given the log-probs a vLLM engine would have returned.)
    agent, envs = build(manifest(tiny_model_dir, tmp_path, name, beta=beta))
    seeds, repeats = agent.episodes_per_iteration()
    trajs = agent.rollout(envs.make_train, [s for s in seeds for _ in range(repeats)][:8], generation_seed=0)
    for i, t in enumerate(trajs):
        t.rewards = [float(i % 3 == 0)]
    batch = pad_trajectories(trajs, agent.pad_id)
    batch.update(agent.advantages(trajs, torch.tensor([t.total_reward for t in trajs]), min(repeats, 4)))
    batch.pop("keep", None)
    with torch.no_grad():
        logp = agent.logprobs(batch)  # temperature 1: what the weight compares with vLLM's
        if beta:
            batch["ref_logprobs"] = logp - 0.1  # a reference the KL term sees in both losses alike
    mask = batch["loss_mask"].bool().clone()
    mask[:, 0] = False
    gen = torch.Generator().manual_seed(0)
    w = torch.exp(torch.empty(logp.shape).uniform_(-1.0, 1.0, generator=gen))  # 0.37 .. 2.7
    weighted = dict(batch, sampling_logprobs=torch.where(mask, logp - torch.log(w), torch.nan))
    adv = batch["advantages"]
    adv = adv.unsqueeze(-1).expand(logp.shape) if adv.dim() == 1 else adv
    scaled = dict(batch, advantages=adv * torch.where(mask, w.clamp(max=2.0), torch.ones_like(w)))
    results = []
    for b in (weighted, scaled):
        for p in agent.trainable_parameters():  # (LLMPPO's value head too)
            p.grad = None
        loss, stats = agent.loss(b)
        loss.backward()
        grads = [p.grad.clone() for p in agent.trainable_parameters() if p.grad is not None]
        results.append((loss.detach(), grads, stats))
    (loss_w, grads_w, stats_w), (loss_s, grads_s, _) = results
    torch.testing.assert_close(loss_w, loss_s, rtol=1e-5, atol=1e-6)
    assert grads_w and len(grads_w) == len(grads_s)
    for a, b in zip(grads_w, grads_s, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert stats_w["vllm_is_ratio"] == pytest.approx(float(w.clamp(max=2.0)[mask].mean()), rel=1e-5)
    assert stats_w["vllm_is_clamped"] == pytest.approx(float((w[mask] >= 2.0).float().mean()), rel=1e-5)


def test_at_another_temperature_the_weight_compares_the_models_own_distributions(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """vLLM's sampled-token log-probs are of the model's own distribution (before its temperature): the
    update compares them with the policy's at temperature 1, from one more pass without gradient."""
    agent, envs = build(manifest(tiny_model_dir, tmp_path, "CISPO", temperature=0.7, use_vllm=False))
    trajs = agent.rollout(envs.make_train, [0, 0, 0, 0], generation_seed=0)
    batch = pad_trajectories(trajs, agent.pad_id)
    with torch.no_grad():
        at_one = agent.logprobs(batch, temperature=1.0)
        at_t = agent.logprobs(batch, temperature=0.7)
    batch["sampling_logprobs"] = at_one - 0.25  # the engine gave each token 0.25 nats less
    agent._importance_log_ratio(batch)
    mask = batch["loss_mask"].bool().clone()
    mask[:, 0] = False
    torch.testing.assert_close(batch["is_log_ratio"][mask], torch.full((int(mask.sum()),), 0.25), rtol=0, atol=1e-5)
    assert float((at_t - at_one)[mask].abs().max()) > 0.05  # the tempered log-probs are another thing


def test_sampling_logprobs_land_on_each_turns_policy_tokens(tiny_model_dir: Path) -> None:
    import importlib.util as iu

    from transformers import AutoTokenizer

    spec = iu.spec_from_file_location("two_turn_env", EXAMPLES / "two_turn_env.py")
    assert spec is not None and spec.loader is not None
    module = iu.module_from_spec(spec)
    spec.loader.exec_module(module)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    h = RolloutHarness(module.TwoTurnEnv(), tokenizer, max_turns=2, max_model_len=256, max_output_tokens=4)
    h.reset(seed=0)
    words = tokenizer("eight eight eight", add_special_tokens=False)["input_ids"]
    h.step(words[:3])
    h.reply(words[:2], logprobs=[-0.5, -0.25, -9.0])  # one more log-prob than tokens kept: ignored
    trajectory = h.trajectory()
    # The first reply came without log-probs (NaN: weight 1), the second with.
    assert len(trajectory.sampling_logprobs) == 5
    assert all(math.isnan(x) for x in trajectory.sampling_logprobs[:3])
    assert trajectory.sampling_logprobs[3:] == [-0.5, -0.25]
    batch = pad_trajectories([trajectory, trajectory], 0)
    where = batch["loss_mask"][0].bool()
    got = batch["sampling_logprobs"][0][where]
    assert torch.isnan(got[:3]).all() and got[3:].tolist() == [-0.5, -0.25]
    assert torch.isnan(batch["sampling_logprobs"][0][~where]).all()


def test_the_fields_are_refused_where_no_vllm_engine_samples(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = manifest(tiny_model_dir, tmp_path, use_vllm=False, vllm_importance_sampling_correction=True)
    (found,) = problems_of(data)
    assert "vllm_importance_sampling_correction" in found and "set use_vllm: true" in found, found
    (found,) = problems_of(manifest(tiny_model_dir, tmp_path, vllm_importance_sampling_correction=True))
    assert "vllm_importance_sampling_correction" in found, found  # use_vllm unset: HF generate here
    (found,) = problems_of(manifest(tiny_model_dir, tmp_path, vllm_importance_sampling_cap=3.0))
    assert "vllm_importance_sampling_cap" in found, found
    found = problems_of(manifest(tiny_model_dir, tmp_path, vllm_importance_sampling_cap=0.0))
    assert any("vllm_importance_sampling_cap" in p for p in found), found
    server = manifest(
        tiny_model_dir, tmp_path, vllm_config={"mode": "server"}, vllm_importance_sampling_correction=True
    )
    found = problems_of(server)
    assert any("not for mode: server" in p for p in found), found
    # Unset or false (AgileRL's manifests without vLLM): accepted, and nothing is weighted.
    for value in (None, False):
        agent, _ = build(manifest(tiny_model_dir, tmp_path, use_vllm=False, vllm_importance_sampling_correction=value))
        assert not agent.importance_sampling()


# --- the real engine -------------------------------------------------------------------------------

#: Largest |log p_policy - log p_vLLM| on a sampled token (float32 on both sides; as test_vllm_engine.py).
LOGPROB_TOLERANCE = 1e-3 if DEVICE == "cpu" else 2e-2


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from agilerl_plugin_llm.testing import build_tiny_model

    yield build_tiny_model(tmp_path_factory.mktemp("vllm-is") / "model", vllm=True)
    if HAS_VLLM:
        from agilerl_plugin_llm.rollout import generation

        generation.shutdown_engines()


@needs_vllm
@pytest.mark.vllm
def test_vllm_rollouts_carry_the_engines_logprobs_and_the_weight_is_one_where_they_agree(
    vllm_model_dir: Path, tmp_path: Path
) -> None:
    """Sampled at temperature 0.7, no top-k: each policy token carries vLLM's log-prob, which is the
    policy's at temperature 1 (not 0.7); the weight the update computes from them is 1 within float."""
    # vllm_importance_sampling_correction unset: AgileRL's default, on with the colocated engine.
    agent, envs = build(manifest(vllm_model_dir, tmp_path, "CISPO", use_vllm=True, temperature=0.7, top_k=0))
    assert agent.importance_sampling()
    trajs = agent.rollout(envs.make_train, [0, 0, 0, 0, 1, 1, 1, 1], generation_seed=0)
    batch = pad_trajectories(trajs, agent.pad_id)
    mask = batch["loss_mask"].bool().clone()
    mask[:, 0] = False
    sampled = batch["sampling_logprobs"][mask]
    assert sampled.numel() > 8 and bool(torch.isfinite(sampled).all())
    agent.model.eval()
    with torch.no_grad():
        at_one = agent.logprobs(agent.to_device(batch), temperature=1.0).cpu()[mask]
        at_t = agent.logprobs(agent.to_device(batch), temperature=0.7).cpu()[mask]
    gap = float((at_one - sampled).abs().max())
    print(f"{sampled.numel()} sampled tokens: max |log p_policy(T=1) - log p_vLLM| {gap:.2e}; "
          f"at T=0.7 it would be {float((at_t - sampled).abs().max()):.2e}")  # fmt: skip
    assert gap <= LOGPROB_TOLERANCE
    assert float((at_t - sampled).abs().max()) > 10 * LOGPROB_TOLERANCE
    agent._importance_log_ratio(batch)  # what the update does at temperature 0.7
    weight, stats = truncated_is_weight(batch["is_log_ratio"], mask.float(), 2.0)
    assert float((weight - 1.0).abs().max()) <= 2 * LOGPROB_TOLERANCE
    assert abs(stats["vllm_is_ratio"] - 1.0) <= 2 * LOGPROB_TOLERANCE and stats["vllm_is_clamped"] == 0.0


@needs_vllm
@pytest.mark.vllm
@pytest.mark.slow
def test_cispo_trains_with_the_correction_on_the_real_engine(
    vllm_model_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    """CISPO with the importance-sampling correction on the real engine, on "say eight". "say eight" answers every prompt alike, so this is a smoke test of the path, not learning
    evidence: the rise shows that the engine's rollouts train the policy and the engine follows the trained
    weights. Learning on a task whose answer depends on the prompt: test_learning_reverse.py (HF generation)."""
    data = manifest(vllm_model_dir, tmp_path / "run", "CISPO", use_vllm=True, beta=0.04,
                    vllm_importance_sampling_correction=True, vllm_importance_sampling_cap=2.0)  # fmt: skip
    code, out, err = run_cli("train", write_manifest(data))
    assert code == 0, out + err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    fitness = [float(r["fitness"]) for r in rows if "fitness" in r]
    ratios = [float(r["train/vllm_is_ratio"]) for r in rows if "train/vllm_is_ratio" in r]
    print(f"CISPO with the vLLM correction: held-out reward {fitness}, mean weights {ratios}")
    assert fitness[-1] >= fitness[0] + 0.5, fitness
    assert ratios and all(abs(r - 1.0) < 0.05 for r in ratios), ratios  # float32 on both sides: weights ~1
