"""Piped output holds no Hugging Face progress bars (issue 38): ``Generating train split`` (datasets)
and ``Loading weights`` (transformers) are drawn for a terminal; a log gets the run's own lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parents[3] / "examples" / "data" / "llm"


def test_a_piped_sft_run_prints_no_hugging_face_progress_bars(tiny_model_dir: Path, tmp_path: Path) -> None:
    manifest = {
        "algorithm": {"name": "SFT", "batch_size": 4, "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": str(tiny_model_dir), "max_context_length": 64},
        "environment": {"env_type": "dataset", "dataset_path": str(DATA / "sft_tiny.jsonl")},
        "training": {"max_steps": 8, "evo_steps": 8, "seed": 0},
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(manifest))
    env = {k: v for k, v in os.environ.items() if "PROGRESS_BARS" not in k}
    env["HF_DATASETS_CACHE"] = str(tmp_path / "hf-datasets")  # a fresh cache: the split is generated
    proc = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "train", str(path), "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout + proc.stderr
    assert "Generating train split" not in said and "Loading weights" not in said, said
    assert "\r" not in said  # no bar redrawn in place
    assert "done: " in proc.stdout
