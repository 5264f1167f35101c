"""Validation reads what a run will need from the local model, without loading it (issue 38): LoRA
target modules the model does not have are refused by name at validation (peft would refuse them
only once the model loads, at train), from the weights' tensor names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agilerl.errors import ManifestError
from agilerl.models.manifest import validate_manifest

DATA = Path(__file__).resolve().parents[3] / "examples" / "data" / "llm"


def _sft(model_dir: Path, target_modules: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "SFT", "batch_size": 4},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 64,
                    "lora_config": {"lora_r": 4, "lora_alpha": 8, "target_modules": target_modules}},
        "environment": {"env_type": "dataset", "dataset_path": str(DATA / "sft_tiny.jsonl")},
        "training": {"max_steps": 4, "progress": False},
    }  # fmt: skip


def test_lora_target_modules_the_model_lacks_are_refused_at_validation(tiny_model_dir: Path) -> None:
    with pytest.raises(ManifestError) as info:
        validate_manifest(_sft(tiny_model_dir, ["q_projj", "v_proj"]))
    said = str(info.value)
    assert "network.lora_config.target_modules: 'q_projj' (did you mean 'q_proj'?): no such module" in said, said
    assert "'v_proj'" not in said.split("(its modules")[0].replace("'q_projj'", "")  # v_proj exists
    # what the model has, a peft regular expression (a string) and all-linear all validate
    for ok in (["q_proj", "v_proj"], ["self_attn.o_proj"], "all-linear", r".*\.(q|v)_proj"):
        validate_manifest(_sft(tiny_model_dir, ok))
