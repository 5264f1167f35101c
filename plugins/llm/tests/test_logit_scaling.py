"""Models whose forward scales ``lm_head``'s output (Granite ``logits_scaling``, Cohere ``logit_scale``):
the plugin's memory-saving log-prob paths (decoder + ``lm_head`` at the selected positions, and the
shared-prefix KV path) give the same log-probs as the model's own forward."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from agilerl_plugin_llm.algorithms.base import sequence_logprobs
from agilerl_plugin_llm.rollout.kv import shared_prefix_logprobs


def tiny(kind: str) -> Any:
    from transformers import CohereConfig, CohereForCausalLM, GraniteConfig, GraniteForCausalLM

    common = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
              "initializer_range": 0.3}  # fmt: skip
    torch.manual_seed(0)
    if kind == "granite":
        return GraniteForCausalLM(GraniteConfig(logits_scaling=4.0, **common)).eval()
    return CohereForCausalLM(CohereConfig(logit_scale=0.25, **common)).eval()


def reference_logprobs(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits[:, :-1].float()
    lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    out = torch.zeros(ids.shape)
    out[:, 1:] = lp * mask[:, 1:]
    return out


@pytest.mark.parametrize("kind", ["granite", "cohere"])
def test_scaled_logit_models_get_the_forward_s_log_probs(kind: str) -> None:
    model = tiny(kind)
    ids = torch.randint(0, 64, (2, 10))
    attention = torch.ones_like(ids)
    mask = torch.zeros_like(ids)
    mask[:, 5:] = 1
    expected = reference_logprobs(model, ids, mask)
    with torch.no_grad():
        got = sequence_logprobs(model, ids, attention, mask)
        # Without the scale the two disagree: the check has teeth.
        assert not torch.allclose(F.log_softmax(model.lm_head(model.model(input_ids=ids).last_hidden_state), -1)[:, :-1]
                                  .gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1) * mask[:, 1:], expected[:, 1:],
                                  atol=1e-3)  # fmt: skip
    assert torch.allclose(got, expected, atol=1e-5)
    # The shared-prefix path (a GRPO group sharing its prompt): same log-probs.
    group = torch.cat([ids[:1, :5].repeat(2, 1), ids[:, 5:]], dim=1)
    with torch.no_grad():
        shared = shared_prefix_logprobs(model, group, attention, mask, torch.tensor([5, 5]), torch.tensor([0, 0]))
    assert torch.allclose(shared, reference_logprobs(model, group, mask), atol=1e-5)
