"""Shared-prefix computation with a KV cache: the GRPO group trick, for generation and for the loss.

The ``group_size`` completions of one GRPO prompt share every token of the prompt. Running the
prompt once per group and repeating its key/value cache across the group's rows (instead of once
per row) cuts the prompt's share of the work by ``group_size``, in sampling and in the training
forward pass alike. Gradients flow through the repeated cache, so the loss and its gradient are
exactly those of the plain forward pass over whole sequences (tested against it).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from agilerl_plugin_llm import lean_decoder
from agilerl_plugin_llm import model as llm_model
from agilerl_plugin_llm.algorithms.base import scale_logits
from agilerl_plugin_llm.logprobs import token_logprobs


def decoder_and_head(model: Any) -> tuple[Any, Any]:
    """The transformer body and ``lm_head`` (LoRA layers live inside them, so adapters apply)."""
    base = model.get_base_model() if llm_model.is_peft(model) else model
    decoder, head = getattr(base, "model", None), getattr(base, "lm_head", None)
    if decoder is None or head is None:
        raise TypeError(f"{type(base).__name__} exposes no .model/.lm_head; shared-prefix passes need a decoder LM")

    def scaled_head(hidden: torch.Tensor) -> torch.Tensor:
        # The model's own logit scaling (Granite, Cohere), which calling lm_head alone would skip.
        return scale_logits(base, head(hidden))

    return decoder, scaled_head


def supports_shared_prefix(model: Any) -> bool:
    """Whether the model is a decoder LM whose body takes a KV cache (and is not checkpointing)."""
    try:
        decoder, _ = decoder_and_head(model)
    except TypeError:
        return False
    if getattr(model, "agilerl_fsdp", False):
        return False  # FSDP gathers weights in the root's forward: generate through it
    if getattr(decoder, "gradient_checkpointing", False):
        return False  # HF turns the cache off under gradient checkpointing
    config = getattr(decoder, "config", None)
    if getattr(config, "final_logit_softcapping", None):
        return False
    return cache_argument(decoder) is not None


_CACHE_ARGUMENT: dict[type, str | None] = {}


def cache_argument(decoder: Any) -> str | None:
    # Per class: inspecting the signature costs more than a small model's decoding step.
    kind = type(decoder)
    if kind in _CACHE_ARGUMENT and "forward" not in vars(decoder):  # a hook may have replaced this one's forward
        return _CACHE_ARGUMENT[kind]
    params = inspect.signature(decoder.forward).parameters
    name = next((n for n in ("cache", "past_key_values") if n in params), None)
    if "forward" not in vars(decoder):
        _CACHE_ARGUMENT[kind] = name
    return name


def new_cache(decoder: Any) -> Any:
    if lean_decoder.usable(decoder):  # the lean pass keeps its own (same layout, no Cache machinery)
        return lean_decoder.LeanCache()
    from transformers import DynamicCache

    try:
        return DynamicCache(config=decoder.config)
    except TypeError:  # older transformers
        return DynamicCache()


def run_decoder(
    decoder: Any, ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, cache: Any,
    *, last_only: bool = False,
) -> torch.Tensor:  # fmt: skip
    """Hidden states of ``ids`` continuing ``cache`` (which is updated in place); ``last_only``: the last
    position's alone, ``[B, hidden]`` (sampling: without gradients the lean pass then runs its last
    layer's queries there alone)."""
    if isinstance(cache, lean_decoder.LeanCache):
        keep = None
        if last_only:
            keep = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
            keep[:, -1] = True
        return lean_decoder.forward(decoder, ids, attention_mask=attention, position_ids=positions, cache=cache,
                                    keep=keep)  # fmt: skip
    kwargs = {cache_argument(decoder) or "past_key_values": cache}
    out = decoder(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True, **kwargs)
    return out.last_hidden_state[:, -1] if last_only else out.last_hidden_state  # type: ignore[no-any-return]


def has_dropout(model: Any) -> bool:
    """Whether train/eval mode changes the model's outputs (active dropout anywhere)."""
    config = getattr(model, "config", None)
    if float(getattr(config, "attention_dropout", 0.0) or 0.0) > 0:
        return True
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def left_pad(rows: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long, device=device)
            mask[i, width - len(r) :] = 1
    return ids, mask


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded mask (pads get 0; they are masked out anyway)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


# --------------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------------


def process_logits(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_k: int,
    top_p: float,
    min_p: float,
    repetition_penalty: float,
    seen: torch.Tensor | None,
) -> torch.Tensor:
    """Logits after repetition penalty, temperature, top-k, top-p and min-p (as HF's processors)."""
    logits = logits.float()
    if repetition_penalty != 1.0 and seen is not None:
        penalised = torch.where(logits < 0, logits * repetition_penalty, logits / repetition_penalty)
        logits = torch.where(seen, penalised, logits)
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    neg = torch.finfo(logits.dtype).min
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, neg)
    if 0.0 < top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cum - sorted_logits.softmax(-1) > top_p  # keep the smallest set reaching top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, neg)
    if min_p > 0.0:
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, neg)
    return logits


