"""``LLMAlgorithm``: what every LLM algorithm of this plugin shares.

It owns the policy (a causal LM, usually with a LoRA ``actor`` adapter), the tokenizer, the AdamW
optimizer and the reference policy, and implements the core's algorithm protocol on top of
:class:`agilerl.algorithm.AlgorithmBase`:

* ``clone()`` copies only what trains: frozen weights (the base model under LoRA, the reference
  adapter or reference model) are shared between clones, so a population costs one base model;
* ``state_dict()`` holds the trainable tensors (the actor adapter, or every weight without LoRA), the
  reference adapter and the optimizer state: all ``torch.load(weights_only=True)``-safe;
* changing ``lr`` rebuilds the optimizer (keeping its moments).

Subclasses (SFT, DPO, GRPO, LLMREINFORCE) write the loss; :meth:`LLMAlgorithm.optimize` runs it
over mini-batches (one optimizer step each) and micro-batches (gradient accumulation), and
:func:`sequence_logprobs` computes log-probabilities of the response tokens only.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from agilerl.algorithm import AlgorithmBase
from agilerl.errors import AgileRLError
from agilerl_plugin_llm import distributed, fast_step, fsdp, lean_decoder
from agilerl_plugin_llm import model as llm_model
from agilerl_plugin_llm.logprobs import auto_chunk_rows, token_logprobs
from agilerl_plugin_llm.packing import pack_rows, packed_decoder_hidden, packed_logits
from agilerl_plugin_llm.spec_base import LLMAlgorithmSpec

Batch = dict[str, torch.Tensor]
#: ``loss_fn(micro_batch) -> (loss_sum, stats)``: the loss *summed* over the micro-batch's units.
LossFn = Callable[[Batch], tuple[torch.Tensor, dict[str, float]]]


def _decoder(base: Any) -> Any:
    """The causal LM's decoder stack (what runs before ``lm_head``), or None if not found (or the model
    is sharded: FSDP gathers the root's weights in the model's own forward)."""
    if getattr(base, "agilerl_fsdp", False):
        return None
    get = getattr(base, "get_decoder", None)
    try:
        decoder = get() if callable(get) else None
    except Exception:  # models that do not implement it
        decoder = None
    if decoder is None or decoder is base:
        decoder = getattr(base, "model", None)
    return decoder if isinstance(decoder, torch.nn.Module) else None


def final_softcap(base: Any) -> float | None:
    """The model's ``final_logit_softcapping`` (Gemma 2-4), on its text config for multimodal models."""
    config = getattr(base, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(text, "final_logit_softcapping", None) or getattr(config, "final_logit_softcapping", None)
    return float(cap) if isinstance(cap, (int, float)) and cap else None


def scale_logits(base: Any, logits: torch.Tensor) -> torch.Tensor:
    """What the model's own forward does to ``lm_head``'s output that the decoder + ``lm_head`` path skips:
    Granite divides by ``config.logits_scaling``, Cohere multiplies by ``logit_scale``, Gemma soft-caps
    (``cap * tanh(logits / cap)``)."""
    config = getattr(base, "config", None)
    # Read once per config (transformers' config lookups cost microseconds: a decoding step calls this).
    key = (id(base), id(config))
    factors = _LOGIT_SCALES.get(key)
    if factors is None or factors[0] is not config:
        granite = getattr(config, "logits_scaling", None)
        cohere = getattr(base, "logit_scale", getattr(config, "logit_scale", None))
        factors = _LOGIT_SCALES[key] = (
            config,
            float(granite) if isinstance(granite, (int, float)) and granite != 1.0 else None,
            float(cohere) if isinstance(cohere, (int, float)) and cohere != 1.0 else None,
            final_softcap(base),
        )
        if len(_LOGIT_SCALES) > 64:
            _LOGIT_SCALES.clear()
            _LOGIT_SCALES[key] = factors
    _, granite_div, cohere_mul, cap = factors
    if granite_div is not None:
        logits = logits / granite_div
    if cohere_mul is not None:
        logits = logits * cohere_mul
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


_LOGIT_SCALES: dict[tuple[int, int], tuple[Any, float | None, float | None, float | None]] = {}


def sequence_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    position_ids_from_mask: bool = True,
    chunk_rows: int | None = None,
    pack: bool = False,
) -> torch.Tensor:
    """Per-token log-probabilities of the tokens selected by ``loss_mask`` (shape ``[B, T]``, zeros elsewhere).

    ``position_ids_from_mask`` (AgileRL's ``calc_position_embeddings``): positions count the real
    tokens of each row, so a left-padded row is scored at the positions it was generated at (the
    generation path counts them the same way); off, the model numbers every column from 0.

    ``loss_mask[b, t]`` marks token ``t`` as one the policy produced (a response token). Position
    ``t`` is predicted from the logits at ``t - 1``. To keep memory small, the vocabulary projection
    runs only at the positions that predict a selected token (``[N, V]`` rather than ``[B, T, V]``)
    when the model exposes its decoder and ``lm_head``; otherwise the full logits are used. With
    ``chunk_rows`` (``use_liger_loss`` / ``chunk_rows``) even ``[N, V]`` is never held: see
    :func:`agilerl_plugin_llm.logprobs.token_logprobs`.

    ``pack`` (``use_sequence_packing``): the forward runs on the rows' real tokens packed together,
    padding-free (:mod:`agilerl_plugin_llm.packing`); each row's positions count its real tokens, as
    with ``position_ids_from_mask``. Same log-probs within float tolerance.
    """
    targets = input_ids[:, 1:]
    select = loss_mask[:, 1:].bool()
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    sharded = bool(getattr(model, "agilerl_fsdp", False))
    if not bool(select.any()) and not sharded:  # sharded: every process runs every forward (FSDP gathers)
        return out
    base = model.get_base_model() if llm_model.is_peft(model) else model
    decoder = _decoder(base)
    lm_head = getattr(base, "lm_head", None)
    if pack:
        return _packed_logprobs(model, base, decoder, lm_head, input_ids, attention_mask, select, out,
                                temperature=temperature, chunk_rows=chunk_rows)  # fmt: skip
    extra: dict[str, Any] = {}
    mask_arg: torch.Tensor | None = attention_mask
    if bool((attention_mask.cumprod(-1) == attention_mask).all()):
        # Right-padded (or unpadded) rows: under the causal mask no real token sees a pad, and real
        # tokens sit at positions 0..n-1 either way, so the plain causal pass (no mask or positions
        # to build; SDPA's is_causal kernel) scores every selected token the same.
        mask_arg = None
    elif position_ids_from_mask:
        extra["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    if decoder is not None and lm_head is not None:
        if lean_decoder.usable(decoder):  # the same pass, bit for bit, without Hugging Face's per-call machinery
            hidden = lean_decoder.forward(decoder, input_ids, attention_mask=mask_arg,
                                          position_ids=extra.get("position_ids"))  # fmt: skip
        else:
            hidden = decoder(input_ids=input_ids, attention_mask=mask_arg, use_cache=False, **extra).last_hidden_state
        out[:, 1:][select] = token_logprobs(
            hidden[:, :-1][select],
            lambda rows: scale_logits(base, lm_head(rows)),
            targets[select],
            temperature=temperature,
            chunk_rows=chunk_rows,
        )
        return out
    out_all = model(input_ids=input_ids, attention_mask=mask_arg, use_cache=False, **extra)
    if sharded and not bool(select.any()):
        return out + 0.0 * out_all.logits.sum()  # a backward through every FSDP unit, of zeros
    logits = out_all.logits[:, :-1][select]
    out[:, 1:][select] = token_logprobs(logits, lambda rows: rows, targets[select], temperature=temperature)
    return out


def _packed_logprobs(
    model: Any, base: Any, decoder: Any, lm_head: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
    select: torch.Tensor, out: torch.Tensor, *, temperature: float, chunk_rows: int | None,
) -> torch.Tensor:  # fmt: skip
    """:func:`sequence_logprobs` through one padding-free forward over the packed rows."""
    packed = pack_rows(input_ids, attention_mask)
    # A selected token is predicted from the real token before it (a pad before it predicts nothing).
    select = select & packed.real[:, :-1]
    before = packed.predictors(select)
    if decoder is not None and lm_head is not None:
        hidden = packed.select(packed_decoder_hidden(decoder, packed), before)
        out[:, 1:][select] = token_logprobs(hidden, lambda rows: scale_logits(base, lm_head(rows)),
                                            input_ids[:, 1:][select], temperature=temperature, chunk_rows=chunk_rows)  # fmt: skip
        return out
    logits = packed_logits(model, packed)
    if not bool(select.any()):  # sharded: a backward through every FSDP unit, of zeros
        return out + 0.0 * logits.sum()
    out[:, 1:][select] = token_logprobs(packed.select(logits, before), lambda rows: rows, input_ids[:, 1:][select],
                                        temperature=temperature)  # fmt: skip
    return out


def trim_padding(batch: Mapping[str, torch.Tensor], mask_key: str = "attention_mask") -> Batch:
    """Drop the trailing positions (last dim) that are padding in every row (right-padded batches)."""
    mask = batch[mask_key]
    width = mask.shape[-1]
    lengths = mask.reshape(-1, width).sum(dim=1)
    length = max(int(lengths.max().item()) if lengths.numel() else 0, 1)
    return {k: (v[..., :length] if v.dim() >= 2 and v.shape[-1] == width else v) for k, v in batch.items()}


def slice_batch(batch: Mapping[str, torch.Tensor], start: int, stop: int) -> Batch:
    return {k: v[start:stop] for k, v in batch.items()}


def batch_rows(batch: Mapping[str, torch.Tensor]) -> int:
    return int(next(iter(batch.values())).shape[0])


class LLMAlgorithm(AlgorithmBase):
    """Base class of the LLM algorithms.

    :param spec: The validated algorithm spec (an ``LLMAlgorithmSpec``).
    :param tokenizer: The tokenizer (shared, never copied).
    :param model: A pre-built policy (e.g. from a clone); loaded from
        ``spec.pretrained_model_name_or_path`` when omitted.
    :param reference_model: A frozen reference for full fine-tuning (built when needed and omitted).
    :param index: Population index.
    :param device: torch device.
    """

    #: Whether this algorithm needs a reference policy (DPO, GRPO with beta > 0).
    needs_reference: bool = False

    def __init__(
        self,
        spec: LLMAlgorithmSpec,
        *,
        tokenizer: Any,
        model: Any = None,
        reference_model: Any = None,
        index: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(spec, index=index)
        self.device = torch.device(device)
        self.tokenizer = tokenizer
        self.model = self._load_policy() if model is None else model
        if reference_model is None and self.needs_reference and not llm_model.is_peft(self.model):
            # Full fine-tuning: the reference is a frozen snapshot of the starting weights (unsharded).
            reference_model = copy.deepcopy(self.model).requires_grad_(False).eval()
        self.reference_model = reference_model
        #: FSDP sharding (``fsdp`` field or ``accelerate launch --use_fsdp``); applied over 2+ processes.
        self.fsdp_config = fsdp.settings(getattr(spec, "fsdp", None))
        if self.fsdp_config is not None and distributed.context()[1] > 1 and not fsdp.is_sharded(self.model):
            fsdp.shard(self.model, self.fsdp_config)
        self.optimizer = self._make_optimizer()

    def activation_offload(self) -> contextlib.AbstractContextManager[Any]:
        """AgileRL's ``activation_offload``: the training forward runs under ``torch.autograd.graph.save_on_cpu``,
        so the tensors it saves for the backward wait in (pinned) host memory instead of on the GPU. On the
        CPU activations are in host memory already, so there it changes nothing."""
        if getattr(self.spec, "activation_offload", False) and torch.is_grad_enabled():
            return torch.autograd.graph.save_on_cpu(pin_memory=self.device.type == "cuda")
        return contextlib.nullcontext()

    @property
    def sequence_packing(self) -> bool:
        """``use_sequence_packing``: the log-prob forwards run padding-free (:mod:`agilerl_plugin_llm.packing`)."""
        return bool(getattr(self.spec, "use_sequence_packing", False))

    @property
    def logit_chunk_rows(self) -> int | None:
        """Rows per chunk of the log-prob computation (None: unchunked): ``chunk_rows``, else with
        ``use_liger_loss`` (AgileRL's default) the size of a ~256 MB float32 logit tile."""
        explicit = getattr(self.spec, "chunk_rows", None)
        if explicit is not None:
            return int(explicit)
        if not getattr(self.spec, "use_liger_loss", False):
            return None
        base = self.model.get_base_model() if llm_model.is_peft(self.model) else self.model
        head = getattr(base, "lm_head", None)
        vocab = getattr(head, "out_features", None) or getattr(getattr(base, "config", None), "vocab_size", 0)
        return auto_chunk_rows(int(vocab or 0))

    def _load_policy(self) -> Any:
        spec = self.spec
        if not spec.pretrained_model_name_or_path:
            raise llm_model.ModelLoadError(
                "network.pretrained_model_name_or_path is required (a local model dir or cached HF id)"
            )
        return llm_model.load_model(
            spec.pretrained_model_name_or_path,
            lora_config=spec.lora_config,
            use_separate_reference_adapter=spec.use_separate_reference_adapter and self.needs_reference,
            gradient_checkpointing=spec.gradient_checkpointing,
            max_model_len=spec.max_model_len,
            attn_implementation=spec.attn_implementation,
            device=self.device,
            quantization=getattr(spec, "quantization", None),
            lora_target_scope=spec.lora_target_scope,
            strip_towers=bool(getattr(spec, "strip_multimodal_towers", False)),
        )

    @property
    def sharded(self) -> bool:
        """Whether the policy is FSDP-sharded (its weights are shards; gathering them takes every process)."""
        return fsdp.is_sharded(self.model)

    #: Read by the core's checkpoint writer: every process must call ``state_dict`` (it gathers shards).
    state_dict_is_collective = sharded

    # --- parameters and optimizer --------------------------------------------------------------
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _make_optimizer(self) -> torch.optim.Optimizer:
        params = self.trainable_parameters()
        if not params:
            raise ValueError("the model has no trainable parameters")
        try:
            # The fused kernel (CPU and CUDA) is ~10x faster than the per-tensor loop on small models.
            return torch.optim.AdamW(params, lr=float(self.spec.lr), fused=True)
        except (RuntimeError, TypeError, ValueError):  # dtypes/devices without a fused kernel
            return torch.optim.AdamW(params, lr=float(self.spec.lr))

    # --- batch rows (from the spec: a GRPO prompt is group_size rows) ---------------------------
    @property
    def mini_batch_rows(self) -> int | None:
        """Rows per optimizer step (None: the whole batch): ``mini_batch_size`` prompts' rows."""
        mini = self.spec.mini_batch_size
        return None if mini is None else int(mini) * int(getattr(self.spec, "group_size", 1))

    @property
    def micro_batch_rows(self) -> int | None:
        """Rows per forward pass (None: a whole mini-batch): ``micro_batch_size_per_gpu`` prompts' rows,
        or 1 with AgileRL's ``reduce_memory_peak`` (one row per forward pass)."""
        micro = self.spec.micro_batch_size_per_gpu
        if micro is None:
            return 1 if getattr(self.spec, "reduce_memory_peak", False) else None
        return int(micro) * int(getattr(self.spec, "group_size", 1))

    def on_spec_change(self, old: Any, changed: frozenset[str]) -> None:
        if "lr" in changed and getattr(self, "optimizer", None) is not None:
            # Rebuild with the new rate but keep AdamW's moments: a mutated agent should not lose
            # what it learned about its gradients' scale.
            state = self.optimizer.state_dict()
            self.optimizer = self._make_optimizer()
            self.optimizer.load_state_dict(state)
            for group in self.optimizer.param_groups:
                group["lr"] = float(self.spec.lr)

    #: Iterations the lr schedule spans when the spec does not say (the builder sets training.max_steps).
    lr_schedule_total: int = 1

    def current_lr(self) -> float:
        """``lr`` times the spec's schedule (``lr_scheduler``, ``warmup_ratio``) at this iteration."""
        spec = self.spec
        if not callable(getattr(spec, "lr_factor", None)):
            return float(spec.lr)
        if getattr(spec, "lr_scheduler", "constant") == "constant" and not getattr(spec, "warmup_ratio", 0.0):
            return float(spec.lr)
        # Schedule fields are numeric, so mutable: the spec holds the agent's current values.
        return float(spec.lr) * float(spec.lr_factor(int(self.steps), int(self.lr_schedule_total)))

    def apply_lr_schedule(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.current_lr()

    # --- reference policy ----------------------------------------------------------------------
    def reference(self) -> Any:
        """Context manager yielding the reference policy module (gradients off)."""
        return llm_model.reference_policy(self.model, self.reference_model)

    def maybe_refresh_reference(self) -> None:
        """``update_reference_every``: at iterations N, 2N, ... the reference becomes the current policy."""
        every = getattr(self.spec, "update_reference_every", None)
        if not every or not self.needs_reference or self.steps == 0 or self.steps % int(every):
            return
        if getattr(self, "reference_step", None) != self.steps:
            self.refresh_reference()

    def refresh_reference(self) -> None:
        """Make the reference a copy of the current policy, owned by this agent alone.

        Clones share frozen tensors (the reference among them), so this rebinds new tensors rather
        than writing into the shared ones: the rest of the population keeps its own reference.
        """
        self.reference_step: int | None = int(self.steps)
        if llm_model.is_peft(self.model) and llm_model.REFERENCE in llm_model.adapter_names(self.model):
            llm_model.rebind_frozen(self.model, {n.replace(f".{llm_model.REFERENCE}.", f".{llm_model.ACTOR}."): n
                                 for n, _ in self.model.named_parameters()
                                 if f".{llm_model.REFERENCE}." in n and "lora_" in n})  # fmt: skip
        elif self.reference_model is not None and self.sharded:
            ref = copy.deepcopy(self.reference_model)  # unsharded: fill it with the gathered policy
            ref.load_state_dict({n: fsdp.full(t) for n, t in self.model.state_dict().items()})
            self.reference_model = ref.requires_grad_(False).eval()
        elif self.reference_model is not None:
            self.reference_model = copy.deepcopy(self.model).requires_grad_(False).eval()
        else:
            raise ValueError("no reference to refresh: under LoRA set use_separate_reference_adapter: true")

    def logprobs(self, batch: Mapping[str, torch.Tensor], *, reference: bool = False, **kwargs: Any) -> torch.Tensor:
        """Per-token log-probs of ``batch["loss_mask"]`` tokens under the policy (or the reference)."""
        ids, am, lm = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
        kwargs.setdefault("position_ids_from_mask", bool(getattr(self.spec, "calc_position_embeddings", True)))
        kwargs.setdefault("chunk_rows", self.logit_chunk_rows)
        kwargs.setdefault("pack", self.sequence_packing)
        if reference:
            with self.reference() as ref:
                return sequence_logprobs(ref, ids, am, lm, **kwargs)
        return sequence_logprobs(self.model, ids, am, lm, **kwargs)

    # --- optimisation --------------------------------------------------------------------------
    def to_device(self, batch: Mapping[str, torch.Tensor]) -> Batch:
        return {k: v.to(self.device) for k, v in batch.items()}

    def optimize(
        self,
        batch: Mapping[str, torch.Tensor],
        loss_fn: LossFn,
        *,
        units: Callable[[Batch], float] = lambda b: float(batch_rows(b)),
    ) -> dict[str, float]:
        """Run ``loss_fn`` over ``batch`` and step the optimizer.

        The batch is cut into mini-batches of ``mini_batch_size`` rows (default: all), one optimizer
        step each; every mini-batch into micro-batches of ``micro_batch_size_per_gpu`` rows (default:
        the mini-batch) whose gradients accumulate. ``loss_fn`` returns the loss summed over its
        micro-batch's units (rows, or tokens); it is divided by ``units(mini_batch)`` so the step
        sees the mini-batch mean whatever the micro-batch size. Returns mean stats.
        """
        if not self.model.training:  # train() walks every submodule: only when something switched to eval
            self.model.train()
        self.maybe_refresh_reference()
        self.apply_lr_schedule()
        # The optimizer's parameters are the trainable ones (it is built from them, and rebuilt with
        # the model); reading them is free where ``trainable_parameters`` walks the whole model.
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        rank, world = distributed.context()
        n = batch_rows(batch)
        mini = min(self.mini_batch_rows or n, n)
        micro = min(self.micro_batch_rows or mini, mini)
        totals: dict[str, float] = {}
        counts: dict[str, int] = {}
        norms: list[float] = []  # grad norms: the same on every process (after the sum)
        steps = 0
        sharded = self.sharded
        defer = sharded and bool((self.fsdp_config or {}).get("defer_grad_sync", True))
        # Under FSDP the sharded gradients are reduce-scattered by FSDP; the rest are summed here.
        plain = [p for p in params if not fsdp.is_dtensor(p)] if sharded else params
        for start in range(0, n, mini):
            mini_batch = slice_batch(batch, start, min(start + mini, n))
            denom = max(units(mini_batch), 1e-8)  # the whole step's units, on every process
            fast_step.drop_grads(params)
            rows = batch_rows(mini_batch)
            lo, hi = distributed.shard(rows, rank, world)  # this process's rows
            parts: list[tuple[int, int] | None] = [(m, min(m + micro, hi)) for m in range(lo, hi, micro)]
            if sharded:  # every process runs as many forwards as the busiest (FSDP's collectives pair up)
                most = max(-(-(b - a) // micro) for a, b in (distributed.shard(rows, r, world) for r in range(world)))
                parts += [None] * (most - len(parts))  # a zero-weight pass over the step's first row
            for i, part in enumerate(parts):
                a, b = part or (0, 1)
                micro_batch = self.to_device(trim_padding(slice_batch(mini_batch, a, b)))
                if defer:  # reduce-scatter once, after the step's last micro-batch
                    self.model.set_requires_gradient_sync(i == len(parts) - 1)
                with self.activation_offload():
                    loss_sum, stats = loss_fn(micro_batch)
                (loss_sum / denom * (1.0 if part else 0.0)).backward()
                if part is None:
                    continue
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + float(v)
                    counts[k] = counts.get(k, 0) + 1
            if world > 1:  # the last step's all-reduce also sums every process's stats
                last = start + mini >= n
                if plain or last:
                    merged = distributed.sum_gradients(plain, (totals, counts) if last else None)
                    if merged is not None:
                        totals, counts = merged
            if self.spec.max_grad_norm and self.spec.max_grad_norm > 0:
                if sharded:
                    norms.append(fsdp.clip_grad_norm(params, self.spec.max_grad_norm))
                else:
                    norms.append(float(fast_step.clip_grad_norm(params, self.spec.max_grad_norm)))
            # torch's clip and AdamW step, without their per-call Python (the same kernels: fast_step).
            fast_step.adamw_step(self.optimizer)
            steps += 1
        fast_step.drop_grads(params)
        if norms:
            totals["grad_norm"], counts["grad_norm"] = sum(norms), len(norms)
        out = {k: totals[k] / counts[k] for k in totals}
        out["optimizer_steps"] = float(steps)
        return out

    # --- population ----------------------------------------------------------------------------
    def _shared_objects(self) -> Iterator[Any]:
        """Objects clones share instead of copying: tokenizer and every frozen tensor."""
        yield self.tokenizer
        for p in self.model.parameters():
            if not p.requires_grad:
                yield p
        if self.reference_model is not None:
            yield self.reference_model

    def clone(self, index: int | None = None) -> LLMAlgorithm:
        memo: dict[int, Any] = {id(obj): obj for obj in self._shared_objects()}
        sharded = self.sharded
        if sharded:  # FSDP modules cannot be deep-copied: the twin loads and shards its own policy
            memo[id(self.model)] = None
        optimizer = self.optimizer
        self.optimizer = None  # type: ignore[assignment]
        try:
            twin = copy.deepcopy(self, memo)
        finally:
            self.optimizer = optimizer
        if sharded:
            with torch.random.fork_rng(devices=[]):  # a fresh LoRA init must not move the run's RNG
                twin.model = fsdp.shard(twin._load_policy(), self.fsdp_config or {})
            twin.copy_policy_from(self)
        twin.optimizer = twin._make_optimizer()
        twin.optimizer.load_state_dict(optimizer.state_dict())
        fsdp.own_optimizer_state(twin.optimizer)  # its own copies of the moments, not its parent's
        if index is not None:
            twin.index = int(index)
        return twin

    def copy_policy_from(self, other: LLMAlgorithm) -> None:
        """Make this agent's policy weights ``other``'s (under FSDP shard to shard: no communication)."""
        with torch.no_grad():
            for (name, mine), (theirs_name, theirs) in zip(
                self.model.named_parameters(), other.model.named_parameters(), strict=True
            ):
                if name != theirs_name:
                    raise AgileRLError(f"cannot copy a policy of another shape ({name!r} vs {theirs_name!r})")
                mine.copy_(theirs)

    # --- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        # Whole tensors (under FSDP gathered from every process's shard): a checkpoint is the same
        # whatever the number of processes that wrote it.
        state["weights"] = llm_model.trainable_state(self.model)
        ref = {
            n: fsdp.full(p.detach()).to("cpu", copy=True)
            for n, p in self.model.named_parameters()
            if f".{llm_model.REFERENCE}." in n and "lora_" in n
        }
        state["reference_weights"] = ref or None
        state["reference_step"] = getattr(self, "reference_step", None)
        if state["reference_step"] is not None and self.reference_model is not None and not ref:
            # A refreshed full-model reference is no longer the starting weights: it must be saved.
            state["reference_model"] = {n: t.detach().to("cpu", copy=True)
                                        for n, t in self.reference_model.state_dict().items()}  # fmt: skip
        opt_state = self.optimizer.state_dict()
        state["optimizer"] = fsdp.full_optimizer_state(opt_state) if self.sharded else opt_state
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        llm_model.load_weights(self.model, state["weights"], what="weights")
        if state.get("reference_weights"):
            # Rebind (not copy into) the reference tensors: they may be shared with other agents.
            params = dict(self.model.named_parameters())
            unknown = [n for n in state["reference_weights"] if n not in params]
            if unknown:
                raise AgileRLError(f"checkpoint reference adapter does not fit this model ({unknown[0]!r})")
            llm_model.rebind_frozen(self.model, {}, tensors=state["reference_weights"])
        self.reference_step = state.get("reference_step")
        if state.get("reference_model") is not None:
            # Under FSDP the reference is the unsharded snapshot (a sharded policy cannot be copied).
            source = self.reference_model if self.sharded and self.reference_model is not None else self.model
            self.reference_model = copy.deepcopy(source).requires_grad_(False).eval()
            self.reference_model.load_state_dict(state["reference_model"])
        if state.get("optimizer") is not None:
            self.optimizer = self._make_optimizer()
            self.optimizer.load_state_dict(state["optimizer"])
            if self.sharded:
                fsdp.own_optimizer_state(self.optimizer)  # whole moments in the checkpoint: keep the shards
        # (Older checkpoints also hold "micro_batch_size_per_gpu"/"mini_batch_size" rows: they are
        # the spec's values times group_size, which the hyperparameters above restore.)

    def export_merged(self, path: Any) -> Any:
        """Write a plain HF model directory (actor adapter merged into the base) to ``path``."""
        return llm_model.export_merged(self.model, self.tokenizer, path)

    # --- evaluation ----------------------------------------------------------------------------
    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float:
        raise NotImplementedError


__all__ = [
    "Batch",
    "LLMAlgorithm",
    "LossFn",
    "batch_rows",
    "scale_logits",
    "sequence_logprobs",
    "slice_batch",
    "trim_padding",
]
