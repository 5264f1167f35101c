"""What a run will need, checked before it waits on it (issue 27): a Ray cluster address that
accepts no connection fails at once, naming it; a Ray request this machine cannot meet is refused
at validation. (The corpus cases are in tests/data/bad/, run by tests/test_bad_inputs.py.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
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


#: A Ray head of one CPU in its own process (``ray.init`` starts a real local cluster): prints its
#: GCS address, then holds the cluster until its stdin closes and shuts it down (its own processes only).
RAY_HEAD = """
import sys, ray
ctx = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
print("GCS", ctx.address_info["gcs_address"], flush=True)
sys.stdin.read()
ray.shutdown()
print("STOPPED", flush=True)
"""


def ray_env() -> dict[str, str]:
    """This process's environment for Ray's head and the run: one thread, no RAY_ADDRESS, and Ray's token
    auth (on by default for a new local cluster; a driver given an address needs the mode and the token)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "AGILERL_TRACEBACK", "RAY_AUTH_TOKEN_PATH")}
    return {**env, "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": RAY_TOKEN}


RAY_TOKEN = uuid.uuid4().hex + uuid.uuid4().hex


@pytest.fixture
def one_cpu_ray_cluster() -> Iterator[str]:
    yield from _ray_head(ray_env())


def _ray_head(env: dict[str, str]) -> Iterator[str]:
    pytest.importorskip("ray")
    head = subprocess.Popen(
        [sys.executable, "-c", RAY_HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env=env,
    )  # fmt: skip
    assert head.stdin is not None and head.stdout is not None
    try:
        line = head.stdout.readline()
        assert line.startswith("GCS "), f"the Ray head did not start: {line!r}"
        yield line.split()[1]
    finally:
        head.stdin.close()  # the head shuts its cluster down and exits
        rest = head.stdout.read()
        assert head.wait(timeout=120) == 0 and "STOPPED" in rest


@pytest.mark.slow  # ~20 s: a Ray head and a run that connects to it, each its own process
def test_num_cpus_per_member_above_the_clusters_largest_node_fails_when_the_run_connects(
    tmp_path: Path, one_cpu_ray_cluster: str
) -> None:
    """With ray_address the machine running validation is not the limit (the cluster is); the run,
    once connected, compares num_cpus_per_member with the cluster's largest node and stops, naming
    both numbers, instead of waiting forever for an actor no node can hold."""
    address = one_cpu_ray_cluster
    training = {**PPO["training"], "ray_address": address, "num_cpus_per_member": 2, "run_dir": str(tmp_path / "run")}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({**PPO, "training": training}))
    proc = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "train", str(tmp_path / "m.yaml")],
        cwd=tmp_path, capture_output=True, text=True, env=ray_env(), check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert (
        "error: training.num_cpus_per_member: 2 CPUs per member, but the largest node of the Ray cluster has 1; "
        "lower num_cpus_per_member or add larger nodes"
    ) in out, out
    assert "Traceback" not in out and not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.slow  # ~30 s: a Ray head and a short run on it, each its own process
def test_a_cluster_with_rays_default_token_auth_is_joined_with_the_token_file_alone(tmp_path: Path) -> None:
    """Ray (2.59+) starts a new cluster with token authentication and keeps the token in
    ``~/.ray/auth_token``; a driver given the address connects without it unless RAY_AUTH_MODE=token,
    after ~20 s of retries and a "cannot reach" error. The run sets the mode when a token is at hand, so
    the address alone is enough, as the docs say (`ray start --head`, then ray_address)."""
    home = tmp_path / "home"
    home.mkdir()
    plain = {k: v for k, v in ray_env().items() if not k.startswith("RAY_AUTH")}
    env = {**plain, "HOME": str(home)}
    for address in _ray_head(env):
        assert (home / ".ray" / "auth_token").is_file(), "Ray did not start this cluster with token auth"
        training = {**PPO["training"], "ray_address": address, "run_dir": str(tmp_path / "run")}
        (tmp_path / "m.yaml").write_text(yaml.safe_dump({**PPO, "training": training}))
        proc = subprocess.run(
            [sys.executable, "-m", "agilerl.cli", "train", str(tmp_path / "m.yaml")],
            cwd=tmp_path, capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert (tmp_path / "run" / "metrics.jsonl").is_file()
