"""Loading the policy: model and tokenizer from a local directory or the local Hugging Face cache,
LoRA adapters through peft, the reference policy, gradient checkpointing, pad token and chat template.

Nothing here downloads: a model that is neither a local directory nor in the local cache is an
:class:`agilerl.errors.AgileRLError` that says so before any training starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from agilerl.errors import AgileRLError
from agilerl_plugin_llm.fsdp import full, is_dtensor, like
from agilerl_plugin_llm.quiet import quiet_progress_bars

log = logging.getLogger(__name__)

ACTOR = "actor"
REFERENCE = "reference"


class ModelLoadError(AgileRLError):
    """The model or tokenizer could not be found or loaded."""


class ChatTemplateError(AgileRLError):
    """The tokenizer has no usable chat template."""


def resolve_model_path(name_or_path: str | os.PathLike[str]) -> Path:
    """A local directory holding the model: ``name_or_path`` itself, or its snapshot in the HF cache.

    :raises ModelLoadError: if it is neither (downloads are never attempted).
    """
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"pretrained_model_name_or_path {text!r} is a file; give the model's directory")
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"pretrained_model_name_or_path {text!r} has no config.json: not a Hugging Face model "
                "directory (save one with model.save_pretrained(dir) and tokenizer.save_pretrained(dir))"
            )
        return path
    looks_like_path = text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep in text.replace("/", "")
    if not looks_like_path:
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(text, local_files_only=True))
        except Exception as exc:  # LocalEntryNotFoundError, HFValidationError, ...
            log.debug("not in the local HF cache: %s (%s)", text, exc)
    raise ModelLoadError(
        f"pretrained_model_name_or_path {text!r} was not found: it is not a local directory "
        f"(relative to {Path.cwd()}) and not in the local Hugging Face cache. agilerl never downloads "
        "at run time: download it beforehand (huggingface-cli download <id>) or point at a directory "
        "written with save_pretrained (e.g. python -m agilerl_plugin_llm.testing build-tiny-model DIR)."
    )


def load_tokenizer(
    name_or_path: str | os.PathLike[str],
    *,
    chat_template_path: str | os.PathLike[str] | None = None,
    padding_side: str = "right",
) -> Any:
    """The tokenizer of a local model, with a pad token and (optionally) a replaced chat template.

    A tokenizer without a pad token gets its EOS (or UNK) token as pad: padding positions are
    always masked out, so which token pads does not change any loss.
    """
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"cannot load a tokenizer from {str(path)!r}: {type(exc).__name__}: {exc}") from exc
    if chat_template_path is not None:
        template = Path(chat_template_path).expanduser()
        if not template.is_file():
            raise ChatTemplateError(f"environment.chat_template_path {str(template)!r} does not exist")
        tokenizer.chat_template = template.read_text(encoding="utf-8")
    if tokenizer.pad_token is None:
        fallback = tokenizer.eos_token or tokenizer.unk_token
        if fallback is None:
            raise ModelLoadError(f"the tokenizer at {str(path)!r} has no pad, eos or unk token to pad with")
        tokenizer.pad_token = fallback
    tokenizer.padding_side = padding_side
    return tokenizer


def check_chat_template(tokenizer: Any, *, where: str = "the tokenizer") -> None:
    """Raise :class:`ChatTemplateError` unless the tokenizer can format a chat."""
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(
            f"{where} has no chat template, but environment.apply_chat_template is true. Set "
            "environment.chat_template_path to a Jinja template file, use a model whose tokenizer has one, "
            "or set environment.apply_chat_template: false to feed plain text."
        )


def peft_lora_config(lora_config: Any) -> Any:
    """Translate the manifest's ``lora_config`` (``lora_r``, ``lora_alpha``, ...) into a peft ``LoraConfig``."""
    from peft import LoraConfig

    if hasattr(lora_config, "model_dump"):
        lora_config = lora_config.model_dump()
    cfg = dict(lora_config)
    kwargs: dict[str, Any] = {
        "r": int(cfg.get("lora_r", cfg.get("r", 16))),
        "lora_alpha": float(cfg.get("lora_alpha", 32)),
        "target_modules": cfg.get("target_modules", "all-linear"),
        "lora_dropout": float(cfg.get("lora_dropout", 0.05)),
        "task_type": cfg.get("task_type", "CAUSAL_LM"),
    }
    if cfg.get("target_parameters"):
        kwargs["target_parameters"] = list(cfg["target_parameters"])
    return LoraConfig(**kwargs)


