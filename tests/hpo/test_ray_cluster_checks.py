"""``training.backend: ray`` at connect: a dead cluster named in Ray's temp dir is not joined, and a worker
whose node lacks one of the driver's plugins stops the run before any training, naming the node and plugin.

Each run is a driver process of its own with a Ray temp dir of its own (``RAY_TMPDIR``), so no other Ray on
this machine is seen or joined.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="the Ray backend needs the extra: pip install 'agilerl-core[ray]'")

#: Two PPO members on CartPole, one short generation: only the connection is under test.
TINY_PPO: dict[str, Any] = {
    "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32, "update_epochs": 1},
    "environment": {"name": "CartPole-v1", "num_envs": 2},
    "network": {"latent_dim": 16, "arch": "mlp", "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}},
    "training": {"pop_size": 2, "max_steps": 128, "evo_steps": 128, "eval_loop": 1, "eval_steps": 50,
                 "seed": 3, "progress": False, "save_elite": False, "backend": "ray", "ray_workers": 2},
}  # fmt: skip

#: argv: the manifest; the JSON runtime_env of a Ray this driver starts itself ("" for none: the run starts it).
DRIVER = r"""
import json, sys
from agilerl import LocalTrainer
if sys.argv[2]:
    import ray
    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env=json.loads(sys.argv[2]))
result = LocalTrainer.from_manifest(json.loads(sys.argv[1])).train()
print("FITNESSES", json.dumps(result.fitnesses), flush=True)
"""


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """A short Ray temp dir (its socket paths must stay under the OS limit), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _drive(
    manifest: dict[str, Any], ray_tmp: Path, runtime_env: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AGILERL_STRICT_PLUGINS": "1", "RAY_TMPDIR": str(ray_tmp)}
    for key in ("RAY_ADDRESS", "AGILERL_LOAD_PLUGINS", "AGILERL_DISABLE_PLUGINS"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(manifest), json.dumps(runtime_env) if runtime_env else ""],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ~10 s: a local Ray instance started and stopped in a driver process
def test_a_dead_cluster_named_in_the_ray_temp_dir_does_not_break_a_run_without_ray_address(
    ray_tmp: Path, tmp_path: Path
) -> None:
    # What `ray start --head` leaves behind when its cluster dies without cleanup.
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{_closed_port()}")
    manifest = json.loads(json.dumps(TINY_PPO))
    manifest["training"]["run_dir"] = str(tmp_path / "run")
    proc = _drive(manifest, ray_tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(line.startswith("FITNESSES ") for line in proc.stdout.splitlines())


# ~10 s: a local Ray instance whose workers load one plugin fewer than the driver
def test_a_worker_missing_a_plugin_of_the_driver_stops_the_run_naming_node_and_plugin(
    ray_tmp: Path, tmp_path: Path
) -> None:
    from agilerl.training.ray_backend import loaded_plugins

    plugins = loaded_plugins()
    # A plugin this manifest does not use: the workers could build their strategy without it.
    missing = next(d for d in ("agilerl-plugin-bandit", "agilerl-plugin-openenv") if d in plugins)
    manifest = json.loads(json.dumps(TINY_PPO))
    manifest["training"]["run_dir"] = str(tmp_path / "run")
    # The workers' environment differs from the driver's, as a node installed without that plugin would.
    proc = _drive(manifest, ray_tmp, {"env_vars": {"OMP_NUM_THREADS": "1", "AGILERL_DISABLE_PLUGINS": missing}})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "AgileRLError" in out and "does not have this driver's plugins" in out, out
    assert f"{missing} {plugins[missing]} is not loaded there" in out, out
    assert "Install the same packages on every node" in out and "docs/distributed.md" in out, out
    assert "Ray node " in out, out
    assert "FITNESSES" not in out and not (tmp_path / "run" / "metrics.jsonl").exists()
