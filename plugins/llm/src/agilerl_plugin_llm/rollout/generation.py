"""Generation backends: one interface, two engines.

* :class:`HFGenerateBackend` (default; runs anywhere torch runs): Hugging Face ``generate`` on the
  training model itself, so it always samples from the current weights.
* :class:`~agilerl_plugin_llm.rollout.vllm_server.VLLMServerBackend` (``vllm_config.mode: server``):
  a client of a separately started vLLM server (the LoRA adapter is synced to it over HTTP).
* :class:`VLLMColocatedBackend` (extra ``agilerl-plugin-llm[vllm]``; needs CUDA): a vLLM engine in
  the training process. After each optimizer step the trainer calls :meth:`sync_weights`: with LoRA
  only the adapter is written (``vllm_lora_export_dir``) and served through a new ``LoRARequest``;
  without LoRA the full weights are loaded into the engine. ``LLM.sleep``/``wake_up`` free the GPU
  for training between rollouts. ``vllm_engine_args`` are passed to ``vllm.LLM`` unchanged.

:func:`select_backend` picks one from the spec's ``generation_backend`` (``auto``: vLLM when it
imports and CUDA is available, else HF).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agilerl.errors import AgileRLError


class GenerationError(AgileRLError):
    """A generation backend cannot be used as configured."""


@dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens (the rollout spec's fields). ``temperature == 0`` is greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    #: A reply ends after the first of these strings (kept, as in ``generate(stop_strings=...)``).
    stop_strings: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @classmethod
    def from_spec(cls, spec: Any, *, greedy: bool = False) -> SamplingConfig:
        return cls(
            temperature=0.0 if greedy else float(spec.temperature),
            top_p=float(spec.top_p),
            top_k=int(spec.top_k),
            min_p=float(spec.min_p),
            repetition_penalty=float(spec.repetition_penalty),
            min_new_tokens=int(spec.min_output_tokens or 0),
            stop_strings=tuple(getattr(spec, "stop_strings", None) or ()),
        )


def cut_at_stop_string(ids: list[int], tokenizer: Any, stop_strings: tuple[str, ...]) -> tuple[list[int], bool]:
    """``ids`` up to and including the token that completes the first stop string; whether one was found."""
    if not stop_strings:
        return ids, False
    for end in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:end], skip_special_tokens=False)
        if any(stop in text for stop in stop_strings):
            return ids[:end], True
    return ids, False


class GenerationBackend(Protocol):
    """What rollout collection needs from an engine."""

    name: str

    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: list[int], sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[int]]:
        """New token ids per prompt: at most ``max_new_tokens[i]``, ending at the first stop token."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the engine generate from ``model``'s current weights."""
        ...

    def close(self) -> None: ...


def _cut(ids: list[int], stop: set[int], limit: int) -> list[int]:
    """Up to and including the first stop token, at most ``limit`` tokens."""
    out: list[int] = []
    for tok in ids[:limit]:
        out.append(tok)
        if tok in stop:
            break
    return out


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
            torch.manual_seed(seed)
        size = self.chunk_size or len(prompts)
        out: list[list[int]] = []
        for start in range(0, len(prompts), size):
            out.extend(self._generate(prompts[start : start + size], max_new_tokens[start : start + size], sampling))
        return out

    def _generate(self, prompts: list[list[int]], budgets: list[int], sampling: SamplingConfig) -> list[list[int]]:
        from agilerl_plugin_llm.rollout.kv import has_dropout, sample_with_shared_prefill, supports_shared_prefix

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


# --------------------------------------------------------------------------------------------------
# vLLM, colocated
# --------------------------------------------------------------------------------------------------


def vllm_available() -> bool:
    """vLLM imports and a CUDA device is present (the colocated engine's requirements)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover
        return False


def vllm_engine_kwargs(
    model_path: str,
    *,
    max_model_len: int,
    lora_rank: int | None,
    seed: int | None,
    gpu_memory_utilization: float,
    sleep_mode: bool,
    engine_args: dict[str, Any] | None,
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM``: ours first, then ``vllm_engine_args`` (which win)."""
    kwargs: dict[str, Any] = {
        "model": model_path,
        "max_model_len": int(max_model_len),
        "gpu_memory_utilization": float(gpu_memory_utilization),
        "enable_sleep_mode": bool(sleep_mode),
        "seed": 0 if seed is None else int(seed),
        "dtype": "auto",
    }
    if lora_rank is not None:
        kwargs.update(enable_lora=True, max_lora_rank=int(lora_rank), max_loras=1)
    kwargs.update(engine_args or {})
    return kwargs