#: Attributes holding a multimodal checkpoint's non-text towers (HF ``*ForConditionalGeneration``
#: models, Gemma 3n/4's per-modality embedders), on the model or one level down (``model.model``).
MULTIMODAL_TOWERS = ("vision_tower", "audio_tower", "multi_modal_projector", "embed_vision", "embed_audio")
#: The config entries that describe those towers (cleared with them, so a merged export is text-only).
_TOWER_CONFIGS = ("vision_config", "audio_config")


def strip_multimodal_towers(model: Any) -> dict[str, int]:
    """Drop the vision/audio towers of a multimodal causal LM (text-only RL never runs them).

    Each tower found (:data:`MULTIMODAL_TOWERS`, on the model or on ``model.model``) is set to None,
    which frees its weights, and the config's ``vision_config``/``audio_config`` are cleared so a
    saved copy is a text-only model. Returns ``{path: parameters freed}`` (empty: nothing to strip).
    """
    freed: dict[str, int] = {}
    holders = [(model, "")]
    inner = getattr(model, "model", None)
    if isinstance(inner, torch.nn.Module) and inner is not model:
        holders.append((inner, "model."))
    for holder, prefix in holders:
        for attr in MULTIMODAL_TOWERS:
            tower = getattr(holder, attr, None)
            if isinstance(tower, torch.nn.Module):
                freed[prefix + attr] = sum(p.numel() for p in tower.parameters())
                setattr(holder, attr, None)
    if freed:
        for config in {id(c): c for c in (getattr(h, "config", None) for h, _ in holders) if c is not None}.values():
            for key in _TOWER_CONFIGS:
                if getattr(config, key, None) is not None:
                    setattr(config, key, None)
        log.info("strip_multimodal_towers: dropped %s (%d parameters)", ", ".join(freed), sum(freed.values()))
    return freed


def scoped_lora_targets(model: Any, target_modules: str | list[str], scope: str) -> list[str]:
    """AgileRL's ``lora_target_scope``: the module paths LoRA targets, only under ``scope``.

    ``target_modules`` names projections (``q_proj``; ``q_proj.linear``, the inner layer of Gemma's
    ClippableLinear, means the same) or ``all-linear``; the result lists every linear layer whose path
    has ``scope`` as a component (``language_model``: the text decoder of a multimodal model) and ends
    in one of those names (or in ``<name>.linear``), as full paths peft matches exactly.
    """
    token = scope.strip(".")
    names = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    wanted = {n.removesuffix(".linear") for n in names}
    found: list[str] = []
    for key, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or token not in key.split("."):
            continue
        parts = key.split(".")
        leaf = parts[-2] if parts[-1] == "linear" and len(parts) > 1 else parts[-1]
        if "all-linear" in wanted:
            if leaf != "lm_head":
                found.append(key)
        elif leaf in wanted:
            found.append(key)
    if not found:
        under = [k for k, _ in model.named_modules() if token in k.split(".")][:3]
        raise ModelLoadError(
            f"lora_target_scope {scope!r}: no linear layer under it matches target_modules {target_modules!r} "
            f"(modules under the scope: {under or 'none'}); check both against the model's module names"
        )
    return found


def training_dtype(device: str | torch.device, *, lora: bool) -> torch.dtype | None:
    """The dtype weights are loaded in for training (None: the checkpoint's own).

    Full fine-tuning always keeps float32 master weights (and so float32 AdamW state): updates of a
    bf16 weight round away below ~1/256 of its size, so pure-bf16 training stalls. Under LoRA the
    frozen base keeps the checkpoint's dtype on GPU (peft keeps the adapter itself in float32);
    on CPU everything is float32 (bf16 matmuls are slow there).
    """
    if not lora or torch.device(device).type == "cpu":
        return torch.float32
    return None


