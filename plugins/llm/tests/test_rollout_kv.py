"""The shared-prefix (GRPO group) passes are exact: same log-probs and gradients as whole-sequence
forward passes, same tokens as ``model.generate``; with full weights and under LoRA."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl_plugin_llm.algorithms.base import sequence_logprobs
from agilerl_plugin_llm.model import load_model, load_tokenizer
from agilerl_plugin_llm.rollout.generation import HFGenerateBackend, SamplingConfig
from agilerl_plugin_llm.rollout.harness import stop_token_ids
from agilerl_plugin_llm.rollout.kv import process_logits, shared_prefix_logprobs

LORA = {"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0}


@pytest.fixture(scope="module", params=[None, LORA], ids=["full", "lora"])
def model_and_tokenizer(request: pytest.FixtureRequest, tiny_model_dir: Path) -> tuple[Any, Any]:
    model = load_model(tiny_model_dir, lora_config=request.param)
    if request.param:
        with torch.no_grad():  # a trained-looking adapter, so LoRA actually changes the outputs
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.3, generator=torch.Generator().manual_seed(0))
    return model, load_tokenizer(tiny_model_dir)


def test_shared_prefix_logprobs_and_gradients_equal_whole_sequences(model_and_tokenizer: tuple[Any, Any]) -> None:
    model, tok = model_and_tokenizer
    p1 = tok("what is the answer", add_special_tokens=False)["input_ids"]
    p2 = tok("hi", add_special_tokens=False)["input_ids"]
    rows = [
        ([*p1, 10, 11, 12], len(p1)),
        ([*p1, 13, 14], len(p1)),
        ([*p2, 15, 16, 17, 18], len(p2)),
        ([*p2, 19], len(p2)),
    ]
    width = max(len(r) for r, _ in rows)
    ids = torch.zeros(4, width, dtype=torch.long)
    attention = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i, (seq, plen) in enumerate(rows):
        ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        mask[i, plen : len(seq)] = 1
    mask[0, -2] = 0  # an env token inside a completion: not scored
    plens = torch.tensor([p for _, p in rows])
    groups = torch.tensor([0, 0, 2, 2])
    whole = sequence_logprobs(model, ids, attention, mask, temperature=0.7)
    shared = shared_prefix_logprobs(model, ids, attention, mask, plens, groups, temperature=0.7)
    assert torch.allclose(whole, shared, atol=1e-4)
    assert torch.all(shared[mask == 0] == 0) and torch.all(shared[mask == 1] < 0)
    params = [p for p in model.parameters() if p.requires_grad]
    g_whole = torch.autograd.grad(whole.sum(), params)
    g_shared = torch.autograd.grad(shared.sum(), params)
    for a, b in zip(g_whole, g_shared, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_cached_sampling_matches_model_generate(model_and_tokenizer: tuple[Any, Any], penalty: float) -> None:
    model, tok = model_and_tokenizer
    stops = stop_token_ids(tok)
    p1 = tok("what is the", add_special_tokens=False)["input_ids"]
    p2 = tok("say two", add_special_tokens=False)["input_ids"]
    prompts, budgets = [p1, p1, p2], [6, 3, 7]
    greedy = SamplingConfig(temperature=0.0, repetition_penalty=penalty)
    cached = HFGenerateBackend(model, tok, stop_ids=stops).generate(prompts, max_new_tokens=budgets, sampling=greedy)
    generate = HFGenerateBackend(model, tok, stop_ids=stops, engine="generate").generate(
        prompts, max_new_tokens=budgets, sampling=greedy
    )
    assert cached == generate
    assert [len(c) for c in cached] == [6, 3, 7] or any(c[-1] in stops for c in cached)


def test_sampling_filters() -> None:
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, -1.0]])
    keep = lambda out: (out > torch.finfo(out.dtype).min).squeeze(0).tolist()  # noqa: E731
    kw: dict[str, Any] = {
        "temperature": 1.0,
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "seen": None,
    }
    assert keep(process_logits(logits, **{**kw, "top_k": 2})) == [True, True, False, False, False]
    # top_p 0.7: 4.0 has ~64% of the mass, so 3.0 is needed to reach 0.7; nothing else.
    assert keep(process_logits(logits, **{**kw, "top_p": 0.7})) == [True, True, False, False, False]
    assert keep(process_logits(logits, **{**kw, "min_p": 0.3})) == [True, True, False, False, False]
    seen = torch.tensor([[True, False, False, False, True]])
    out = process_logits(logits, **{**kw, "repetition_penalty": 2.0, "seen": seen})
    assert out.tolist() == [[2.0, 3.0, 2.0, 1.0, -2.0]]
    assert torch.allclose(process_logits(logits, **{**kw, "temperature": 0.5}), logits * 2)