def vllm_sampling_kwargs(sampling: SamplingConfig, *, max_tokens: int, seed: int | None) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams`` equivalent to :class:`SamplingConfig`."""
    kwargs: dict[str, Any] = {
        "n": 1,
        "max_tokens": int(max_tokens),
        "min_tokens": int(sampling.min_new_tokens),
        "repetition_penalty": float(sampling.repetition_penalty),
        "seed": seed,
    }
    if sampling.stop_strings:
        kwargs.update(stop=list(sampling.stop_strings), include_stop_str_in_output=True)
    if sampling.greedy:
        kwargs.update(temperature=0.0, top_p=1.0, top_k=-1, min_p=0.0)
    else:
        kwargs.update(
            temperature=float(sampling.temperature),
            top_p=float(sampling.top_p),
            top_k=int(sampling.top_k) if sampling.top_k > 0 else -1,
            min_p=float(sampling.min_p),
        )
    return kwargs


class LoRAExporter:
    """Writes the ``actor`` adapter for the engine, one fresh directory per version.

    vLLM caches adapters by ``lora_int_id``; a new id per sync makes it load the new weights. Old
    versions are deleted once the next one is written.
    """

    def __init__(self, export_dir: str | None, adapter_name: str = "actor") -> None:
        self._owned = export_dir is None
        self.root = Path(export_dir) if export_dir else Path(tempfile.mkdtemp(prefix="agilerl-lora-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.adapter_name = adapter_name
        self.version = 0
        self.current: Path | None = None

    def export(self, model: Any) -> tuple[str, int, str]:
        """Save the adapter; return ``(lora_name, lora_int_id, path)`` for a ``LoRARequest``."""
        self.version += 1
        path = self.root / f"v{self.version}"
        names = list(getattr(model, "peft_config", {}) or {})
        selected = [self.adapter_name] if self.adapter_name in names else names[:1]
        model.save_pretrained(str(path), selected_adapters=selected or None)
        # peft writes non-default adapters into a subdirectory named after the adapter.
        sub = path / selected[0] if selected else path
        adapter_path = sub if (sub / "adapter_config.json").exists() else path
        previous, self.current = self.current, path
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
        return f"{self.adapter_name}-v{self.version}", self.version, str(adapter_path)

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)


class VLLMColocatedBackend:
    """A vLLM engine living in the training process, sharing its GPU.

    :param model_path: the base model directory (the engine loads it itself).
    :param lora_rank: the adapter rank when training LoRA (None: full fine-tuning).
    :param engine_args: ``vllm_engine_args`` from the manifest, passed through.
    :param export_dir: ``vllm_lora_export_dir`` (None: a temporary directory).
    """

    name = "vllm"

    def __init__(
        self,
        model_path: str,
        *,
        max_model_len: int,
        stop_ids: list[int],
        lora_rank: int | None = None,
        seed: int | None = None,
        gpu_memory_utilization: float = 0.3,
        sleep_mode: bool = True,
        engine_args: dict[str, Any] | None = None,
        export_dir: str | None = None,
    ) -> None:
        if not vllm_available():
            raise GenerationError(
                "generation_backend: vllm needs the vllm package and a CUDA GPU: pip install 'agilerl-plugin-llm[vllm]' "
                "on a CUDA machine, or use generation_backend: hf"
            )
        from vllm import LLM

        self.kwargs = vllm_engine_kwargs(
            model_path,
            max_model_len=max_model_len,
            lora_rank=lora_rank,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            sleep_mode=sleep_mode,
            engine_args=engine_args,
        )
        self.llm = LLM(**self.kwargs)
        self.lora = lora_rank is not None
        self.sleep_mode = sleep_mode
        self.stop_ids = list(stop_ids)
        self.exporter = LoRAExporter(export_dir) if self.lora else None
        self.lora_request: Any = None
        self.asleep = False
        self.closed = False

    def wake_up(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def sleep(self) -> None:
        """Free the engine's GPU memory (weights offloaded, KV cache dropped) while training runs."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def sync_weights(self, model: Any) -> None:
        self.wake_up()
        if self.lora:
            from vllm.lora.request import LoRARequest

            assert self.exporter is not None
            name, int_id, path = self.exporter.export(model)
            self.lora_request = LoRARequest(name, int_id, path)
            return
        # Full fine-tuning: stream the trainer's weights into the engine's model.
        state = model.state_dict()
        items = [(k, v) for k, v in state.items()]

        def _load(worker: Any) -> None:  # runs inside vLLM's worker
            worker.model_runner.model.load_weights(items)

        try:
            self.llm.collective_rpc(_load)
        except AttributeError:  # older vLLM
            engine_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
            engine_model.load_weights(items)

    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: list[int], sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[int]]:
        from vllm import SamplingParams

        self.wake_up()
        # Stop tokens go in at construction: SamplingParams derives its stop set there.
        params = [
            SamplingParams(
                **vllm_sampling_kwargs(sampling, max_tokens=max(1, b), seed=None if seed is None else seed + i),
                stop_token_ids=list(self.stop_ids),
            )
            for i, b in enumerate(max_new_tokens)
        ]
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(requests, params, lora_request=self.lora_request, use_tqdm=False)
        stop = set(self.stop_ids)
        result = [_cut(list(o.outputs[0].token_ids), stop, b) for o, b in zip(outputs, max_new_tokens, strict=False)]
        self.sleep()
        return result

    def close(self) -> None:
        self.closed = True
        if self.exporter is not None:
            self.exporter.close()


