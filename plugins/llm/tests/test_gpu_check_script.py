"""``scripts/gpu_check.sh`` runs only on a CUDA machine; here it is kept valid: the shell script parses,
its Python checks import, every check the shell documents exists, its vLLM checks are the CPU
suite's own test files, and without CUDA it says so and exits 2."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import torch

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


def test_its_vllm_checks_run_the_cpu_suites_test_files_on_cuda() -> None:
    module = gpu_check()
    assert set(module.VLLM_TESTS) <= set(module.CHECKS)
    for path in module.VLLM_TESTS.values():
        text = path.read_text()
        assert 'os.environ.get("AGILERL_TEST_DEVICE", "cpu")' in text  # the device the tests train on
        assert "@pytest.mark.vllm" in text or "pytest.mark.vllm" in text  # what `-m vllm` selects


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_without_cuda_it_checks_nothing_and_exits_2(tmp_path: Path) -> None:
    assert gpu_check().main([str(tmp_path)]) == 2
    assert gpu_check().main([str(tmp_path), "nonsense"]) == 2
