"""``training.backend: ray`` on a real two-node Ray cluster on this machine, and a node lost mid-generation.

The cluster runs in a process of its own (``ray.cluster_utils.Cluster``: a head node and a worker node of one
CPU each, real raylets, each node at this machine's own address), and every run joins it by
``training.ray_address`` from a fresh process, as a user's driver would. The runs must give the fitnesses
the local backend gives for the same seed, with members trained on both nodes (as Ray reports the worker
actors' nodes), and the same fitnesses again when the worker node's raylet is killed while it trains a member.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agilerl import LocalTrainer

#: test_ray_backend's population (4 PPO members on CartPole) for two generations of 256 steps.
PPO_CARTPOLE: dict[str, Any] = yaml.safe_load((Path(__file__).parent / "ppo_population.yaml").read_text())
PPO_CARTPOLE["training"].update(max_steps=512, evo_steps=256)

pytest.importorskip("ray", reason="the Ray backend needs the extra: pip install 'agilerl-core[ray]'")

#: A head and worker nodes (argv: their CPUs, how many worker nodes); prints the address and the node ids, head
#: first. ``kill-when-stepping`` on stdin waits (bounded) until a member is being trained on a worker node, then
#: kills that node's raylet and its workers (no graceful exit); ``add-node`` adds a worker node like the others. At EOF the cluster shuts
#: down.
CLUSTER = r"""
import os, sys, time
from pathlib import Path
from ray.cluster_utils import Cluster

head_cpus, worker_cpus, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "include_dashboard": False})
nodes = [cluster.add_node(num_cpus=worker_cpus) for _ in range(count)]
cluster.wait_for_nodes()
print("ADDR", cluster.address, cluster.head_node.node_id, *(n.node_id for n in nodes), flush=True)

def children(pid):
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(proc.name))
            except (OSError, ValueError, IndexError):
                pass
    return out

for line in sys.stdin:
    if line.strip() == "kill-when-stepping":
        deadline = time.monotonic() + 120
        found = None
        while found is None and time.monotonic() < deadline:
            for node in nodes:
                for pid in children(node.all_processes["raylet"][0].process.pid):
                    try:
                        title = Path(f"/proc/{pid}/cmdline").read_bytes()
                        if b"ray::MemberWorker.step" in title or b"ray::MemberWorker.generation" in title:
                            found = node
                    except OSError:
                        pass
            time.sleep(0.02)
        node = found or nodes[0]
        nodes.remove(node)
        cluster.remove_node(node, allow_graceful=False)
        print("KILLED" if found else "NOT-SEEN", flush=True)
    elif line.strip() == "add-node":
        node = cluster.add_node(num_cpus=worker_cpus)
        nodes.append(node)
        cluster.wait_for_nodes()
        print("ADDED", node.node_id, flush=True)
cluster.shutdown()
print("STOPPED", flush=True)
"""

#: A driver of its own (Ray not yet initialised in it): trains the manifest (resumed from the checkpoint
#: argv[2] if given), prints the fitnesses.
DRIVER = r"""
import json, logging, sys
from agilerl import LocalTrainer, load_manifest
logging.basicConfig(level=logging.INFO)
resume = sys.argv[2] if len(sys.argv) > 2 else None
result = LocalTrainer(load_manifest(json.loads(sys.argv[1])), resume_from=resume).train()
print("FITNESSES", json.dumps(result.fitnesses), flush=True)
"""


class RayCluster:
    def __init__(self, head_cpus: int = 1, worker_cpus: int = 1, worker_nodes: int = 1) -> None:
        self.log = tempfile.TemporaryFile("w+")
        # A Ray temp dir of its own (short: Ray's socket paths live under it), shared with the drivers: another
        # Ray instance on this machine (a test's local one) keeps its sessions apart.
        self.tmpdir = tempfile.mkdtemp(prefix="agray", dir="/tmp")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLUSTER, str(head_cpus), str(worker_cpus), str(worker_nodes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            # Without authentication, whatever a local Ray started earlier in this process left in its environment
            # (ray.init sets RAY_AUTH_MODE=token in os.environ for a new local instance).
            env={**{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}, "RAY_TMPDIR": self.tmpdir,
                 "RAY_AUTH_MODE": "disabled"},
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("ADDR "):
            self.log.seek(0)
            raise AssertionError(f"the two-node cluster did not start: {line!r}\n{self.log.read()[-3000:]}")
        self.address, self.head, *self.workers = line.split()[1:]
        self.worker = self.workers[0]

    def stop(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        assert self.proc.wait(timeout=120) == 0 and "STOPPED" in rest
        self.log.close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[RayCluster]:
    cluster = RayCluster()
    try:
        yield cluster
    finally:
        cluster.stop()


def _manifest(tmp: Path, name: str, **training: Any) -> dict[str, Any]:
    m = copy.deepcopy(PPO_CARTPOLE)
    m["training"].update({"run_dir": str(tmp / name), **training})
    return m


def _drive(
    manifest: dict[str, Any], home: Path, cluster: RayCluster, resume: Path | None = None, fails: bool = False
) -> tuple[list[list[float]], str]:
    """Run ``manifest`` in a driver process of its own: its fitnesses and its output (``fails``: it must fail;
    no fitnesses then).

    Its home holds a Ray token, as any machine that ever ran a local Ray (2.59+) does: the cluster above
    uses no authentication, and a driver that took the token's presence for the cluster's mode had every
    worker's creation cancelled ("The actor never ran")."""
    (home / ".ray").mkdir(parents=True, exist_ok=True)
    (home / ".ray" / "auth_token").write_text(uuid.uuid4().hex * 2)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AGILERL_STRICT_PLUGINS": "1", "HOME": str(home),
           "RAY_TMPDIR": cluster.tmpdir}  # fmt: skip
    for key in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(key, None)
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(manifest), *([str(resume)] if resume else [])], capture_output=True,
        text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    if fails:
        assert proc.returncode != 0 and "FITNESSES" not in proc.stdout, out
        return [], out
    assert proc.returncode == 0, out
    line = next(x for x in proc.stdout.splitlines() if x.startswith("FITNESSES "))
    return json.loads(line.split(" ", 1)[1]), out


