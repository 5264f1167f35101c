"""AgileRL's multimodal fields on a tiny multimodal checkpoint built here (Gemma 4's layout: a text
decoder under ``model.language_model``, vision and audio towers with ClippableLinear projections):
``vllm_config.strip_multimodal_towers`` drops the towers before training, and
``lora_target_scope: language_model`` puts LoRA on the text decoder only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_llm.model import ModelLoadError, load_model, scoped_lora_targets
from agilerl_plugin_llm.testing import build_tiny_multimodal_model

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"
#: The manifests' targets (cispo_quant_bench, reinforce_quant_bench): ClippableLinear's inner layers.
CLIPPABLE_TARGETS = ["q_proj.linear", "k_proj.linear", "v_proj.linear", "o_proj.linear",
                     "up_proj.linear", "down_proj.linear", "gate_proj.linear"]  # fmt: skip
TOWERS = ("vision_tower", "audio_tower", "embed_vision", "embed_audio")


@pytest.fixture(scope="module")
def mm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_multimodal_model(tmp_path_factory.mktemp("mm") / "model")


def lora_paths(model: Any) -> set[str]:
    return {n.split(".lora_A")[0] for n, _ in model.named_parameters() if ".lora_A." in n}


def test_stripping_drops_the_towers_and_leaves_the_text_model_unchanged(mm_dir: Path) -> None:
    full = load_model(mm_dir)
    stripped = load_model(mm_dir, strip_towers=True)
    assert all(getattr(full.model, t) is not None for t in TOWERS)
    assert all(getattr(stripped.model, t) is None for t in TOWERS)
    assert not [n for n, _ in stripped.named_parameters() if any(t in n for t in TOWERS)]
    n_full, n_text = (sum(p.numel() for p in m.parameters()) for m in (full, stripped))
    assert n_text < 0.95 * n_full, (n_text, n_full)
    assert stripped.config.vision_config is None and stripped.config.audio_config is None  # a text-only copy
    ids = torch.randint(6, 300, (2, 12))
    with torch.no_grad():
        assert torch.equal(full(input_ids=ids).logits, stripped(input_ids=ids).logits)  # towers unused on text


def test_lora_target_scope_puts_the_adapter_on_the_language_model_only(mm_dir: Path) -> None:
    lora = {"lora_r": 4, "lora_dropout": 0.0, "target_modules": CLIPPABLE_TARGETS}
    # Unscoped, peft's suffix match finds `.linear` only inside the towers' ClippableLinear wrappers.
    unscoped = lora_paths(load_model(mm_dir, lora_config=lora))
    assert unscoped and all("vision_tower" in p or "audio_tower" in p for p in unscoped)
    scoped = lora_paths(load_model(mm_dir, lora_config=lora, lora_target_scope="language_model"))
    assert scoped and all(".language_model." in p for p in scoped)
    leaves = {p.rsplit(".", 1)[-1] for p in scoped}
    assert leaves == {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"}
    assert len(scoped) == 2 * 7  # every projection of both decoder layers
    # all-linear under the scope: every linear layer of the text decoder (never lm_head).
    model = load_model(mm_dir)
    everything = scoped_lora_targets(model, "all-linear", "language_model")
    assert set(everything) >= {p.removeprefix("base_model.model.") for p in scoped}
    with pytest.raises(ModelLoadError, match="no linear layer under it matches"):
        scoped_lora_targets(model, ["q_proj"], "text_decoder")


def grpo_manifest(model_dir: Path, run_dir: Path, **algo: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "lr": 0.01, "beta": 0.0,
                      "max_output_tokens": 4, "temperature": 1.0, "gradient_checkpointing": False, **algo},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128,
                    "lora_config": {"lora_r": 4, "lora_alpha": 16, "lora_dropout": 0.0,
                                    "target_modules": CLIPPABLE_TARGETS}},
        "environment": {"env_type": "reasoning", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"), "max_reward": 1.0},
        "training": {"max_steps": 3, "evo_steps": 3, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }  # fmt: skip


def test_a_scope_without_lora_is_refused(mm_dir: Path, tmp_path: Path) -> None:
    data = grpo_manifest(mm_dir, tmp_path, lora_target_scope="language_model")
    del data["network"]["lora_config"]
    with pytest.raises(ManifestError, match="lora_target_scope: it limits the LoRA adapter"):
        load_manifest(data)


def test_grpo_trains_the_text_decoder_of_a_stripped_multimodal_model_from_agilerl_fields(
    mm_dir: Path, tmp_path: Path, write_manifest: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    run = tmp_path / "run"
    # A graded reward, so that a random tiny model's group members differ (GRPO learns from differences).
    rubric = tmp_path / "count_e.py"
    rubric.write_text("def reward_fn(completion, answer, question):\n    return completion.count('e') / 4\n")
    # AgileRL's spelling: strip_multimodal_towers under vllm_config (here with HF generation).
    manifest = grpo_manifest(
        mm_dir, run, lora_target_scope="language_model", use_vllm=False,
        vllm_config={"strip_multimodal_towers": True}, group_size=4,
    )  # fmt: skip
    manifest["environment"]["rubric_file_path"] = str(rubric)
    spec = load_manifest(manifest).algorithm
    assert spec.strip_multimodal_towers and spec.lora_target_scope == "language_model"
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("train/grad_norm", 0.0) > 0.0 for r in rows), rows
    state = torch.load(run / "last.pt", map_location="cpu", weights_only=False)
    weights = {k: v for k, v in _tensors(state) if "lora_B" in k}
    assert weights and all(".language_model." in k for k in weights), sorted(weights)[:4]
    assert any(float(v.abs().sum()) > 0 for v in weights.values())  # lora_B starts at zero: it trained


def _tensors(obj: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """Every named tensor in a nested checkpoint (dicts and lists)."""
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    if isinstance(obj, dict):
        return [kv for k, v in obj.items() for kv in _tensors(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(obj, (list, tuple)):
        return [kv for i, v in enumerate(obj) for kv in _tensors(v, f"{prefix}.{i}")]
    return []
