"""Nothing reaches the network at run time: a run trains with every socket connection refused, and a
Hub dataset id that is not in the local cache is a clear error, not a download attempt. The child
process runs without HF_HUB_OFFLINE, so this holds without the user setting it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"

#: Runs ``agilerl <args>`` with socket connections and name lookups refused; prints the attempts as JSON on the last line.
CHILD = """
import json, socket, sys
attempts = []
def refuse(self, address, *args, **kwargs):
    attempts.append(repr(address))
    raise OSError("networking is off in this test")
def no_lookup(host, *args, **kwargs):
    attempts.append(repr(host))
    raise socket.gaierror("networking is off in this test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.getaddrinfo = no_lookup
from agilerl.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "attempts": attempts}))
"""


def run_offline(tmp_path: Path, manifest: dict[str, Any]) -> tuple[dict[str, Any], str]:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(OMP_NUM_THREADS="1", HF_HOME=str(tmp_path / "hf-home"))  # an empty cache
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "train", str(path)], capture_output=True, text=True, env=env, check=False
    )
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


def manifest(model_dir: Path, tmp_path: Path, environment: dict[str, Any]) -> dict[str, Any]:
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "max_output_tokens": 4,
                      "gradient_checkpointing": False},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
        "environment": {"env_type": "reasoning", "rubric_file_path": str(EXAMPLES / "say_word_rubric.py"),
                        **environment},
        "training": {"max_steps": 1, "evo_steps": 1, "progress": False, "run_dir": str(tmp_path / "run")},
    }  # fmt: skip


def test_a_run_trains_with_the_network_off(tiny_model_dir: Path, tmp_path: Path) -> None:
    result, text = run_offline(tmp_path, manifest(tiny_model_dir, tmp_path,
                                                  {"dataset_path": str(EXAMPLES / "say_eight.jsonl")}))  # fmt: skip
    assert result == {"code": 0, "attempts": []}, text
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


def test_an_uncached_hub_dataset_is_an_error_without_a_download_attempt(tiny_model_dir: Path, tmp_path: Path) -> None:
    result, text = run_offline(tmp_path, manifest(tiny_model_dir, tmp_path, {"dataset": "openai/gsm8k"}))
    assert result["attempts"] == [], text
    assert result["code"] != 0 and "never downloads" in text, text