def _member_workers_left(cluster: RayCluster) -> list[str]:
    """The worker actors' processes still alive once the run is over: processes titled ``ray::MemberWorker...``
    (Ray's title for the actor's process) started under this cluster's Ray temp dir, on either node, orphaned or
    not. Ray ends a killed actor's process asynchronously: they are looked for until none is left, at most 60 s
    (a bound, not a timing: the ones still there are returned)."""
    mine = f"RAY_TMPDIR={cluster.tmpdir}".encode()
    deadline = time.monotonic() + 60
    while True:
        left = []
        for proc in Path("/proc").iterdir():
            try:
                title = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
                if title.startswith(b"ray::MemberWorker") and mine in (proc / "environ").read_bytes().split(b"\0"):
                    left.append(f"{proc.name}: {title.split(bytes(1))[0].decode(errors='replace')}")
            except OSError:
                pass
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


@pytest.mark.slow  # ~60 s: a cluster whose head has no CPU, its one worker node killed, a node added, a resume
def test_a_node_lost_with_no_node_to_take_its_members_stops_with_a_checkpoint_that_resumes(tmp_path: Path) -> None:
    cluster = RayCluster(head_cpus=0, worker_cpus=2)  # both workers on the worker node: none left when it dies
    try:
        local = LocalTrainer.from_manifest(_manifest(tmp_path, "local")).train()
        manifest = _manifest(tmp_path, "ray", backend="ray", ray_address=cluster.address)
        assert cluster.proc.stdin is not None and cluster.proc.stdout is not None
        cluster.proc.stdin.write("kill-when-stepping\n")
        cluster.proc.stdin.flush()
        _, out = _drive(manifest, tmp_path / "home", cluster, fails=True)
        assert cluster.proc.stdout.readline().startswith("KILLED"), "the worker node never trained a member"
        assert "ray: 2 worker(s) on 1 node(s)" in out, out
        # (Ray may fail the member's step before it declares the node dead: the error names the dead worker then.)
        assert "MemberFailedError: " in out, out
        assert "checkpoint written to " in out and "Resume with: " in out, out
        checkpoint = Path(out.split("checkpoint written to ")[1].split(". Resume with")[0])
        assert checkpoint.is_file()
        assert _member_workers_left(cluster) == []
        # A node joins again: the run resumed there ends as the uninterrupted one.
        cluster.proc.stdin.write("add-node\n")
        cluster.proc.stdin.flush()
        assert cluster.proc.stdout.readline().startswith("ADDED")
        fitnesses, out = _drive(manifest, tmp_path / "home", cluster, resume=checkpoint)
        assert fitnesses == local.fitnesses
        assert _member_workers_left(cluster) == []
    finally:
        cluster.stop()


