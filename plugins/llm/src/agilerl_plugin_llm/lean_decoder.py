"""A lean forward pass for Llama-family decoders (Llama, Qwen2, Qwen3), for the log-prob and sampling paths.

Hugging Face's decoder forward pays, on every call, for machinery a training step does not use: the
mask factories, the output-capturing and kwarg-merging wrappers, slow config attribute lookups, the
``Cache`` object, and PEFT's per-layer LoRA dispatch. On a small model, or a decoding step of one
token per row, that overhead is most of the call. The lean pass runs the same weights through the
same operations in the same order (RMSNorm in float32, the model's own rotary module, SDPA with the
same grouped-query handling, the MLP with its own activation, LoRA as PEFT computes it), so on the
CPU its hidden states and their gradients are the model's own, bit for bit
(``tests/test_lean_decoder.py``: each family, full weights and LoRA, unpadded, left- and
right-padded, continuing a KV cache). Rotary embeddings take ``x * cos + roll(x) * sin'``, with the
sign of ``rotate_half`` moved onto ``sin``: the same products, in 4 ops rather than 7.

Sampling may ask for some positions only (``keep``: a prompt's last): without gradients the last
layer then runs its queries, attention output and MLP at those alone, which gives the same values
within float error (SDPA over fewer queries tiles its sums differently). Log-probs never do: a
reference's must round exactly as the policy's (at the first step a GRPO KL gradient is then exactly
0, not float noise that Adam scales up to full steps), and with gradients every position runs so
the weight gradients are summed as the model's own backward sums them.

Whatever it does not know goes through Hugging Face (:func:`usable` says no): other architectures,
attention implementations other than ``sdpa``, sliding-window layers, gradient checkpointing,
attention dropout while training, FSDP-sharded weights, forward hooks (accelerate offloading,
DeepSpeed). Within a supported model, a layer of an unknown kind (a quantised base, DoRA, an
adapter on the embeddings) is called as a module, so it runs its own forward.
"""

from __future__ import annotations

import weakref
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

#: Decoder classes (transformers) the lean pass implements, and whether their attention normalises q and k.
FAMILIES = {"LlamaModel": False, "Qwen2Model": False, "Qwen3Model": True}
_NORMS = {"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm"}
_STATIC: weakref.WeakKeyDictionary[nn.Module, _Facts] = weakref.WeakKeyDictionary()
_LORA_LINEAR: type | None = None


def _lora_linear_type() -> type:
    global _LORA_LINEAR
    if _LORA_LINEAR is None:
        try:
            from peft.tuners.lora.layer import Linear
        except ImportError:  # no peft: no LoRA layers to recognise

            class Linear:  # type: ignore[no-redef]
                pass

        _LORA_LINEAR = Linear
    return _LORA_LINEAR