def compute_dtype(device: str | torch.device) -> torch.dtype:
    """The dtype 4-bit layers compute in on ``device``: bfloat16 on a GPU (the QLoRA recipe), float32
    on the CPU, where bf16 matmuls are several times slower (802 vs 90 ms a step measured here)."""
    return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16


def bnb_config(quantization: str | Mapping[str, Any], device: str | torch.device = "cuda") -> Any:
    """``transformers.BitsAndBytesConfig`` for AgileRL's ``quantization`` (``nf4``, ``fp4``, ``int8``, or
    a mapping of ``BitsAndBytesConfig`` arguments). 4-bit presets use double quantization and compute
    in :func:`compute_dtype` of ``device`` (a mapping's own ``bnb_4bit_compute_dtype`` wins);
    ``lm_head`` stays unquantized so log-probs keep full precision."""
    from transformers import BitsAndBytesConfig

    if isinstance(quantization, Mapping):
        kwargs = dict(quantization)
        if isinstance(kwargs.get("llm_int8_threshold"), int):
            kwargs["llm_int8_threshold"] = float(kwargs["llm_int8_threshold"])  # YAML's 6; transformers wants 6.0
        if kwargs.get("load_in_4bit"):
            kwargs.setdefault("bnb_4bit_compute_dtype", compute_dtype(device))
        return BitsAndBytesConfig(**kwargs)
    if quantization == "int8":
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=["lm_head"])
    if quantization in ("nf4", "fp4"):
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=quantization,
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute_dtype(device),
            llm_int8_skip_modules=["lm_head"],
        )
    raise ModelLoadError(f"quantization: unknown preset {quantization!r} (nf4, fp4, int8 or BitsAndBytesConfig args)")


def load_model(
    name_or_path: str | os.PathLike[str],
    *,
    lora_config: Any = None,
    use_separate_reference_adapter: bool = False,
    gradient_checkpointing: bool = False,
    max_model_len: int | None = None,
    attn_implementation: str | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    quantization: str | Mapping[str, Any] | None = None,
    lora_target_scope: str | None = None,
    strip_towers: bool = False,
) -> Any:
    """Load a causal LM for training.

    With ``lora_config`` the result is a peft model whose trainable adapter is ``"actor"``; with
    ``use_separate_reference_adapter`` a frozen ``"reference"`` adapter (a copy of the actor's
    initial weights) is added, otherwise the reference policy is the base with adapters disabled.
    Without LoRA every weight trains and the caller keeps a frozen copy when it needs a reference.
    ``quantization`` (QLoRA, on a CUDA GPU or the CPU): the base is loaded 4-/8-bit through bitsandbytes
    (:func:`bnb_config`), prepared with peft's ``prepare_model_for_kbit_training`` and trained
    through the LoRA adapter. ``strip_towers`` (AgileRL's ``strip_multimodal_towers``) drops a
    multimodal model's vision/audio towers first (:func:`strip_multimodal_towers`);
    ``lora_target_scope`` limits LoRA to the modules under that path (:func:`scoped_lora_targets`).
    """
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(name_or_path)
    device = torch.device(device)
    if dtype is None:
        dtype = training_dtype(device, lora=lora_config is not None)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    else:
        kwargs["dtype"] = "auto"
    if attn_implementation == "flex_attention" and device.type == "cpu":
        # torch's FlexAttention has no backward on the CPU ("does not support backward on CPU"): the
        # same attention, computed by sdpa, which trains there (AgileRL's manifests ask for flex).
        log.warning("attn_implementation: flex_attention cannot train on the CPU (no backward there): using sdpa")
        attn_implementation = "sdpa"
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    quantized = quantization not in (None, "none", "None", False, {})
    if quantized:
        if lora_config is None:
            raise ModelLoadError("quantization (QLoRA) trains a LoRA adapter: it needs network.lora_config")
        if device.type == "cuda":
            target: Any = device.index if device.index is not None else torch.cuda.current_device()
        else:
            target = device.type
        # bitsandbytes quantizes while loading onto the device: the whole model goes there.
        kwargs.update(
            quantization_config=bnb_config(quantization, device),
            device_map={"": target},
            dtype=compute_dtype(device),
        )
    quiet_progress_bars()  # "Loading weights": a bar for a terminal, not a log
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as exc:
        raise ModelLoadError(f"cannot load a causal LM from {str(path)!r}: {type(exc).__name__}: {exc}") from exc
    limit = getattr(model.config, "max_position_embeddings", None)
    if max_model_len is not None and limit is not None and max_model_len > limit:
        log.warning("max_model_len %d exceeds the model's max_position_embeddings %d", max_model_len, limit)
    model.config.use_cache = False
    if strip_towers and not strip_multimodal_towers(model):
        log.warning("strip_multimodal_towers: %s has no vision/audio towers to drop", path)
    if quantized:
        from peft import prepare_model_for_kbit_training

        # Freezes the base, upcasts norms and embeddings to float32, enables input grads for checkpointing.
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    else:
        model.to(device)
    if gradient_checkpointing and not quantized:
        # Non-reentrant checkpointing needs no input that requires grad, so it works under LoRA too.
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora_config is None:
        return model
    from peft import get_peft_model

    peft_cfg = peft_lora_config(lora_config)
    if lora_target_scope:
        peft_cfg.target_modules = scoped_lora_targets(model, peft_cfg.target_modules, lora_target_scope)
    with warnings.catch_warnings():
        # peft probes the deprecated `is_gradient_checkpointing` on transformers 5: noise, not a problem.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        model = get_peft_model(model, peft_cfg, adapter_name=ACTOR)
    if use_separate_reference_adapter:
        model.add_adapter(REFERENCE, peft_cfg)
        copy_adapter(model, ACTOR, REFERENCE)
        model.set_adapter(ACTOR)
    freeze_except_actor(model)
    return model


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def adapter_names(model: Any) -> list[str]:
    return list(getattr(model, "peft_config", {}) or {})


