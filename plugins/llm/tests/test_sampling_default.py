"""Rollouts sample from the policy's full distribution by default (``top_k: 0``), as TRL's GRPOConfig does.

With ``top_k: 50`` (our default until issue 37) the rollout drew from the 50 most likely tokens while
the loss scores each sampled token under the full softmax: on the reverse task that cost GRPO about
a third of its held-out gain against TRL's GRPOTrainer (``benchmarks/llm/ablate_learning.py``,
docs/llm.md). These tests pin the default and show what it changes: the tiny model's near-flat
distribution puts sampled tokens outside its top 50 at the default, never at ``top_k: 50``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agilerl_plugin_llm.model import load_model, load_tokenizer
from agilerl_plugin_llm.rollout.generation import HFGenerateBackend, SamplingConfig
from agilerl_plugin_llm.rollout.harness import stop_token_ids
from agilerl_plugin_llm.rollout.specs import GRPOSpec, LLMPPOSpec, LLMREINFORCESpec, RLOOSpec


@pytest.mark.parametrize("spec_type", [GRPOSpec, RLOOSpec, LLMREINFORCESpec, LLMPPOSpec])
def test_rollout_specs_sample_the_full_distribution_by_default(spec_type: type) -> None:
    sampling = SamplingConfig.from_spec(spec_type())
    assert (sampling.top_k, sampling.top_p, sampling.min_p) == (0, 1.0, 0.0)


def test_default_matches_trl_grpo_config() -> None:
    trl = pytest.importorskip("trl")
    fields = trl.GRPOConfig.__dataclass_fields__
    assert GRPOSpec().top_k == fields["top_k"].default
    assert GRPOSpec().top_p == fields["top_p"].default


def _ranks_of_sampled_tokens(model_dir: Path, top_k: int) -> torch.Tensor:
    """Rank (0 = most likely) under the full distribution of every token sampled at ``top_k``."""
    torch.manual_seed(0)
    model, tok = load_model(model_dir), load_tokenizer(model_dir)
    prompt = tok("what is the answer", add_special_tokens=False)["input_ids"]
    backend = HFGenerateBackend(model, tok, stop_ids=stop_token_ids(tok))
    sampling = SamplingConfig.from_spec(GRPOSpec(top_k=top_k, temperature=1.0))
    replies = backend.generate([prompt] * 32, max_new_tokens=[1] * 32, sampling=sampling, seed=0)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    order = logits.argsort(descending=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    return rank[torch.tensor([r[0] for r in replies])]


def test_default_samples_beyond_the_top_50_and_top_k_50_never_does(tiny_model_dir: Path) -> None:
    assert int(_ranks_of_sampled_tokens(tiny_model_dir, 0).max()) >= 50
    assert int(_ranks_of_sampled_tokens(tiny_model_dir, 50).max()) < 50
