"""``training.backend: ray``: each member's train-and-evaluate step runs on a Ray actor.

Imported only when a manifest asks for it (``pip install 'agilerl-core[ray]'``). The driver (the
process running ``agilerl train``) keeps the population, selection, mutation, checkpoints and
metrics; every generation it sends each member (the agent object, pickled by Ray) to a worker
actor, which trains and evaluates it with :func:`agilerl.training.backend.train_member` and sends
the trained agent, its learn metrics and any rows the strategy logged back.

* Workers: ``training.ray_workers`` actors (default: as many as the cluster's CPUs allow at
  ``num_cpus_per_member`` each, at most one per member), each asking Ray for
  ``num_cpus_per_member`` CPUs and ``num_gpus_per_member`` GPUs. A worker builds the strategy and
  its envs once from the manifest and keeps them for the whole run.
* Members that share state: a strategy whose members train independently (its class sets
  ``independent_members = True``) fans out over all workers. Any other strategy (a buffer
  shared by the population, an env stream that continues from member to member) runs on a single
  worker, members in population order, with the strategy's state (:meth:`state_dict`) sent there
  and back every generation: same results as ``local``, on the cluster's hardware, no parallelism.
* Faults: a worker process that dies is restarted by Ray and its task retried, up to
  ``training.ray_max_retries`` times; the retried step starts from the driver's copy of the member,
  so the result is the one an uninterrupted run gives. When retries run out the step raises
  :class:`~agilerl.training.backend.MemberFailedError`; the loop then writes a checkpoint of the
  population as it was before the generation, which ``--resume`` continues exactly.
* A node that dies: its workers are dropped and their members trained again from the driver's
  copies on the workers left; the one worker of a strategy whose members share state is made
  again on a node with room and redoes the generation. With no room left, ``MemberFailedError``.
* Cluster: ``training.ray_address`` (else ``RAY_ADDRESS``) joins a running cluster; with neither,
  a local Ray instance sized to this machine is started and shut down at the end of the run. Ray
  already initialised in this process (a test fixture, a notebook) is used as it is.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from agilerl.errors import AgileRLError
from agilerl.plugins import plugin_infos
from agilerl.training.assembly import assemble_run
from agilerl.training.backend import (
    Backend,
    MemberCallback,
    MemberFailedError,
    MemberResult,
    probe_ray_address,
    train_member,
)

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest
    from agilerl.models.sections import TrainingSpec
    from agilerl.strategies import TrainingStrategy
    from agilerl.training.run import Run

try:
    import ray
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise AgileRLError("training.backend: ray needs Ray; install it with: pip install 'agilerl-core[ray]'") from exc


#: Seconds the worker actors may take to start (each builds its strategy and envs once).
WORKER_START_TIMEOUT_S = 300.0
#: Seconds between looks at the cluster's nodes while members train: a worker whose node has died is
#: dropped and its member trained again on another worker (Ray would restart the actor there only if
#: that node had room beside its own worker, which it has not).
NODE_CHECK_S = 2.0
#: Seconds a failed worker's node is watched for Ray to declare it dead (its health checks take ~15 s by
#: default) before the failure is taken as the worker's own.
NODE_DEATH_WAIT_S = 45.0

log = logging.getLogger("agilerl")


def loaded_plugins() -> dict[str, str | None]:
    """The installed plugin distributions this process loaded: name -> version (in-process plugins, which
    no other process has, and plugins that failed to load are left out)."""
    return {i.distribution: i.version for i in plugin_infos() if i.distribution and i.error is None}


def _check_same_plugins(ready: list[tuple[str, dict[str, str | None], str | None]]) -> None:
    """Every worker's node must have loaded the plugins the driver did, at the same versions: Ray ships no
    code, so each node runs its own environment (docs/distributed.md, "What every node needs")."""
    mine = loaded_plugins()
    for node, theirs, _ in ready:
        missing = sorted(d for d in mine if d not in theirs)
        other = sorted(d for d in mine if d in theirs and theirs[d] != mine[d])
        if not missing and not other:
            continue
        what = [f"{d} {mine[d]} is not loaded there" for d in missing]
        what += [f"{d} is {theirs[d]} there but {mine[d]} here" for d in other]
        raise AgileRLError(
            f"training.backend: ray: Ray node {node} does not have this driver's plugins: {'; '.join(what)}. "
            "Install the same packages on every node (see docs/distributed.md, 'What every node needs'), or "
            "select the same plugins everywhere with AGILERL_LOAD_PLUGINS / AGILERL_DISABLE_PLUGINS"
        )


class _RowCollector:
    """Stands in for the run's :class:`~agilerl.training.metrics.MetricsLogger` on a worker: rows a
    strategy logs there are sent back and written by the driver's logger."""

    def __init__(self, run_dir: Any) -> None:
        self.run_dir = run_dir
        self.rows: list[dict[str, Any]] = []

    def log(self, row: dict[str, Any]) -> None:
        self.rows.append(dict(row))

    def log_text(self, tag: str, text: str, step: int) -> None:
        pass  # TensorBoard text stays on the worker's side (its files are the worker's own)

    def read_jsonl(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


class MemberWorker:
    """A Ray actor holding one strategy and its envs; trains the members it is sent."""

    def __init__(self, manifest: TrainingManifest, *, device: str, run_dir: str) -> None:
        from pathlib import Path

        self.logger = _RowCollector(Path(run_dir))
        # What this node's environment loaded, taken before the assembly: a node that lacks a plugin the
        # manifest needs is then named with the missing plugin by the driver's check, not by an import error.
        self.plugins = loaded_plugins()
        self.setup_error: str | None = None
        try:
            # The driver's assembly without members: same seeding, envs and strategy set-up.
            self.run, self.strategy = assemble_run(
                manifest,
                device=device,
                run_dir=Path(run_dir),
                logger=lambda: self.logger,
                members=False,
                progress=False,
            )
        except Exception as exc:
            self.setup_error = f"{type(exc).__name__}: {exc}"

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this worker runs on (from Ray's runtime context)."""
        return str(ray.get_runtime_context().get_node_id())

    def ready(self) -> tuple[str, dict[str, str | None], str | None]:
        """Its node, the plugins its environment loaded (distribution -> version), and why its set-up
        failed (None: it did not)."""
        return self.node_id(), self.plugins, self.setup_error

    def _check_setup(self) -> None:
        if self.setup_error is not None:
            raise AgileRLError(f"the worker could not build its strategy: {self.setup_error}")

    def load_strategy_state(self, state: dict[str, Any]) -> None:
        self.strategy.load_state_dict(state)

    def step(self, packed_agent: bytes, budget: int, generation: int) -> bytes:
        """Train and evaluate one member (see :func:`~agilerl.training.backend.train_member`)."""
        return _pack(self._step(_unpack(packed_agent), budget, generation))

    def _step(self, agent: Any, budget: int, generation: int) -> MemberResult:
        self._check_setup()
        self.run.generation = generation
        self.logger.rows = []
        stats = train_member(self.strategy, self.run, agent, budget)
        return MemberResult(agent, stats, self.logger.rows)

    def generation(self, packed: bytes, budgets: list[int], generation: int) -> bytes:
        """All members in order, for strategies whose members share state: ``packed`` holds the
        agents and the strategy's state; the trained agents and the new state go back."""
        self._check_setup()
        agents, strategy_state = _unpack(packed)
        self.strategy.load_state_dict(strategy_state)
        self.run.population = agents
        results = [self._step(agent, budget, generation) for agent, budget in zip(agents, budgets, strict=True)]
        return _pack((results, self.strategy.state_dict()))

    def close(self) -> None:
        if self.setup_error is None:
            self.strategy.close(self.run)


class RayBackend(Backend):
    """Train each generation's members on Ray actors (see the module docstring)."""

    name = "ray"

    def __init__(self, training: TrainingSpec) -> None:
        self.training = training
        self.workers: list[Any] = []
        #: The Ray node each worker runs on (by id() of its handle): a node found dead drops its workers.
        self.worker_nodes: dict[int, str] = {}
        self.owns_ray = False
        self.independent = True
        #: How a worker is made (the actor class with its options, its constructor's arguments): the one
        #: worker of a strategy whose members share state is made again when its node dies.
        self.make_worker: Any = None

    # --- lifecycle ------------------------------------------------------------------------------
    def _connect(self) -> None:
        if ray.is_initialized():
            return
        address = self.training.ray_address or os.environ.get("RAY_ADDRESS") or None
        env_vars = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        forwarded = ("AGILERL_STRICT_PLUGINS", "AGILERL_LOAD_PLUGINS", "AGILERL_DISABLE_PLUGINS", "HF_HUB_OFFLINE",
                     "TRANSFORMERS_OFFLINE")  # fmt: skip
        for key in forwarded:
            if key in os.environ:
                env_vars[key] = os.environ[key]
        kwargs: dict[str, Any] = {"runtime_env": {"env_vars": env_vars}, "log_to_driver": True}
        if address is not None:
            probe_ray_address(address)
        if address is None:
            kwargs["include_dashboard"] = False
            # Ray runs workers at nice 15 by default, for a responsive driver; here the workers do all
            # the training while the driver waits, so they run at the driver's priority.
            kwargs["_system_config"] = {"worker_niceness": 0}
        try:
            # "local": a new instance of our own, whatever /tmp/ray/ray_current_cluster names (a cluster
            # that died without cleanup is still named there, and ray.init() would try to join it).
            ray.init(address=address or "local", **kwargs)
        except ConnectionError as exc:
            raise AgileRLError(
                f"training.ray_address: cannot reach a Ray cluster at {address!r} ({exc}); "
                "start one with `ray start --head` or leave ray_address unset for a local instance. If the "
                "cluster uses token authentication, give its token as RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, "
                "or in ~/.ray/auth_token) with RAY_AUTH_MODE=token"
            ) from None
        self.owns_ray = True

    def _num_workers(self, pop_size: int) -> int:
        t = self.training
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        nodes = ray.nodes()  # type: ignore[no-untyped-call]
        node_cpus = max((float(n.get("Resources", {}).get("CPU", 0)) for n in nodes if n.get("Alive")), default=0.0)
        if t.num_cpus_per_member > node_cpus:
            # An actor is placed on one node: asking for more CPUs than any node has waits forever.
            raise AgileRLError(
                f"training.num_cpus_per_member: {t.num_cpus_per_member:g} CPUs per member, but the largest node of "
                f"the Ray cluster has {node_cpus:g}; lower num_cpus_per_member or add larger nodes"
            )
        n = int(resources.get("CPU", 1) // t.num_cpus_per_member) if t.num_cpus_per_member > 0 else pop_size
        if t.num_gpus_per_member > 0:
            n = min(n, int(resources.get("GPU", 0) // t.num_gpus_per_member))
            if n < 1:
                raise AgileRLError(
                    f"training.num_gpus_per_member: {t.num_gpus_per_member:g} GPU(s) per member, but the Ray "
                    f"cluster has {resources.get('GPU', 0):g}; add GPU nodes or lower num_gpus_per_member"
                )
        if not self.independent:
            return 1
        if t.ray_workers is not None:
            if min(t.ray_workers, pop_size) > n:
                raise AgileRLError(
                    f"training.ray_workers: {t.ray_workers} workers x {t.num_cpus_per_member:g} CPUs, but the Ray "
                    f"cluster has {resources.get('CPU', 0):g} CPUs (room for {n}); the rest would wait forever. "
                    "Lower ray_workers or num_cpus_per_member, or remove ray_workers"
                )
            return min(t.ray_workers, pop_size)
        return max(1, min(n, pop_size))

    def start(self, run: Run, strategy: TrainingStrategy) -> None:
        self._connect()
        t = self.training
        self.independent = bool(getattr(strategy, "independent_members", False))
        n = self._num_workers(len(run.population))
        retries = t.ray_max_retries
        actor = ray.remote(MemberWorker).options(
            num_cpus=t.num_cpus_per_member,
            num_gpus=t.num_gpus_per_member,
            max_restarts=retries,
            max_task_retries=retries,
        )
        # The manifest goes by value (a few KB, inlined in each creation task): a restarted actor is
        # rebuilt from its constructor arguments, which an object in the store could have lost with a node.
        self.make_worker = lambda: actor.remote(run.manifest, device=run.device, run_dir=str(run.run_dir))
        self.workers = [self.make_worker() for _ in range(n)]
        self._wait_ready(n)

    def _wait_ready(self, n: int) -> None:
        t = self.training
        try:
            # Fail here, not mid-generation, on a bad setup; bounded, as every wait on the cluster is.
            ready = ray.get([w.ready.remote() for w in self.workers], timeout=WORKER_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise AgileRLError(
                f"training.backend: ray: {n} worker(s) asking for {t.num_cpus_per_member:g} CPU(s) and "
                f"{t.num_gpus_per_member:g} GPU(s) each did not start within {WORKER_START_TIMEOUT_S:g} s; the "
                "cluster may lack the resources (see `ray status`)"
            ) from None
        except ray.exceptions.RayError as exc:
            self.close()
            raise AgileRLError(f"training.backend: ray: the workers could not start: {_cause(exc)}") from None
        nodes = [node for node, _, _ in ready]
        try:
            _check_same_plugins(ready)
            failed = next((error for _, _, error in ready if error is not None), None)
            if failed is not None:
                raise AgileRLError(f"training.backend: ray: the workers could not start: {failed}")
        except AgileRLError:
            self.close()
            raise
        self.worker_nodes = {id(w): node for w, node in zip(self.workers, nodes, strict=True)}
        log.info(
            "ray: %d worker(s) on %d node(s): %s", len(nodes), len(set(nodes)),
            ", ".join(f"{node} x{nodes.count(node)}" for node in dict.fromkeys(nodes)),
        )  # fmt: skip

    def close(self) -> None:
        for w in self.workers:
            try:
                ray.get(w.close.remote(), timeout=30)
            except Exception:  # a dead or hung worker: nothing left to release
                pass
            ray.kill(w)
        self.workers = []
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()
            self.owns_ray = False

    # --- one generation -------------------------------------------------------------------------
    def train_generation(
        self,
        run: Run,
        strategy: TrainingStrategy,
        population: list[Any],
        budgets: list[int],
        on_member: MemberCallback | None = None,
    ) -> list[MemberResult]:
        if not self.independent:
            return self._sequential(run, strategy, population, budgets, on_member)
        results: list[MemberResult | None] = [None] * len(population)
        pending: dict[Any, int] = {}
        queue = list(range(len(population)))
        idle = list(self.workers)
        busy: dict[Any, Any] = {}  # ref -> worker
        args: dict[Any, Any] = {}  # ref -> the object ref of its member
        while queue or pending:
            idle = [w for w in idle if id(w) in self.worker_nodes]  # none on a node that died
            if queue and not self.workers:
                raise MemberFailedError(
                    f"member {population[queue[0]].index}: every node of the Ray cluster that held a worker is gone"
                )
            while queue and idle:
                pos = queue.pop(0)
                worker = idle.pop(0)
                member_ref = ray.put(_pack(population[pos]))  # kept until the result is in: a retry resends it
                ref = worker.step.remote(member_ref, budgets[pos], run.generation)
                pending[ref] = pos
                busy[ref] = worker
                args[ref] = member_ref
            done, _ = ray.wait(list(pending), num_returns=1, timeout=NODE_CHECK_S)
            if not done:
                self._drop_workers_on_dead_nodes()
                continue
            ref = done[0]
            pos = pending.pop(ref)
            worker = busy.pop(ref)
            args.pop(ref, None)
            try:
                data = self._get(ref, population[pos]) if id(worker) in self.worker_nodes else None
            except MemberFailedError:
                if not self._lost_with_its_node(worker):
                    raise
                data = None
            if data is None:  # its node died: the member trains again, from the driver's copy, elsewhere
                queue.insert(0, pos)
                continue
            idle.append(worker)
            result = _unpack(data)
            self._deliver(run, result)
            results[pos] = result
            if on_member is not None:
                on_member(pos, population[pos].steps, result)
        return [r for r in results if r is not None]

    def _lost_with_its_node(self, worker: Any) -> bool:
        """After ``worker`` failed: whether its node died (its workers are then dropped). Ray takes some
        seconds to declare a node dead; that is waited for (bounded) only where workers on other nodes
        could take the member over."""
        node = self.worker_nodes.get(id(worker))
        elsewhere = any(n != node for n in self.worker_nodes.values())
        return self._dropped_as_dead(worker, NODE_DEATH_WAIT_S if elsewhere else 0.0)

    def _node_lost_and_room_elsewhere(self, worker: Any) -> bool:
        """After the one worker of a sequential generation failed: whether its node died (waited for, bounded,
        as in :meth:`_lost_with_its_node`) while another live node has the CPUs and GPUs a worker asks for."""
        t = self.training
        node = self.worker_nodes.get(id(worker))

        def room() -> bool:
            for n in ray.nodes():  # type: ignore[no-untyped-call]
                res = n.get("Resources", {})
                if n.get("Alive") and str(n["NodeID"]) != node and float(res.get("CPU", 0)) >= t.num_cpus_per_member:
                    if float(res.get("GPU", 0)) >= t.num_gpus_per_member:
                        return True
            return False

        return room() and self._dropped_as_dead(worker, NODE_DEATH_WAIT_S)

    def _dropped_as_dead(self, worker: Any, wait_s: float) -> bool:
        """Whether Ray declares ``worker``'s node dead within ``wait_s`` seconds (its workers are then
        dropped): polled every half second, once when ``wait_s`` is 0."""
        deadline = time.monotonic() + wait_s
        while True:
            self._drop_workers_on_dead_nodes()
            if id(worker) not in self.worker_nodes:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)

    def _drop_workers_on_dead_nodes(self) -> None:
        alive = {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}  # type: ignore[no-untyped-call]
        for worker in [w for w in self.workers if self.worker_nodes[id(w)] not in alive]:
            node = self.worker_nodes.pop(id(worker))
            self.workers.remove(worker)
            log.warning(
                "ray: node %s is gone; its worker's member trains again on the %d worker(s) left",
                node, len(self.workers),
            )  # fmt: skip
            # Its pending step then fails at once (and is re-queued) instead of waiting for a restart
            # that no node has room for.
            ray.kill(worker, no_restart=True)

    def _sequential(
        self,
        run: Run,
        strategy: TrainingStrategy,
        population: list[Any],
        budgets: list[int],
        on_member: MemberCallback | None,
    ) -> list[MemberResult]:
        packed = _pack((population, strategy.state_dict()))
        while True:
            worker = self.workers[0]
            try:
                data = self._get(worker.generation.remote(packed, budgets, run.generation), population[0])
                break
            except MemberFailedError:
                if not self._node_lost_and_room_elsewhere(worker):
                    raise
            # Its node died: a new worker on a node with room redoes the generation from the driver's copy.
            self.workers = [self.make_worker()]
            try:
                self._wait_ready(1)
            except AgileRLError as exc:  # (a MemberFailedError: the loop writes the checkpoint to resume from)
                raise MemberFailedError(f"its node died and a worker could not start on another: {exc}") from None
        results, state = _unpack(data)
        strategy.load_state_dict(state)
        for pos, result in enumerate(results):
            self._deliver(run, result)
            if on_member is not None:
                on_member(pos, population[pos].steps, result)
        return results  # type: ignore[no-any-return]

    def _get(self, ref: Any, agent: Any) -> Any:
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            raise MemberFailedError(
                f"the Ray worker training member {agent.index} died and was retried "
                f"{self.training.ray_max_retries} time(s) (training.ray_max_retries): {_cause(exc)}"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else None
            if isinstance(cause, AgileRLError):
                raise cause from None
            raise MemberFailedError(f"member {agent.index} failed on a Ray worker: {_cause(exc)}") from None

    @staticmethod
    def _deliver(run: Run, result: MemberResult) -> None:
        for row in result.rows:
            run.logger.log(row)


def _pack(obj: Any) -> bytes:
    # Members and strategy state travel as pickled bytes rather than as Ray objects: Ray hands NumPy
    # arrays back read-only (zero-copy), and an agent or a buffer must be able to write to its own.
    return ray.cloudpickle.dumps(obj)  # type: ignore[no-any-return,no-untyped-call]


def _unpack(data: bytes) -> Any:
    return ray.cloudpickle.loads(data)


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


__all__ = ["MemberWorker", "RayBackend"]