def _adapter_params(model: Any, adapter: str) -> dict[str, torch.nn.Parameter]:
    marker = f".{adapter}."
    return {n: p for n, p in model.named_parameters() if marker in n and "lora_" in n}


def copy_adapter(model: Any, src: str, dst: str) -> None:
    """Copy the weights of adapter ``src`` into adapter ``dst`` (same config)."""
    source = _adapter_params(model, src)
    target = _adapter_params(model, dst)
    with torch.no_grad():
        for name, param in source.items():
            target[name.replace(f".{src}.", f".{dst}.")].copy_(param)


def freeze_except_actor(model: Any) -> None:
    """Only the actor adapter trains: the base and the reference adapter stay frozen."""
    for name, param in model.named_parameters():
        param.requires_grad_(f".{ACTOR}." in name and "lora_" in name)


@contextlib.contextmanager
def reference_policy(model: Any, reference_model: Any = None) -> Iterator[Any]:
    """Run the reference policy: a frozen copy, the ``reference`` adapter, or the adapter-disabled base.

    Yields the module to call. Gradients are off inside.
    """
    with torch.no_grad():
        if reference_model is not None:
            yield reference_model
        elif is_peft(model) and REFERENCE in adapter_names(model):
            layers = _plain_lora_layers(model)
            if layers is not None:  # switch each layer's adapter: PEFT's set_adapter also walks every parameter
                with _layers_set(layers, "_active_adapter", [REFERENCE]):
                    yield model
                return
            model.set_adapter(REFERENCE)
            try:
                yield model
            finally:
                model.set_adapter(ACTOR)
                freeze_except_actor(model)
        elif is_peft(model):
            layers = _plain_lora_layers(model)
            if layers is not None:  # PEFT's disable_adapter also builds a model status report each time
                with _layers_set(layers, "_disable_adapters", True), _attr_set(model, "_adapters_disabled", True):
                    yield model
                return
            with model.disable_adapter():
                yield model
        else:
            raise ValueError("no reference policy: full fine-tuning needs a frozen reference_model")


def _plain_lora_layers(model: Any) -> list[Any] | None:
    """The model's LoRA layers when they are all it has of PEFT (no modules_to_save, trainable tokens or
    other tuner kinds) and none is merged: then switching an adapter off, or to another, is a flag on
    each layer that its forward reads, and the requires_grad bookkeeping PEFT's own switch does (the
    reference runs without gradients) can be skipped. None otherwise (use PEFT's switch)."""
    adapters = tuple(adapter_names(model))  # the layers change only when adapters are added or removed
    cached = _LORA_LAYERS.get(model)
    if cached is None or cached[0] != adapters:
        cached = _LORA_LAYERS[model] = (adapters, _find_plain_lora_layers(model))
    layers = cached[1]
    if layers is None or any(layer.merged for layer in layers):
        return None
    return layers


