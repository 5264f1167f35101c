"""Generation wall time of a population on the local and the Ray backend, side by side.

    python benchmarks/hpo/bench_ray.py [--seeds 0 1 2] [--generations 3] [--agilerl]

Population 4 of PPO on CartPole-v1 from ``examples/ppo_cartpole_hpo.yaml`` (8 sync envs,
learn_step 2048, 10,240 env steps per agent per generation, tournament selection and mutation),
``--generations`` generations, each configuration in a fresh process with one torch thread per
process: ``local`` (members one after another), ``ray`` with 1 worker and with 2 workers (a local
Ray instance the backend starts, 1 CPU per member), and ``ray, 2 nodes x 1 CPU``: a real two-node
cluster on this machine (``ray.cluster_utils.Cluster`` in a process of its own, a head and a worker
node of one CPU each) joined by ``training.ray_address``, whose ratio to ``ray, 2 workers`` (the same
2 workers on one local instance) is the overhead of going through the cluster (``--no-two-nodes``
leaves it out). Reported per configuration: the median
generation wall time (the loop's own clock: training, evaluation, shipping members to and from
the workers, selection and mutation), the start-up cost (Ray, worker processes, envs), and whether
the fitnesses equal the local run's. With ``--agilerl`` AgileRL 2.58's own ``LocalTrainer`` runs
the same manifest and budget in the shared PyPI-AgileRL virtualenv (``benchmarks/agilerl_venv.py``):
its seconds per generation and best fitness.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import benchlib  # noqa: E402

MANIFEST = HERE.parents[1] / "examples" / "ppo_cartpole_hpo.yaml"
CONFIGS: dict[str, dict[str, Any]] = {
    "local": {},
    "ray, 1 worker": {"backend": "ray", "ray_workers": 1},
    "ray, 2 workers": {"backend": "ray", "ray_workers": 2},
    "ray, 2 nodes x 1 CPU": {"backend": "ray", "ray_workers": 2},  # + ray_address of the two-node cluster
}
TWO_NODES = "ray, 2 nodes x 1 CPU"

#: A head and a worker node of 1 CPU each (as tests/hpo/test_ray_multinode.py); prints its address, and
#: shuts down at EOF on stdin.
CLUSTER = r"""
import sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
print("ADDR", cluster.address, flush=True)
sys.stdin.read()
cluster.shutdown()
"""


class TwoNodes:
    """The two-node cluster, in a process of its own with a Ray temp dir of its own."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")  # short: Ray's socket paths have a length limit
        env = {**os.environ, "RAY_TMPDIR": self.tmp, "OMP_NUM_THREADS": "1"}
        env.pop("RAY_ADDRESS", None)
        self.proc = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("ADDR "):
            self.stop()
            raise RuntimeError(f"the two-node Ray cluster did not start: {line!r}")
        self.address = line.split()[1]

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run(python: Path | str, worker: str, cfg: dict[str, Any], ray_tmp: str | None = None) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    if ray_tmp is not None:
        env["RAY_TMPDIR"] = ray_tmp
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run(
        [str(python), str(HERE / worker), json.dumps(cfg)], check=True, capture_output=True, text=True, env=env
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def member_bytes(manifest: dict[str, Any]) -> int:
    """Size of one freshly built member as the Ray backend ships it (pickled)."""
    import ray.cloudpickle
    import torch

    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.models import load_manifest
    from agilerl.strategies import select_strategy

    torch.set_num_threads(1)
    m = load_manifest(manifest)
    env = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = select_builder(m.algorithm).build_for_run(
        m.algorithm, env=env, manifest=m, runtime=AlgorithmBuildRuntime(manifest=m)
    )
    env.close()
    return len(ray.cloudpickle.dumps(agent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--generations", type=int, default=3)
    parser.add_argument("--evo-steps", type=int, default=None, help="env steps per agent per generation")
    parser.add_argument("--agilerl", action="store_true", help="also run AgileRL 2.58 on the same budget")
    parser.add_argument("--skip-ours", action="store_true", help="with --agilerl: run AgileRL only")
    parser.add_argument("--no-two-nodes", action="store_true", help="leave out the two-node cluster")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ray_backend.json")
    args = parser.parse_args()
    record = benchlib.Record("hpo/bench_ray")
    base = yaml.safe_load(MANIFEST.read_text())
    if args.evo_steps:
        base["training"]["evo_steps"] = args.evo_steps
        base["algorithm"]["learn_step"] = min(base["algorithm"]["learn_step"], args.evo_steps)
    base["training"]["max_steps"] = base["training"]["evo_steps"] * args.generations
    shipped = member_bytes(base)
    print(f"[bench] one member pickled: {shipped} bytes", flush=True)
    configs = {k: v for k, v in CONFIGS.items() if not (args.no_two_nodes and k == TWO_NODES)}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    cluster = TwoNodes() if TWO_NODES in configs and not args.skip_ours else None
    try:
        _run_all(args, base, configs, results, cluster, shipped)
    finally:
        if cluster is not None:
            cluster.stop()
    _report(args, base, results, record, shipped)


def _run_all(args: argparse.Namespace, base: dict[str, Any], configs: dict[str, dict[str, Any]],
             results: dict[str, list[dict[str, Any]]], cluster: TwoNodes | None, shipped: int) -> None:  # fmt: skip
    their_python = benchlib.agilerl_python() if args.agilerl else None
    if their_python is not None:
        results["AgileRL 2.58"] = []
    for seed in args.seeds:
        for name, training in configs.items():
            if args.skip_ours:
                break
            manifest = json.loads(json.dumps(base))
            manifest["mutation"]["rand_seed"] = seed
            manifest["training"].update(training)
            if name == TWO_NODES:
                assert cluster is not None
                manifest["training"]["ray_address"] = cluster.address
            r = run(sys.executable, "_ours_worker.py", {"seed": seed, "manifest": manifest},
                    ray_tmp=cluster.tmp if name == TWO_NODES and cluster is not None else None)  # fmt: skip
            r["seed"] = seed
            results[name].append(r)
            local = results["local"][-1]
            same = r["histories"] == local["histories"]
            print(f"[bench] seed {seed} {name:20s} wall {r['wall_s']:6.1f} s, start-up {r['startup_s']:5.1f} s, "
                  f"generations {[round(g, 1) for g in r['generation_s']]} s, fitnesses "
                  f"{'identical to local' if same else 'DIFFER from local'}", flush=True)  # fmt: skip
            r["identical_to_local"] = same
        if their_python is not None:
            manifest = json.loads(json.dumps(base))
            manifest["mutation"]["rand_seed"] = seed
            r = run(their_python, "_agilerl_worker.py", {"seed": seed, "manifest": manifest})
            gens = r["generations"]
            r = {"seed": seed, "wall_s": r["wall_s"], "s_per_generation": r["wall_s"] / max(len(gens), 1),
                 "best_fitness": max(g["best"] for g in gens)}  # fmt: skip
            results["AgileRL 2.58"].append(r)
            print(f"[bench] seed {seed} AgileRL 2.58    wall {r['wall_s']:6.1f} s, {r['s_per_generation']:.1f} s/gen, "
                  f"best fitness {r['best_fitness']:.1f}", flush=True)  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        out = args.out.with_name("agilerl_population.json") if args.skip_ours else args.out
        if not benchlib.SMOKE:
            out.write_text(json.dumps({"generations": args.generations, "seeds": args.seeds, "member_bytes": shipped,
                                       "results": results}, indent=2))  # fmt: skip


def _report(args: argparse.Namespace, base: dict[str, Any], results: dict[str, list[dict[str, Any]]],
            record: benchlib.Record, shipped: int) -> None:  # fmt: skip
    print(f"\nPPO CartPole-v1, population 4, {args.generations} generations of {base['training']['evo_steps']:,} "
          "env steps per agent, "
          f"seeds {args.seeds} (medians over seeds)\n")  # fmt: skip
    print("| configuration | s / generation | vs local | start-up s | best fitness | fitnesses identical to local |")
    print("|---|---|---|---|---|---|")
    local_runs = results["local"] or [{"generation_s": [float("nan")]}]
    local_gen = statistics.median(statistics.median(r["generation_s"]) for r in local_runs)
    for name, runs in results.items():
        if not runs:
            continue
        if name == "AgileRL 2.58":
            per_gen = statistics.median(r["s_per_generation"] for r in runs)
            best = statistics.median(r["best_fitness"] for r in runs)
            ratio = "-" if local_gen != local_gen else f"{per_gen / local_gen:.2f}x"  # NaN: local not run
            print(f"| {name} (its LocalTrainer) | {per_gen:.2f} | {ratio} | - | {best:.1f} | - |")
            continue
        per_gen = statistics.median(statistics.median(r["generation_s"]) for r in runs)
        startup = statistics.median(r["startup_s"] for r in runs)
        best = statistics.median(max(r["best_per_generation"]) for r in runs)
        same = sum(r["identical_to_local"] for r in runs)
        print(f"| {name} | {per_gen:.2f} | {per_gen / local_gen:.2f}x | {startup:.1f} | {best:.1f} | "
              f"{same}/{len(runs)} |")  # fmt: skip
        if name == "ray, 2 workers" and results["local"]:
            record.row(
                "ray_population_generation",
                what="population generation time, PPO CartPole pop 4, Ray 2 workers",
                against="our local backend",
                wall=per_gen / local_gen,
                cpu=None,
                target="<= 0.6x",
                met=per_gen / local_gen <= 0.6,
                repeats=len(runs),
                detail=f"{local_gen:.2f} -> {per_gen:.2f} s/gen; fitnesses identical {same}/{len(runs)}",
            )
        if name == TWO_NODES and results.get("ray, 2 workers"):
            one_node = statistics.median(statistics.median(r["generation_s"]) for r in results["ray, 2 workers"])
            record.row(
                "ray_two_nodes_overhead",
                what="population generation time, PPO CartPole pop 4, Ray 2 nodes x 1 CPU (a real cluster here)",
                against="Ray 2 workers on one local instance",
                wall=per_gen / one_node,
                cpu=None,
                target="none (reported)",
                met=None,
                repeats=len(runs),
                detail=f"{one_node:.2f} -> {per_gen:.2f} s/gen; fitnesses identical to local {same}/{len(runs)}",
            )
    record.save({"generations": args.generations, "seeds": args.seeds, "member_bytes": shipped, "results": results})


if __name__ == "__main__":
    main()