def _static_ok(decoder: Any) -> bool:
    cls = type(decoder)
    if cls.__name__ not in FAMILIES or not cls.__module__.startswith("transformers.models."):
        return False
    config = getattr(decoder, "config", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and any(kind != "full_attention" for kind in layer_types):
        return False
    if layer_types is None and getattr(config, "use_sliding_window", False):
        return False
    for part in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(decoder, part):
            return False
    for layer in decoder.layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or not hasattr(layer, "post_attention_layernorm"):
            return False
        if not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling", "head_dim")):
            return False
        if not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            return False
        if FAMILIES[cls.__name__] and not (hasattr(attn, "q_norm") and hasattr(attn, "k_norm")):
            return False
    for module in decoder.modules():
        if module._forward_hooks or module._forward_pre_hooks or hasattr(module, "_hf_hook"):
            return False  # accelerate offloading, FSDP, DeepSpeed: their hooks must run
    return not any(type(p).__name__ == "DTensor" for p in decoder.parameters())


class _Facts:
    """What :func:`forward` reads from the config, read once per decoder (transformers' config lookups
    cost microseconds each)."""

    def __init__(self, decoder: Any) -> None:
        config = decoder.config
        self.ok = _static_ok(decoder)
        self.num_layers = int(getattr(config, "num_hidden_layers", len(getattr(decoder, "layers", []))))
        self.attention_dropout = float(getattr(config, "attention_dropout", 0.0) or 0.0)
        self.qk_norm = bool(FAMILIES.get(type(decoder).__name__, False))


def _facts(decoder: Any) -> _Facts:
    facts = _STATIC.get(decoder)
    if facts is None:
        facts = _STATIC[decoder] = _Facts(decoder)
    return facts


def usable(decoder: Any) -> bool:
    """Whether ``decoder`` (a causal LM's body, LoRA layers inside) runs through :func:`forward` now."""
    if not isinstance(decoder, nn.Module):
        return False
    facts = _facts(decoder)
    if not facts.ok or getattr(decoder, "gradient_checkpointing", False):
        return False
    if getattr(decoder.config, "_attn_implementation", "sdpa") != "sdpa":
        return False
    return not (decoder.training and facts.attention_dropout > 0)


def _linear(module: Any, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` for a plain ``nn.Linear`` or a PEFT LoRA ``Linear`` over one, without the module calls."""
    kind = type(module)
    if kind is nn.Linear:  # its parameters straight from the dict: Module.__getattr__ costs more than a small matmul
        params = module._parameters
        return F.linear(x, params["weight"], params["bias"])
    if kind is not _lora_linear_type():
        return module(x)
    lora = module
    # Submodules and parameters straight from their dicts, as for nn.Linear above (a LoRA layer would
    # otherwise pay Module.__getattr__ about ten times per call).
    children = lora._modules
    base = children["base_layer"]
    if type(base) is not nn.Linear or lora.merged:
        return module(x)  # a quantised base; merged weights (PEFT unmerges on disable): its own forward
    base_params: Any = base._parameters
    result = F.linear(x, base_params["weight"], base_params["bias"])
    if lora.disable_adapters:
        return result
    dtype = result.dtype
    variants = getattr(lora, "lora_variant", {})
    lora_a, lora_b, dropouts = (
        children["lora_A"]._modules,
        children["lora_B"]._modules,
        children["lora_dropout"]._modules,
    )
    for name in lora.active_adapters:
        a = lora_a.get(name)
        if a is None:
            continue
        b = lora_b[name]
        if name in variants or type(a) is not nn.Linear or type(b) is not nn.Linear:
            return module(x)  # DoRA and other variants
        # An nn.Linear always holds its weight (its bias may be None).
        a_weight, a_bias = cast(torch.Tensor, a._parameters["weight"]), a._parameters["bias"]
        b_weight, b_bias = cast(torch.Tensor, b._parameters["weight"]), b._parameters["bias"]
        if getattr(lora, "cast_input_dtype_enabled", True) and x.dtype != a_weight.dtype:
            x = x.to(a_weight.dtype)
        dropout = dropouts[name]
        h = F.linear(x if type(dropout) is nn.Identity else dropout(x), a_weight, a_bias)
        if result.dim() == 2 and b_bias is None:
            # One op for PEFT's ``result + lora_B(h) * scaling``: the same product, scaled, then added
            # (bit for bit on the CPU), where the three ops cost three autograd nodes on tiny matrices.
            result = torch.addmm(result, h, b_weight.t(), alpha=lora.scaling[name])
        else:
            result = result + F.linear(h, b_weight, b_bias) * lora.scaling[name]
    return result.to(dtype)


def _norm(module: Any, x: torch.Tensor) -> torch.Tensor:
    """The Llama-family RMSNorm (float32 statistics, weight applied in the input dtype), as the module computes it."""
    if type(module).__name__ not in _NORMS:
        return module(x)
    dtype = x.dtype
    h = x if dtype == torch.float32 else x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
    return module._parameters["weight"] * (h if dtype == torch.float32 else h.to(dtype))  # type: ignore[no-any-return]


def _rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` (Hugging Face's form) as ``x * cos + roll(x, half) * signed_sin``,
    where ``signed_sin`` is ``sin`` with its first half negated: the same products, exactly, in 4 ops
    rather than 7 (``rotate_half`` slices, negates and concatenates)."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * signed_sin


class LeanCache:
    """Keys and values per layer (``[B, kv_heads, tokens, head_dim]``), grown by concatenation (as
    ``DynamicCache``); gradients flow through it."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def get_seq_length(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0

    def update(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer == len(self.keys):
            self.keys.append(key)
            self.values.append(value)
        else:
            self.keys[layer] = torch.cat([self.keys[layer], key], dim=2)
            self.values[layer] = torch.cat([self.values[layer], value], dim=2)
        return self.keys[layer], self.values[layer]

    def reorder_cache(self, rows: torch.Tensor) -> None:
        """Row ``i`` becomes row ``rows[i]`` (a GRPO group repeats its prompt's cache)."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]


def _mask(attention_mask: torch.Tensor | None, t: int, past: int, device: torch.device) -> torch.Tensor | None:
    """SDPA's boolean mask ``[B, 1, t, past + t]`` (None: plain causal, or nothing to mask for one query).

    A query attends to the real keys at or before its own place in the cache. Its own key is always
    allowed, so a padding query (whose output nothing reads) never has an empty row.
    """
    if attention_mask is None and (past == 0 or t == 1):
        return None
    kv = past + t
    if t == 1 and attention_mask is not None:  # one query per row: its keys, its own always
        keys = attention_mask[:, -kv:] != 0
        own = torch.zeros(kv, dtype=torch.bool, device=device)
        own[-1] = True
        return (keys | own)[:, None, None, :]
    rows = past + torch.arange(t, device=device)
    cols = torch.arange(kv, device=device)
    causal = cols[None, :] <= rows[:, None]
    if attention_mask is None:
        return causal[None, None]
    keys = attention_mask[:, -kv:].bool()[:, None, None, :]
    return (keys & causal[None, None]) | (cols[None, :] == rows[:, None])[None, None]


def _kept(keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept positions of each row, ascending, padded to the row with most (``[B, S]``), and which are real."""
    counts = keep.sum(dim=1)
    width = int(counts.max()) if counts.numel() else 0
    idx = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :width]
    return idx, torch.arange(width, device=keep.device)[None, :] < counts[:, None]


def _kept_mask(
    attention_mask: torch.Tensor | None, idx: torch.Tensor, valid: torch.Tensor, past: int, kv: int
) -> torch.Tensor:
    """SDPA's mask ``[B, 1, S, kv]`` for queries at positions ``idx`` (causal to each, real keys, its own
    key always; the padding queries see every key, and nothing reads them)."""
    cols = torch.arange(kv, device=idx.device)[None, None, :]
    at = past + idx[:, :, None]
    allowed = cols <= at
    if attention_mask is not None:
        allowed = allowed & (attention_mask[:, -kv:] != 0)[:, None, :]
    return ((allowed | (cols == at)) | ~valid[:, :, None])[:, None]


def _take(x: torch.Tensor, idx: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` at positions ``idx`` (``[B, S]``) along ``dim`` (x's batch may be 1: broadcast)."""
    shape = list(x.shape)
    shape[0], shape[dim] = idx.shape[0], idx.shape[1]
    view = [idx.shape[0]] + [1] * (x.dim() - 1)
    view[dim] = idx.shape[1]
    return x.expand(idx.shape[0], *x.shape[1:]).gather(dim, idx.view(view).expand(shape))


def forward(
    decoder: Any,
    input_ids: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    cache: LeanCache | None = None,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """The decoder's last hidden states ``[B, T, hidden]`` for ``input_ids`` (continuing ``cache``, updated in place).

    ``attention_mask``: ``[B, cached + T]``, 1 for real tokens (None: all real). ``position_ids``:
    ``[B or 1, T]`` (None: counting on from the cache). ``keep`` (``[B, T]`` bool): only these
    positions' hidden states are wanted, returned as ``[kept, hidden]`` in row-major order (as
    ``hidden[keep]``); without gradients the last layer then runs its queries, attention output and
    MLP at those positions alone (its keys and values, which later positions and the cache read, at
    every one). Call only where :func:`usable` says so.
    """
    b, t = input_ids.shape
    device = input_ids.device
    past = cache.get_seq_length() if cache is not None else 0
    embed = decoder.embed_tokens
    if type(embed) is nn.Embedding:
        h = F.embedding(input_ids, embed.weight, embed.padding_idx, embed.max_norm, embed.norm_type,
                        embed.scale_grad_by_freq, embed.sparse)  # fmt: skip
    else:
        h = embed(input_ids)
    if position_ids is None:
        position_ids = (past + torch.arange(t, device=device))[None]
    cos, sin = decoder.rotary_emb(h, position_ids)
    half = sin.shape[-1] // 2
    cos, sin = cos.unsqueeze(1), torch.cat((-sin[..., :half], sin[..., half:]), dim=-1).unsqueeze(1)
    if attention_mask is not None and bool(attention_mask[:, -(past + t) :].all()):
        attention_mask = None  # nothing padded: the causal kernel
    mask = _mask(attention_mask, t, past, device)
    facts = _facts(decoder)
    dropout = facts.attention_dropout if decoder.training else 0.0
    layers = list(decoder.layers)[: facts.num_layers]  # (slicing a ModuleList builds a new module)
    idx = valid = None
    if keep is not None and not torch.is_grad_enabled():
        # Without gradients only (see the module's docstring).
        idx, valid = _kept(keep)
        if 2 * idx.shape[1] > t:  # most positions wanted: the gathers would cost more than they save
            idx = valid = None
    # Tokens as rows of a 2-D tensor between the attention blocks: a linear on 2-D input is one matmul,
    # where on [B, T, H] it is wrapped in reshapes that autograd records (the same products either way).
    width = h.shape[-1]
    h = h.reshape(b * t, width)
    for i, layer in enumerate(layers):
        attn = layer.self_attn
        x = _norm(layer.input_layernorm, h)
        hd = attn.head_dim
        # q, k, v in the model's order (autograd sums their gradients into x in that order).
        xq, q_cos, q_sin, q_mask, tq = x, cos, sin, mask, t
        if idx is not None and valid is not None and i == len(layers) - 1:
            # Last layer: only the kept positions' outputs are read.
            tq = idx.shape[1]
            xq = _take(x.view(b, t, width), idx, 1).reshape(b * tq, width)
            h = _take(h.view(b, t, width), idx, 1).reshape(b * tq, width)
            q_cos, q_sin = _take(cos, idx, 2), _take(sin, idx, 2)
            q_mask = _kept_mask(attention_mask, idx, valid, past, past + t)
        q = _linear(attn.q_proj, xq).view(b, tq, -1, hd)
        k = _linear(attn.k_proj, x).view(b, t, -1, hd)
        v = _linear(attn.v_proj, x).view(b, t, -1, hd).transpose(1, 2)
        if facts.qk_norm:
            q, k = _norm(attn.q_norm, q), _norm(attn.k_norm, k)
        q = _rotary(q.transpose(1, 2), q_cos, q_sin)
        k = _rotary(k.transpose(1, 2), cos, sin)
        if cache is not None:
            k, v = cache.update(i, k, v)
        heads, groups = q.shape[1], q.shape[1] // k.shape[1]
        if groups > 1 and q_mask is not None:
            if tq == 1:  # one query per row: fold the query heads onto their key/value head
                q = q.reshape(b, k.shape[1], groups, hd)
            else:
                k = k.repeat_interleave(groups, dim=1)
                v = v.repeat_interleave(groups, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=q_mask, dropout_p=dropout, scale=attn.scaling,
                                           is_causal=q_mask is None and tq > 1,
                                           enable_gqa=groups > 1 and q_mask is None)  # fmt: skip
        o = o.reshape(b, heads, tq, hd).transpose(1, 2).reshape(b * tq, heads * hd)
        h = h + _linear(attn.o_proj, o)
        x = _norm(layer.post_attention_layernorm, h)
        mlp = layer.mlp
        h = h + _linear(mlp.down_proj, mlp.act_fn(_linear(mlp.gate_proj, x)) * _linear(mlp.up_proj, x))
    out = _norm(decoder.norm, h).view(b, -1, width)
    if keep is None:
        return out
    return out[valid] if valid is not None else out[keep]


__all__ = ["FAMILIES", "LeanCache", "forward", "usable"]