_LORA_LAYERS: weakref.WeakKeyDictionary[Any, tuple[tuple[str, ...], list[Any] | None]] = weakref.WeakKeyDictionary()


def _find_plain_lora_layers(model: Any) -> list[Any] | None:
    try:
        from peft.tuners.lora.layer import LoraLayer
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper
    except ImportError:
        return None
    layers = []
    for module in model.modules():
        if isinstance(module, AuxiliaryTrainingWrapper):
            return None
        if isinstance(module, BaseTunerLayer):
            if not isinstance(module, LoraLayer):
                return None
            layers.append(module)
    return layers


@contextlib.contextmanager
def _layers_set(layers: list[Any], attr: str, value: Any) -> Iterator[None]:
    before = [getattr(layer, attr) for layer in layers]
    try:
        for layer in layers:
            setattr(layer, attr, value)
        yield
    finally:
        for layer, old in zip(layers, before, strict=True):
            setattr(layer, attr, old)


@contextlib.contextmanager
def _attr_set(obj: Any, attr: str, value: Any) -> Iterator[None]:
    before = getattr(obj, attr, None)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, before)


def export_merged(model: Any, tokenizer: Any, path: str | os.PathLike[str]) -> Path:
    """Write a plain Hugging Face model directory: the actor adapter merged into a copy of the base."""
    import copy

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    if is_peft(model):
        twin = copy.deepcopy(model)
        twin.set_adapter(ACTOR)
        for name in adapter_names(twin):
            if name != ACTOR:
                twin.delete_adapter(name)
        merged = twin.merge_and_unload()
    else:
        merged = model
    merged.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """The trainable weights (LoRA actor adapter, or every weight without LoRA) as CPU copies (whole
    tensors: under FSDP every process must call it, as it gathers the shards)."""
    return {n: full(p.detach()).to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad}


def load_weights(model: Any, weights: Mapping[str, torch.Tensor], *, what: str = "weights") -> None:
    """Copy named tensors into the model's parameters (names as in ``named_parameters``)."""
    params = dict(model.named_parameters())
    missing = [n for n in weights if n not in params]
    if missing:
        raise AgileRLError(
            f"checkpoint {what} do not fit this model: {len(missing)} unknown tensors (e.g. {missing[0]!r}); "
            "was it saved with a different model or lora_config?"
        )
    with torch.no_grad():
        for name, tensor in weights.items():
            params[name].copy_(like(tensor, params[name]))  # a whole tensor, or its shard under FSDP


def rebind_frozen(model: Any, sources: dict[str, str], *, tensors: Mapping[str, torch.Tensor] | None = None) -> None:
    """Give parameters new frozen tensors: ``sources`` maps a source parameter to the one to replace
    (a copy of the source's values); ``tensors`` maps a parameter to its new values."""
    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    updates = {dst: params[src].detach() for src, dst in sources.items()}
    updates.update(tensors or {})
    for name, value in updates.items():
        owner, _, attr = name.rpartition(".")
        old = params[name]
        if is_dtensor(old):  # FSDP owns its parameters: write the shard (never shared by clones)
            with torch.no_grad():
                old.copy_(value if is_dtensor(value) else like(value, old))
            continue
        new = torch.nn.Parameter(value.to(old.device, old.dtype).clone(), requires_grad=False)
        setattr(modules[owner], attr, new)


__all__ = [
    "ACTOR",
    "REFERENCE",
    "ChatTemplateError",
    "ModelLoadError",
    "adapter_names",
    "check_chat_template",
    "compute_dtype",
    "copy_adapter",
    "export_merged",
    "freeze_except_actor",
    "is_peft",
    "load_model",
    "load_tokenizer",
    "load_weights",
    "peft_lora_config",
    "rebind_frozen",
    "reference_policy",
    "resolve_model_path",
    "scoped_lora_targets",
    "strip_multimodal_towers",
    "trainable_state",
    "training_dtype",
]