def select_backend_name(requested: str, *, device: str) -> str:
    """``hf`` or ``vllm`` for ``generation_backend`` (``auto``: vLLM when usable on this device)."""
    if requested == "hf":
        return "hf"
    usable = vllm_available() and str(device).startswith("cuda")
    if requested == "vllm":
        if not usable:
            why = "vllm is not installed" if importlib.util.find_spec("vllm") is None else "no CUDA device is in use"
            raise GenerationError(
                f"algorithm.generation_backend: vllm was requested but {why}; install "
                "'agilerl-plugin-llm[vllm]' on a CUDA machine (training.device: cuda) or use generation_backend: hf"
            )
        return "vllm"
    return "vllm" if usable else "hf"


def select_backend(
    spec: Any, model: Any, tokenizer: Any, *, stop_ids: list[int], device: str, lora_rank: int | None
) -> GenerationBackend:
    """Build the backend ``spec`` asks for (see :func:`select_backend_name`)."""
    requested = getattr(spec, "generation_backend", "auto")
    if requested == "vllm_server":
        return _server_backend(spec, stop_ids=stop_ids)
    name = select_backend_name(requested, device=device)
    if name == "hf":
        return HFGenerateBackend(
            model, tokenizer, stop_ids=stop_ids, chunk_size=getattr(spec, "hf_generate_chunk_size", None)
        )
    # One engine per process, shared by every population member: each syncs its weights before
    # its rollouts, and a second engine would only take GPU memory.
    key = json.dumps(
        [
            str(spec.pretrained_model_name_or_path),
            spec.max_model_len,
            lora_rank,
            getattr(spec, "vllm_engine_args", None),
        ],
        sort_keys=True,
        default=str,
    )
    engine = _ENGINES.get(key)
    if engine is None or engine.closed:
        engine = _ENGINES[key] = _new_vllm_backend(spec, stop_ids=stop_ids, lora_rank=lora_rank)
    return engine


_ENGINES: dict[str, VLLMColocatedBackend] = {}
_SERVERS: dict[str, Any] = {}


def _server_backend(spec: Any, *, stop_ids: list[int]) -> Any:
    """One client per server URL, shared by the population (each member syncs its adapter first)."""
    from agilerl_plugin_llm.distributed import world_size
    from agilerl_plugin_llm.rollout.vllm_server import VLLMServerBackend

    if world_size() > 1:
        # Each process would load its own adapter versions under the same names, unload the
        # others' and send every request again: one process talks to the server.
        raise GenerationError(
            "vllm_config.mode: server trains in one process: several processes would each sync "
            "their adapter to the one server and send every request again; use --num-processes 1 "
            "(or generate with use_vllm: false)"
        )

    url = str(spec.vllm_server_url or "http://127.0.0.1:8000")
    client = _SERVERS.get(url)
    if client is None or client.closed:
        client = _SERVERS[url] = VLLMServerBackend(
            url,
            stop_ids=stop_ids,
            timeout=float(getattr(spec, "vllm_server_timeout", 240.0)),
            export_dir=getattr(spec, "vllm_lora_export_dir", None),
        )
    return client


def _new_vllm_backend(spec: Any, *, stop_ids: list[int], lora_rank: int | None) -> VLLMColocatedBackend:
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
    )


__all__ = [
    "GenerationBackend",
    "GenerationError",
    "HFGenerateBackend",
    "LoRAExporter",
    "SamplingConfig",
    "VLLMColocatedBackend",
    "select_backend",
    "select_backend_name",
    "vllm_available",
    "vllm_engine_kwargs",
    "vllm_sampling_kwargs",
]
