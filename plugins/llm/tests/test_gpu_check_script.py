"""``scripts/gpu_check.sh`` runs only on a CUDA machine; here it is kept valid: the shell script parses,
its Python checks import, every check the shell documents exists, the manifests it trains validate
where they can on this machine, and without CUDA it says so and exits 2."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import torch

from agilerl.models import load_manifest

ROOT = Path(__file__).resolve().parents[3]


def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shell_script_parses_and_names_every_check() -> None:
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")], check=True)
    module = gpu_check()
    assert set(module.CHECKS) == set(module.RUNNERS)
    text = (ROOT / "scripts" / "gpu_check.sh").read_text()
    for name in module.CHECKS:
        assert f"{name}:" in text  # the header lists what runs


def test_the_server_mode_manifest_it_trains_validates(tiny_model_dir: Path, tmp_path: Path) -> None:
    module = gpu_check()
    lora = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0}
    manifest = module.grpo_manifest(tiny_model_dir, tmp_path, steps=3, use_vllm=True, network={"lora_config": lora},
                                    vllm_config={"mode": "server", "server_base_url": "http://127.0.0.1:1"})  # fmt: skip
    manifest["training"]["device"] = "cpu"  # validation refuses cuda where there is none
    assert load_manifest(manifest).algorithm.generation_backend == "vllm_server"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_without_cuda_it_checks_nothing_and_exits_2(tmp_path: Path) -> None:
    assert gpu_check().main([str(tmp_path)]) == 2
    assert gpu_check().main([str(tmp_path), "nonsense"]) == 2
