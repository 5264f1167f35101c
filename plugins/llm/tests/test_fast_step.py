"""``fast_step`` is torch's clip and AdamW step bit for bit, and an SFT step through the fast paths
(``fast_step``, the lean decoder's one-op LoRA) is the plain Hugging Face + torch step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from agilerl_plugin_llm import fast_step

DATA = Path(__file__).resolve().parents[3] / "examples" / "data" / "llm"


def _lora_like(seed: int) -> list[torch.nn.Parameter]:
    """A LoRA adapter's shapes: A and B matrices of two layers."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [(4, 64), (128, 4), (4, 64), (64, 4), (4, 128), (64, 4)]
    return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]


def _grads(params: list[torch.nn.Parameter], seed: int, scale: float) -> None:
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen) * scale


def test_clip_grad_norm_is_torchs_in_both_regimes() -> None:
    for scale in (1e-3, 10.0):  # under the threshold (untouched) and over it (scaled)
        ours, theirs = _lora_like(0), _lora_like(0)
        _grads(ours, 1, scale)
        _grads(theirs, 1, scale)
        norm = fast_step.clip_grad_norm(ours, 1.0)
        expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
        assert torch.equal(norm, expected)
        for a, b in zip(ours, theirs, strict=True):
            assert a.grad is not None and b.grad is not None
            assert torch.equal(a.grad, b.grad)
    assert float(expected) > 1.0  # the second regime did clip


def _twin_steps(steps: int, skip_at: int | None = None, **adamw: Any) -> tuple[list[Any], list[Any], Any, Any]:
    """Twin parameter sets with the same gradients: one stepped by ``fast_step.adamw_step``, the other
    by torch's ``AdamW.step`` (``skip_at``: the step where one parameter has no gradient)."""
    ours, theirs = _lora_like(0), _lora_like(0)
    opt_ours, opt_theirs = torch.optim.AdamW(ours, **adamw), torch.optim.AdamW(theirs, **adamw)
    for step in range(steps):
        _grads(ours, step, 0.1)
        _grads(theirs, step, 0.1)
        if step == skip_at:
            ours[2].grad = theirs[2].grad = None
        fast_step.adamw_step(opt_ours)
        opt_theirs.step()
    return ours, theirs, opt_ours, opt_theirs


def test_adamw_step_is_torchs_step_and_state() -> None:
    # At step 3 a parameter without a gradient is skipped, by both.
    ours, theirs, opt_ours, opt_theirs = _twin_steps(5, skip_at=3, lr=3e-3, fused=True)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    mine, torchs = opt_ours.state_dict(), opt_theirs.state_dict()
    for i in mine["state"]:
        for key, value in torchs["state"][i].items():
            assert torch.equal(mine["state"][i][key], value), (i, key)
    assert float(mine["state"][2]["step"]) == 4.0  # the skipped step did not count


def test_adamw_step_leaves_hooked_or_unfused_optimizers_to_torch() -> None:
    params = _lora_like(0)
    calls: list[int] = []
    opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
    opt.register_step_post_hook(lambda *args: calls.append(1))
    _grads(params, 0, 0.1)
    fast_step.adamw_step(opt)
    fast_step.adamw_step(opt)
    assert calls == [1, 1]
    plain, reference, _, _ = _twin_steps(2, lr=1e-3, foreach=False)  # unfused: torch's own step
    assert all(torch.equal(a, b) for a, b in zip(plain, reference, strict=True))


def _sft_agent(model_dir: Path) -> tuple[Any, Any]:
    from agilerl.builders import AlgorithmBuildRuntime
    from agilerl_plugin_llm.builder import LLMBuilder
    from agilerl_plugin_llm.dataset.env import make_llm_env
    from agilerl_plugin_llm.dataset.specs import SFTSpec
    from agilerl_plugin_llm.model import load_tokenizer
    from agilerl_plugin_llm.specs import LLMEnvSpec

    tokenizer = load_tokenizer(model_dir)
    spec = SFTSpec(pretrained_model_name_or_path=str(model_dir), max_model_len=128, batch_size=8, lr=3e-3,
                   gradient_checkpointing=False, max_grad_norm=1.0,
                   lora_config={"lora_r": 16, "lora_alpha": 24, "lora_dropout": 0.0, "target_modules": "all-linear"})  # fmt: skip
    env_spec = LLMEnvSpec(env_type="dataset", objective="sft", dataset_path=str(DATA / "sft_tiny.jsonl"),
                          train_test_split=1.0)  # fmt: skip
    env = make_llm_env(env_spec, tokenizer, data_batch_size_per_gpu=8, max_context_length=128, seed=0)
    return LLMBuilder.build(spec, tokenizer=tokenizer, runtime=AlgorithmBuildRuntime(seed=0)), env


def test_sft_step_is_the_plain_hugging_face_and_torch_step(tiny_model_dir: Path) -> None:
    """Our SFT iterations (lean decoder, response-only logits, ``fast_step``) against the textbook step:
    the model's own forward, cross-entropy over the shifted response labels, torch's clip and AdamW."""
    from agilerl_plugin_llm.algorithms.base import trim_padding

    agent, env = _sft_agent(tiny_model_dir)
    twin = agent.clone()  # the same weights (LoRA init included) and optimizer settings
    params = twin.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=3e-3, fused=True)  # the builder's optimizer, fresh
    start = [p.detach().clone() for p in params]
    for _ in range(3):
        batch = env.next_batch()
        stats = agent.learn(batch)
        plain = trim_padding(batch)
        logits = twin.model(input_ids=plain["input_ids"], attention_mask=plain["attention_mask"]).logits
        labels = plain["loss_mask"][:, 1:].bool()
        loss = F.cross_entropy(logits[:, :-1][labels], plain["input_ids"][:, 1:][labels])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        assert abs(stats["loss"] - float(loss.detach())) <= 1e-5 * float(loss.detach())
        assert abs(stats["grad_norm"] - float(norm)) <= 1e-4 * float(norm)
    ours = agent.trainable_parameters()
    assert any(not torch.equal(a, b) for a, b in zip(start, params, strict=True))  # the steps moved them
    # Adam divides by the root of the squared-gradient average: on an element whose gradient is near zero,
    # float rounding becomes a visible fraction of a step. Within 1% of one step (lr) of each other.
    for a, b in zip(ours, params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=3e-5)
