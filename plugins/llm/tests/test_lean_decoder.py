"""The lean decoder pass (``agilerl_plugin_llm.lean_decoder``) computes what the model's own forward does,
bit for bit on the CPU: the same hidden states and gradients for each supported family (Llama; Qwen2
with q/k/v biases; Qwen3 with q/k norms), full weights and under LoRA, unpadded, right- and
left-padded, and continuing a KV cache (prefill, a shared prefix repeated over a group, one-token
decoding steps); asked for some positions only, without gradients, the same hidden states there
(within float error: SDPA over fewer queries tiles its sums differently). What
it does not implement goes through Hugging Face. The reference-policy switches (adapter off,
reference adapter) give PEFT's outputs and leave requires_grad as it was."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agilerl_plugin_llm import lean_decoder
from agilerl_plugin_llm.model import ACTOR, REFERENCE, reference_policy
from agilerl_plugin_llm.rollout.kv import new_cache, run_decoder


def _tiny(family: str) -> Any:
    import transformers

    common = {"vocab_size": 50, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
              "pad_token_id": 0, "initializer_range": 0.3, "attn_implementation": "sdpa"}  # fmt: skip
    if family == "llama":
        config: Any = transformers.LlamaConfig(**common)
        cls: Any = transformers.LlamaForCausalLM
    elif family == "qwen2":
        config, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    else:
        config, cls = transformers.Qwen3Config(**common, head_dim=8), transformers.Qwen3ForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = cls(config)
        if family == "qwen2":  # the q/k/v biases start at zero: make them matter
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    torch.nn.init.normal_(p, 0, 0.3)
    return model


def _lora(model: Any, *, reference: bool = False) -> Any:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        peft = get_peft_model(model, config, adapter_name=ACTOR)
        if reference:
            peft.add_adapter(REFERENCE, config)
            peft.set_adapter(ACTOR)
    return peft


def _decoder(model: Any) -> Any:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model


def _hf(decoder: Any, ids: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None) -> torch.Tensor:
    extra = {} if positions is None else {"position_ids": positions}
    return decoder(input_ids=ids, attention_mask=mask, use_cache=False, **extra).last_hidden_state  # type: ignore[no-any-return]


def _padded(left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = [9, 5, 7]
    ids = torch.zeros(3, 9, dtype=torch.long)
    mask = torch.zeros_like(ids)
    gen = torch.Generator().manual_seed(2)
    for i, n in enumerate(lengths):
        cols = slice(9 - n, 9) if left else slice(0, n)
        ids[i, cols] = torch.randint(1, 50, (n,), generator=gen)
        mask[i, cols] = 1
    return ids, mask


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_lean_pass_equals_the_model_values_and_gradients(family: str, lora: bool) -> None:
    model = _tiny(family)
    if lora:
        model = _lora(model)
    decoder = _decoder(model)
    assert lean_decoder.usable(decoder)
    params = [p for p in decoder.parameters() if p.requires_grad]
    right_ids, right_mask = _padded(left=False)
    left_ids, left_mask = _padded(left=True)
    positions = (left_mask.cumsum(-1) - 1).clamp(min=0)
    cases = [
        (right_ids, None, None, right_mask.bool()),  # right-padded: the causal pass, no mask
        (left_ids, left_mask, positions, left_mask.bool()),  # left-padded, positions counting real tokens
        (left_ids, left_mask, None, left_mask.bool()),  # left-padded, positions from 0
    ]
    for ids, mask, pos, real in cases:
        ours = lean_decoder.forward(decoder, ids, attention_mask=mask, position_ids=pos)
        theirs = _hf(decoder, ids, mask, pos)
        assert torch.equal(ours[real], theirs[real]), (family, lora)
        weight = torch.randn(ours.shape, generator=torch.Generator().manual_seed(3)) * real[..., None]
        g_ours = torch.autograd.grad((ours * weight).sum(), params)
        g_theirs = torch.autograd.grad((theirs * weight).sum(), params)
        for a, b in zip(g_ours, g_theirs, strict=True):
            assert torch.equal(a, b), (family, lora)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_kept_positions_are_the_models_hidden_states_there(family: str) -> None:
    """``keep``: the hidden states at those positions, as ``hidden[keep]``. Without gradients the last
    layer runs its queries and MLP there alone (the same values within float error); with them,
    everywhere (bit for bit the model's, gradients too: summed over the same rows as its backward)."""
    model = _lora(_tiny(family))
    decoder = _decoder(model)
    params = [p for p in decoder.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(4)
    for left in (False, True):
        ids, mask = _padded(left=left)
        keep = (torch.rand(ids.shape, generator=gen) < 0.5) & mask.bool()
        keep &= keep.cumsum(-1) <= 3  # at most 3 of 9 per row: the last layer takes the kept-positions path
        keep[1] = False  # a row with nothing kept
        assert 2 * int(keep.sum(-1).max()) <= ids.shape[1] and int(keep.sum()) >= 4
        pos = (mask.cumsum(-1) - 1).clamp(min=0) if left else None
        am = mask if left else None
        theirs = _hf(decoder, ids, am, pos)[keep]
        with torch.no_grad():  # SDPA over fewer queries may tile its sums differently: float error at most
            kept = lean_decoder.forward(decoder, ids, attention_mask=am, position_ids=pos, keep=keep)
        assert torch.allclose(kept, theirs, atol=1e-6)
        ours = lean_decoder.forward(decoder, ids, attention_mask=am, position_ids=pos, keep=keep)
        assert torch.equal(ours, theirs)
        weight = torch.randn(ours.shape, generator=gen)
        for a, b in zip(torch.autograd.grad((ours * weight).sum(), params),
                        torch.autograd.grad((theirs * weight).sum(), params), strict=True):  # fmt: skip
            assert torch.equal(a, b)
    with torch.no_grad():  # continuing a cache: the last position of each prompt, as sampling reads it
        cache = lean_decoder.LeanCache()
        ids, mask = _padded(left=True)
        last = torch.zeros_like(mask, dtype=torch.bool)
        last[:, -1] = True
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        ours = lean_decoder.forward(decoder, ids, attention_mask=mask, position_ids=pos, cache=cache, keep=last)
        # One query per row takes SDPA's one-query kernel, whose sums round differently: equal within float error.
        assert torch.allclose(ours, _hf(decoder, ids, mask, pos)[:, -1], atol=1e-6)
        assert cache.get_seq_length() == ids.shape[1]  # every position's keys and values are cached


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_lean_cache_continues_like_the_models_cache(family: str) -> None:
    """Prefill of left-padded prompts, their cache repeated over groups, a multi-token suffix, then
    one-token steps: every hidden state as with Hugging Face's own cache."""
    model = _lora(_tiny(family))
    decoder = _decoder(model)
    prompt_ids, prompt_mask = _padded(left=True)
    rows = torch.tensor([0, 0, 1, 2, 2])
    outs: dict[str, list[torch.Tensor]] = {}
    for kind in ("lean", "hf"):
        cache: Any = new_cache(decoder)
        if kind == "hf":
            from transformers import DynamicCache

            cache = DynamicCache(config=decoder.config)
        assert isinstance(cache, lean_decoder.LeanCache) == (kind == "lean")
        with torch.no_grad():
            seen = [run_decoder(decoder, prompt_ids, prompt_mask, (prompt_mask.cumsum(-1) - 1).clamp(min=0), cache)]
            cache.reorder_cache(rows)
            mask = prompt_mask[rows]
            nxt = mask.sum(-1)
            suffix = torch.tensor([[3, 4, 0], [5, 6, 7], [8, 0, 0], [9, 10, 11], [12, 13, 0]])
            valid = (suffix > 0).long()
            mask = torch.cat([mask, valid], dim=1)
            seen.append(
                run_decoder(decoder, suffix, mask, nxt[:, None] + torch.arange(3)[None], cache) * valid[..., None]
            )
            nxt = nxt + 3
            for step in range(3):
                token = torch.full((5, 1), 20 + step)
                mask = torch.cat([mask, torch.ones(5, 1, dtype=torch.long)], dim=1)
                seen.append(run_decoder(decoder, token, mask, nxt[:, None], cache))
                nxt = nxt + 1
        outs[kind] = seen
    real = prompt_mask.bool()
    assert torch.equal(outs["lean"][0][real], outs["hf"][0][real])
    for ours, theirs in zip(outs["lean"][1:], outs["hf"][1:], strict=True):
        assert torch.equal(ours, theirs)


def test_what_the_lean_pass_does_not_implement_runs_through_hugging_face() -> None:
    model = _tiny("llama")
    decoder = _decoder(model)
    assert lean_decoder.usable(decoder)
    decoder.gradient_checkpointing = True
    assert not lean_decoder.usable(decoder)
    decoder.gradient_checkpointing = False
    decoder.config._attn_implementation = "eager"
    assert not lean_decoder.usable(decoder)
    decoder.config._attn_implementation = "sdpa"
    hooked = _decoder(_tiny("llama"))
    hooked.layers[0].mlp.register_forward_hook(lambda *a: None)
    assert not lean_decoder.usable(hooked)
    import transformers

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=1, n_head=2))
    assert not lean_decoder.usable(gpt2.transformer)


@pytest.mark.parametrize("separate", [False, True], ids=["adapter-off", "reference-adapter"])
def test_reference_switch_gives_peft_outputs_and_keeps_requires_grad(separate: bool) -> None:
    model = _lora(_tiny("llama"), reference=separate)
    with torch.no_grad():  # the reference adapter differs from the actor
        for name, p in model.named_parameters():
            if f".{REFERENCE}." in name:
                p.mul_(-2.0)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    ids, mask = _padded(left=False)
    with reference_policy(model) as ref:
        ours = ref(input_ids=ids, attention_mask=mask).logits
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable
    if separate:
        model.set_adapter(REFERENCE)
        theirs = model(input_ids=ids, attention_mask=mask).logits.detach()
        model.set_adapter(ACTOR)
    else:
        with model.disable_adapter():
            theirs = model(input_ids=ids, attention_mask=mask).logits.detach()
    actor = model(input_ids=ids, attention_mask=mask).logits.detach()
    real = mask.bool()
    assert torch.allclose(ours[real], theirs[real], atol=1e-5)
    assert not torch.allclose(ours[real], actor[real], atol=1e-3)  # the switch did switch
    with reference_policy(model) as ref:
        again = ref(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(again, ours)  # and switched back in between