@torch.no_grad()
def sample_with_shared_prefill(
    model: Any,
    prompts: list[list[int]],
    budgets: list[int],
    *,
    stop_ids: list[int],
    pad_id: int,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    repetition_penalty: float = 1.0,
    min_new_tokens: int = 0,
) -> list[list[int]]:
    """Autoregressive sampling with a KV cache; identical prompts are prefilled once.

    Returns each row's new tokens, cut after its first stop token and at its budget.
    """
    decoder, head = decoder_and_head(model)
    device = next(model.parameters()).device
    keys = [tuple(p) for p in prompts]
    unique = list(dict.fromkeys(keys))
    rows = torch.tensor([unique.index(k) for k in keys] if len(unique) < len(keys) else range(len(keys)), device=device)
    ids, mask = left_pad([list(u) for u in unique], pad_id, device)
    cache = new_cache(decoder)
    logits = head(run_decoder(decoder, ids, mask, positions_of(mask), cache, last_only=True))[rows]
    if len(unique) < len(keys):
        cache.reorder_cache(rows)
    mask = mask[rows]
    next_pos = positions_of(mask)[:, -1] + 1
    n = len(prompts)
    vocab = logits.shape[-1]
    seen = None
    if repetition_penalty != 1.0:
        seen = torch.zeros((n, vocab), dtype=torch.bool, device=device)
        for i, p in enumerate(prompts):
            seen[i, [t for t in p if t < vocab]] = True
    stops = torch.tensor(stop_ids, device=device)
    limit = torch.tensor(budgets, device=device)
    done = limit <= 0
    out: list[torch.Tensor] = []
    for step in range(max(budgets)):
        scores = process_logits(
            logits, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
            repetition_penalty=repetition_penalty, seen=seen,
        )  # fmt: skip
        if step < min_new_tokens:
            scores[:, stops] = torch.finfo(scores.dtype).min
        if temperature > 0:
            # Exponential race (= sampling from the softmax), cheaper than torch.multinomial.
            token = (scores.softmax(-1) / torch.empty_like(scores).exponential_(1.0)).argmax(-1)
        else:
            token = scores.argmax(-1)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        out.append(token)
        done = done | torch.isin(token, stops) | (step + 1 >= limit)
        if bool(done.all()):
            break
        if seen is not None:
            seen[torch.arange(n, device=device), token] = True
        mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], dim=1)
        hidden = run_decoder(decoder, token[:, None], mask, next_pos[:, None], cache)
        next_pos = next_pos + 1
        logits = head(hidden[:, -1])
    tokens = torch.stack(out, dim=1).tolist() if out else [[] for _ in prompts]
    stop = set(stop_ids)
    result = []
    for row, budget in zip(tokens, budgets, strict=True):
        cut: list[int] = []
        for tok in row[:budget]:
            cut.append(tok)
            if tok in stop:
                break
        result.append(cut)
    return result


# --------------------------------------------------------------------------------------------------
# Log-probs for the loss
# --------------------------------------------------------------------------------------------------


def shared_prefix_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    prefix_len: torch.Tensor,
    group_id: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """Per-token log-probs of ``loss_mask`` tokens (``[B, T]``, zeros elsewhere), like
    :func:`agilerl_plugin_llm.algorithms.base.sequence_logprobs`, but each group's common prefix
    (rows with equal ``group_id`` share their first ``prefix_len`` tokens) runs once.

    ``input_ids`` is right-padded; every row's selected tokens lie after its prefix.
    """
    decoder, head = decoder_and_head(model)
    device = input_ids.device
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=device)
    lengths = attention_mask.sum(dim=1)
    groups, inverse = torch.unique(group_id, return_inverse=True)
    first: dict[int, int] = {}
    for row, g in enumerate(inverse.tolist()):
        first.setdefault(g, row)
    plen = prefix_len.long()
    prefixes = [input_ids[first[g], : int(plen[first[g]])].tolist() for g in range(len(groups))]
    p_ids, p_mask = left_pad(prefixes, 0, device)
    cache = new_cache(decoder)
    # The prefix's last hidden state predicts each row's first token after it (every position runs: a
    # reference's log-probs must round as the policy's, else its KL gradient is float noise, not 0).
    last = run_decoder(decoder, p_ids, p_mask, positions_of(p_mask), cache)[:, -1][inverse]
    if len(groups) < len(group_id):
        cache.reorder_cache(inverse)
    suffix_len = lengths - plen
    width = max(1, int(suffix_len.max()))
    cols = torch.arange(width, device=device)
    src = (plen[:, None] + cols[None, :]).clamp(max=input_ids.shape[1] - 1)
    valid = cols[None, :] < suffix_len[:, None]
    s_ids = torch.where(valid, input_ids.gather(1, src), torch.zeros_like(src))
    s_loss = valid & loss_mask.gather(1, src).bool()
    full_mask = torch.cat([p_mask[inverse], valid.long()], dim=1)
    hidden = run_decoder(decoder, s_ids, full_mask, plen[:, None] + cols[None, :], cache)
    # Hidden state predicting suffix token j: the prefix's last for j = 0, else suffix position j - 1.
    predict = torch.cat([last[:, None], hidden[:, :-1]], dim=1)
    logp = token_logprobs(predict[s_loss], head, s_ids[s_loss], temperature=temperature, chunk_rows=chunk_rows)
    out[torch.nonzero(s_loss, as_tuple=True)[0], src[s_loss]] = logp
    return out


__all__ = ["process_logits", "sample_with_shared_prefill", "shared_prefix_logprobs", "supports_shared_prefix"]