#: Off-policy members sharing a replay buffer: the whole generation runs on one worker (not independent members).
DQN_SHARED: dict[str, Any] = {
    "algorithm": {"name": "DQN", "learn_step": 4, "batch_size": 16},
    "environment": {"name": "CartPole-v1", "num_envs": 2},
    "network": {"latent_dim": 16, "arch": "mlp", "encoder_config": {"hidden_size": [16]},
                "head_config": {"hidden_size": [16]}},
    "replay_buffer": {"max_size": 2000},
    "training": {"pop_size": 2, "max_steps": 4000, "evo_steps": 2000, "eval_steps": 50, "learning_delay": 20,
                 "seed": 5, "progress": False, "save_elite": False},
}  # fmt: skip


@pytest.mark.slow  # ~60 s: the one worker of a shared-buffer population on a node that dies, no node left
def test_a_shared_state_population_whose_node_is_lost_stops_with_a_checkpoint(tmp_path: Path) -> None:
    cluster = RayCluster(head_cpus=0, worker_cpus=1)
    try:
        manifest = copy.deepcopy(DQN_SHARED)
        manifest["training"].update(run_dir=str(tmp_path / "ray"), backend="ray", ray_address=cluster.address)
        assert cluster.proc.stdin is not None and cluster.proc.stdout is not None
        cluster.proc.stdin.write("kill-when-stepping\n")
        cluster.proc.stdin.flush()
        _, out = _drive(manifest, tmp_path / "home", cluster, fails=True)
        assert cluster.proc.stdout.readline().startswith("KILLED"), "the worker node never trained a member"
        assert "MemberFailedError: " in out and "checkpoint written to " in out, out
        assert _member_workers_left(cluster) == []
    finally:
        cluster.stop()


@pytest.mark.slow  # ~60 s: the one worker of a shared-buffer population on a node that dies, another with room
def test_a_shared_state_population_whose_node_is_lost_trains_on_another_with_the_same_fitnesses(
    tmp_path: Path,
) -> None:
    cluster = RayCluster(head_cpus=0, worker_cpus=1, worker_nodes=2)
    try:
        manifest = copy.deepcopy(DQN_SHARED)
        manifest["training"]["run_dir"] = str(tmp_path / "local")
        local = LocalTrainer.from_manifest(manifest).train()
        manifest["training"].update(run_dir=str(tmp_path / "ray"), backend="ray", ray_address=cluster.address)
        assert cluster.proc.stdin is not None and cluster.proc.stdout is not None
        cluster.proc.stdin.write("kill-when-stepping\n")
        cluster.proc.stdin.flush()
        fitnesses, out = _drive(manifest, tmp_path / "home", cluster)
        assert cluster.proc.stdout.readline().startswith("KILLED"), "no worker node ever trained a member"
        assert "ray: node " in out and " is gone" in out, out
        assert fitnesses == local.fitnesses
        assert _member_workers_left(cluster) == []
    finally:
        cluster.stop()


@pytest.mark.slow  # ~40 s: a two-node cluster, and a run on it beside the same run here
def test_a_population_on_two_nodes_matches_local_with_members_on_both(two_nodes: RayCluster, tmp_path: Path) -> None:
    local = LocalTrainer.from_manifest(_manifest(tmp_path, "local")).train()
    fitnesses, out = _drive(
        _manifest(tmp_path, "ray", backend="ray", ray_address=two_nodes.address), tmp_path / "home", two_nodes
    )
    assert fitnesses == local.fitnesses
    # Ray's runtime context, asked by each worker actor: one worker on each node.
    assert "ray: 2 worker(s) on 2 node(s): " in out, out
    assert f"{two_nodes.head} x1" in out and f"{two_nodes.worker} x1" in out, out
    assert _member_workers_left(two_nodes) == []


@pytest.mark.slow  # ~40 s: the same run with the worker node killed while it trains a member
def test_a_node_lost_mid_generation_is_survived_with_the_same_fitnesses(two_nodes: RayCluster, tmp_path: Path) -> None:
    node = two_nodes.worker  # (the module's last test: the cluster keeps only its head after it)
    local = LocalTrainer.from_manifest(_manifest(tmp_path, "local")).train()
    assert two_nodes.proc.stdin is not None
    two_nodes.proc.stdin.write("kill-when-stepping\n")
    two_nodes.proc.stdin.flush()
    fitnesses, out = _drive(
        _manifest(tmp_path, "ray", backend="ray", ray_address=two_nodes.address), tmp_path / "home", two_nodes
    )
    assert two_nodes.proc.stdout is not None
    assert two_nodes.proc.stdout.readline().startswith("KILLED"), "the worker node never trained a member"
    assert f"ray: node {node} is gone" in out, out
    assert fitnesses == local.fitnesses
    # Nothing of the run is left running on the node that is left.
    assert _member_workers_left(two_nodes) == []
