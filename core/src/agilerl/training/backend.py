"""Where a generation's members train: the seam between the evolutionary loop and its executors.

Between two tournaments every member of a population trains and is evaluated on its own; that
step is :func:`train_member`. A *backend* runs it for the whole population and hands the trained
members back to the loop, which keeps selection, mutation, checkpoints and logging in the driver:

* :class:`LocalBackend` (``training.backend: local``, the default): one member after another in
  this process, as the loop always did.
* ``RayBackend`` (``training.backend: ray``, in :mod:`agilerl.training.ray_backend`, imported only
  when asked): each member's step is a task on a Ray actor, on this machine or a cluster.

Per-member random streams: a member's step runs with Python's, NumPy's and torch's global
generators seeded from ``(training.seed, member index, member steps)`` and put back afterwards.
So a member's training depends only on its own state, never on which members trained before it
in the same process: local and Ray runs give identical populations, and because the seed is a
function of checkpointed state, a resumed run continues exactly.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agilerl.errors import AgileRLError
from agilerl.training.heap import release_free_heap

if TYPE_CHECKING:
    from agilerl.models.sections import TrainingSpec
    from agilerl.strategies import TrainingStrategy
    from agilerl.training.run import Run

#: ``on_member(position, steps_before, result)``: called with each member's :class:`MemberResult`
#: as it finishes.
MemberCallback = Callable[[int, int, "MemberResult"], None]


class MemberFailedError(AgileRLError):
    """A member's train-and-evaluate step failed on a worker (after the backend's retries)."""


@dataclass
class MemberResult:
    """What one member's step gives back: the trained agent, its learn metrics, and the rows the
    strategy logged while it ran (a Ray worker has no metrics files of its own)."""

    agent: Any
    stats: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)


def member_seed(run_seed: int | None, index: int, steps: int) -> int | None:
    """Seed of a member's step: a function of the run seed and the member's index and steps only."""
    if run_seed is None:
        return None
    return random.Random(f"agilerl-member:{run_seed}:{index}:{steps}").getrandbits(63)


@contextmanager
def member_rng(seed: int | None) -> Iterator[None]:
    """Run the body with the global Python/NumPy/torch generators seeded by ``seed``; restore them after.

    Only libraries already imported are touched (core imports neither NumPy nor torch itself).
    """
    if seed is None:
        yield
        return
    saved_py = random.getstate()
    random.seed(seed)
    np = sys.modules.get("numpy")
    saved_np = np.random.get_state() if np is not None else None
    if np is not None:
        np.random.seed(seed % (2**32))
    torch = sys.modules.get("torch")
    saved_torch = saved_cuda = None
    if torch is not None:
        saved_torch = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            saved_cuda = torch.cuda.get_rng_state_all()
        torch.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(saved_py)
        if np is not None:
            np.random.set_state(saved_np)
        if torch is not None:
            torch.set_rng_state(saved_torch)
            if saved_cuda is not None:
                torch.cuda.set_rng_state_all(saved_cuda)


def train_member(strategy: TrainingStrategy, run: Run, agent: Any, budget: int) -> dict[str, float]:
    """One member's step between tournaments: learn for ``budget`` steps, then append its fitness."""
    with member_rng(member_seed(run.seed, agent.index, agent.steps)):
        stats = strategy.learn(agent, run, budget) if budget > 0 else {}
        agent.fitness.append(float(strategy.evaluate(agent, run)))
    release_free_heap()  # the step's freed tensors leave holes in the C heap: hand their pages back
    return stats


class Backend:
    """Runs :func:`train_member` for a population; selection and mutation stay with the caller.

    This base trains the members one after another in this process (what :class:`LocalBackend`
    is); a backend that trains them elsewhere overrides :meth:`train_generation`.
    """

    name = ""

    def start(self, run: Run, strategy: TrainingStrategy) -> None:
        """Start workers (once, before the first generation)."""

    def train_generation(
        self,
        run: Run,
        strategy: TrainingStrategy,
        population: list[Any],
        budgets: list[int],
        on_member: MemberCallback | None = None,
    ) -> list[MemberResult]:
        """Train and evaluate every member (``budgets[i]`` steps for ``population[i]``); return
        the results in population order, calling ``on_member`` as each member finishes."""
        results = []
        for pos, (agent, budget) in enumerate(zip(population, budgets, strict=True)):
            before = agent.steps
            results.append(MemberResult(agent, train_member(strategy, run, agent, budget)))
            if on_member is not None:
                on_member(pos, before, results[-1])
        return results

    def close(self) -> None:
        """Release workers."""


class LocalBackend(Backend):
    """Members train one after another in this process (``training.backend: local``)."""

    name = "local"


