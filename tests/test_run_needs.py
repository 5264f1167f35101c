"""What a run will need, checked before it waits on it (issue 27): a Ray cluster address that
accepts no connection fails at once, naming it; a Ray request this machine cannot meet is refused
at validation. (The corpus cases are in tests/data/bad/, run by tests/test_bad_inputs.py.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agilerl.checks import backend_problems
from agilerl.models import validate_manifest

ROOT = Path(__file__).resolve().parents[1]
PPO = {
    "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32},
    "environment": {"name": "CartPole-v1", "num_envs": 2},
    "training": {"max_steps": 256, "evo_steps": 128, "pop_size": 2, "progress": False, "backend": "ray"},
}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the block ends: nothing listens there


def test_a_ray_address_nothing_listens_on_fails_before_ray_starts(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    manifest = {**PPO, "training": {**PPO["training"], "ray_address": address, "run_dir": str(tmp_path / "run")}}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest))
    script = (
        "import sys\nfrom agilerl.cli import main\nrc = main(['train', sys.argv[1]])\n"
        "print('RC', rc, 'ray imported:', 'ray' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "AGILERL_TRACEBACK")}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "m.yaml")],
        cwd=tmp_path, capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"}, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "RC 1 ray imported: False" in out, out  # refused before ray.init (which retries for minutes)
    assert f"training.ray_address: cannot reach a Ray cluster at '{address}'" in out
    assert "ray start --head" in out and "Traceback" not in out


def test_ray_workers_beyond_this_machine_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # validate here whatever this machine has
    manifest = validate_manifest({**PPO, "training": {**PPO["training"], "pop_size": 4, "ray_workers": 4}})
    half = validate_manifest({**PPO, "training": {**PPO["training"], "num_cpus_per_member": 3}})
    monkeypatch.delenv("RAY_ADDRESS")
    assert backend_problems(manifest, cpus=4) == []
    (problem,) = backend_problems(manifest, cpus=2)
    assert problem.path == "training.ray_workers"
    assert "4 workers x 1 CPUs" in problem.message and "Use at most 2 workers" in problem.message
    (problem,) = backend_problems(half, cpus=2)
    assert problem.path == "training.num_cpus_per_member" and "use at most 2" in problem.message


def test_against_a_cluster_the_machine_is_not_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    manifest = validate_manifest(
        {**PPO, "training": {**PPO["training"], "num_cpus_per_member": 64, "ray_address": "10.0.0.1:6379"}}
    )
    assert backend_problems(manifest, cpus=2) == []  # the cluster's nodes are checked when the run connects


def test_an_address_that_is_not_ray_fails_at_once_and_a_real_cluster_passes() -> None:
    """``ray.init`` retries an address that accepts connections but is not Ray's GCS for minutes:
    the probe asks it for gRPC's HTTP/2 handshake first (a real Ray head answers it)."""
    import threading
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    from agilerl.errors import AgileRLError
    from agilerl.training.backend import probe_ray_address

    server = HTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        with pytest.raises(AgileRLError, match=f"'{address}' accepts connections but does not answer as a Ray"):
            probe_ray_address(address)
    finally:
        server.shutdown()
    ray = pytest.importorskip("ray")
    context = ray.init(include_dashboard=False, num_cpus=1) if not ray.is_initialized() else None
    try:
        gcs = context.address_info["gcs_address"] if context else ray.get_runtime_context().gcs_address
        probe_ray_address(gcs)  # a Ray head answers the handshake
    finally:
        if context is not None:
            ray.shutdown()