#: ``training.backend`` -> the backend class, or a ``"module:Class"`` imported only when asked
#: (Ray is imported only for a run that names it).
BACKENDS: dict[str, Any] = {"local": "agilerl.training.backend:LocalBackend",
                            "ray": "agilerl.training.ray_backend:RayBackend"}  # fmt: skip


#: Seconds to wait for a Ray cluster's address to accept a connection before ``ray.init``, which
#: would otherwise retry for minutes against a closed port.
CONNECT_TIMEOUT_S = 5.0


#: The HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, Ray Client) answers
#: with a SETTINGS frame of its own; anything else (an HTTP/1 server, a database) does not.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def probe_ray_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse at once a ``host:port`` (or ``ray://host:port``) that does not accept connections or does
    not answer as a Ray cluster (gRPC): ``ray.init`` retries such an address for minutes."""
    import socket

    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if address in ("auto", "local") or not sep or not port.isdigit():
        return  # Ray's own forms (find a running cluster, start one): ray.init answers those quickly
    fix = "start one with `ray start --head` or leave ray_address unset for a local instance"
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_H2_PREFACE)
            head = sock.recv(9)
    except OSError as exc:
        raise AgileRLError(
            f"training.ray_address: cannot reach a Ray cluster at {address!r} ({exc.strerror or exc}, within "
            f"{timeout:g} s); {fix}"
        ) from None
    if len(head) < 4 or head[3] != 0x04:  # not an HTTP/2 SETTINGS frame
        raise AgileRLError(
            f"training.ray_address: {address!r} accepts connections but does not answer as a Ray cluster (its GCS "
            f"speaks gRPC; `ray start --head` prints the address to use); {fix}"
        )


def cluster_wants_ray_token(address: str, timeout: float = CONNECT_TIMEOUT_S) -> bool | None:
    """Whether the Ray cluster at ``address`` refuses a call without an auth token: its GCS is asked for
    the cluster id, without a token. ``None`` when that cannot be told (a Ray Client ``ray://`` address,
    or no answer in time)."""
    if address.startswith("ray://") or address in ("auto", "local"):
        return None
    import grpc  # deferred: a dependency of Ray, needed only when a run joins a cluster

    with grpc.insecure_channel(address) as channel:
        get_cluster_id = channel.unary_unary(
            "/ray.rpc.NodeInfoGcsService/GetClusterId",
            request_serializer=lambda _: b"",  # the request message has no fields
            response_deserializer=lambda data: data,
        )
        try:
            get_cluster_id(None, timeout=timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                return True
            return None
    return False


def use_ray_auth_token(address: str) -> None:
    """Connect with Ray's token authentication exactly when the cluster at ``address`` asks for it.

    Since Ray 2.59 ``ray start --head`` (and any new local ``ray.init()``) turns token authentication on
    and writes the token to ``~/.ray/auth_token``, but a driver given an address connects without it
    unless ``RAY_AUTH_MODE=token``: it then retries for ~20 s and reports a connection error. The
    reverse fails too: a driver in token mode joins a cluster started without authentication, but the
    cluster's calls back to it carry no token and are refused, so every actor's creation is cancelled
    ("The actor never ran"). A token file left by an earlier local run says nothing about this cluster,
    so the cluster is asked. Ray reads the mode when it is imported: call this before."""
    if os.environ.get("RAY_AUTH_MODE"):
        return  # the user's choice
    wants = cluster_wants_ray_token(address)
    if wants is False:
        return
    token_file = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    have_token = bool(os.environ.get("RAY_AUTH_TOKEN")) or os.path.isfile(token_file)
    if wants and not have_token:
        raise AgileRLError(
            f"training.ray_address: the Ray cluster at {address!r} uses token authentication and no token is at "
            "hand; give its token as RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, or in ~/.ray/auth_token)"
        )
    if have_token:  # wants is True, or unknown (a ray:// address): a token at hand is the best guess
        os.environ["RAY_AUTH_MODE"] = "token"


def make_backend(training: TrainingSpec) -> Backend:
    """The backend ``training.backend`` names (Ray is imported only here, only when asked).

    A cluster address is tried first (a few seconds at most), before Ray, any env or model."""
    import importlib

    if training.backend == "ray":
        address = training.ray_address or os.environ.get("RAY_ADDRESS")
        if address:
            probe_ray_address(address)
            use_ray_auth_token(address)
    name = training.backend if training.backend in BACKENDS else "local"
    module, _, attr = BACKENDS[name].partition(":")
    cls = getattr(importlib.import_module(module), attr)  # ray_backend says how to install Ray
    return cls() if name == "local" else cls(training)  # type: ignore[no-any-return]


__all__ = [
    "BACKENDS",
    "Backend",
    "LocalBackend",
    "MemberCallback",
    "MemberFailedError",
    "MemberResult",
    "make_backend",
    "probe_ray_address",
    "member_rng",
    "member_seed",
    "train_member",
]
