"""Validation-time checks that span sections or the machine: run by ``validate_manifest``.

- Cross-field rules: a tournament no larger than the population; mutation probabilities that can
  pick at least one operator.
- The device: a name torch knows, and present on this machine (``cuda`` without CUDA is refused
  here, not an hour into the run).
- Resources: ``num_envs`` (core's :data:`FLOORS`) and what the algorithm's plugin adds
  (:meth:`~agilerl.models.AlgorithmSpec.memory_parts`: its members, what one update stores, its
  buffers, from floors the plugin measured for its own paradigm) against the memory this machine
  has available. The estimate is a *lower bound*: a manifest refused here could not run; one
  accepted may still need more.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import TYPE_CHECKING

from agilerl.errors import Problem

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest

#: Bytes each env costs at the least, whatever the paradigm: an env object made and reset holds at
#: least 4 KiB (a Python object with its state and spaces; the smallest measured, about 4 KiB); an
#: env in its own worker process (``sync: false``) is a forked Python process, about 22 MiB
#: proportional set size each (measured on CPU). What a member or a stored step costs is the
#: plugin's to say (:meth:`~agilerl.models.AlgorithmSpec.memory_parts`).
FLOORS = {"env": 4 << 10, "env_process": 16 << 20}

_DEVICE = re.compile(r"^(cpu|auto|mps|cuda(:\d+)?|xpu(:\d+)?)$")


def available_memory() -> int | None:
    """Bytes of memory available to a new process (``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.3g} GiB" if n >= 1 << 28 else f"{n / (1 << 20):.3g} MiB"


def device_problems(device: str, path: str = "training.device") -> list[Problem]:
    """``device`` names a torch device that exists here (torch is imported only for cuda/mps/xpu)."""
    if not _DEVICE.match(device):
        return [Problem(path, f"unknown device {device!r}; use cpu, cuda, cuda:N, mps or auto")]
    if device in {"cpu", "auto"}:
        return []
    if importlib.util.find_spec("torch") is None:
        return [Problem(path, f"device {device!r} needs torch, which is not installed")]
    import torch

    kind, _, num = device.partition(":")
    if kind == "cuda":
        if not torch.cuda.is_available():
            return [Problem(path, f"device {device!r}: CUDA is not available on this machine (use cpu or auto)")]
        count = torch.cuda.device_count()
        if num and int(num) >= count:
            return [Problem(path, f"device {device!r}: this machine has {count} CUDA device(s) (cuda:0..{count - 1})")]
    elif kind == "mps" and not torch.backends.mps.is_available():
        return [Problem(path, "device 'mps': MPS is not available on this machine (use cpu or auto)")]
    elif kind == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        return [Problem(path, f"device {device!r}: XPU is not available on this machine (use cpu or auto)")]
    return []


def resource_problems(manifest: TrainingManifest, available: int | None = None) -> list[Problem]:
    """Refuse a manifest whose lower-bound memory estimate exceeds the memory available."""
    avail = available_memory() if available is None else available
    if avail is None:
        return []
    algo, env = manifest.algorithm, manifest.environment
    num_envs = int(getattr(env, "num_envs", None) or 1)
    # an env section declaring `sync: false` runs each env in a worker process
    per_env, kind = (FLOORS["env_process"], "worker processes") if getattr(env, "use_sync", getattr(env, "sync", True)) is False else (
        FLOORS["env"], "envs")  # fmt: skip
    parts: dict[str, tuple[int, str]] = {
        "environment.num_envs": (num_envs * per_env, f"{num_envs} {kind} x {_gib(per_env)}"),
        **algo.memory_parts(manifest),  # the plugin's members and buffers (it may refine the envs' part)
    }
    total = sum(b for b, _ in parts.values())
    if total <= avail:
        return []
    field, (_, _) = max(parts.items(), key=lambda kv: kv[1][0])
    detail = " + ".join(d for _, d in parts.values())
    return [Problem(field, f"needs at least {_gib(total)} of memory ({detail}; a lower bound), "
                           f"but this machine has {_gib(avail)} available")]  # fmt: skip


#: The largest population a run takes. Every generation trains, evaluates and checkpoints each
#: member in turn and a checkpoint holds them all, so a population of thousands (``pop_size: 10000``)
#: passes the memory floor yet never finishes a generation; evolutionary HPO uses tens of members.
MAX_POP_SIZE = 1024


def machine_cpus() -> int:
    """CPUs this process may use (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def backend_problems(manifest: TrainingManifest, cpus: int | None = None) -> list[Problem]:
    """``training.backend: ray`` asks for what a local Ray instance sized to this machine can give.

    Ray waits for resources it will never have (an actor asking for 8 CPUs on a 2-CPU machine is
    pending forever), so the request is checked here. Against a cluster (``ray_address`` or
    ``RAY_ADDRESS``) the run checks the cluster's resources when it connects.
    """
    t = manifest.training
    if t.backend != "ray" or t.ray_address or os.environ.get("RAY_ADDRESS"):
        return []
    have = machine_cpus() if cpus is None else cpus
    if t.num_cpus_per_member > have:
        return [Problem("training.num_cpus_per_member", (
            f"{t.num_cpus_per_member:g} CPUs per member, but this machine has {have} (a local Ray instance is "
            f"sized to it, and a worker asking for more would wait forever); use at most {have}, or join a "
            "larger cluster with training.ray_address"))]  # fmt: skip
    workers = min(t.ray_workers, t.pop_size) if t.ray_workers is not None else None
    if workers is not None and workers * t.num_cpus_per_member > have:
        return [Problem("training.ray_workers", (
            f"{workers} workers x {t.num_cpus_per_member:g} CPUs (num_cpus_per_member) need "
            f"{workers * t.num_cpus_per_member:g} CPUs, but this machine has {have}; the workers beyond it would "
            f"wait forever. Use at most {int(have // t.num_cpus_per_member) if t.num_cpus_per_member else have} "
            "workers, lower num_cpus_per_member, or remove ray_workers (the default fits the machine)"))]  # fmt: skip
    return []


def cross_field_problems(manifest: TrainingManifest) -> list[Problem]:
    problems: list[Problem] = []
    t = manifest.training
    if t.pop_size > MAX_POP_SIZE:
        problems.append(Problem("training.pop_size", (
            f"{t.pop_size} members is more than a run takes (at most {MAX_POP_SIZE}): every generation trains, "
            "evaluates and checkpoints each member in turn, so it would not finish one; evolution works with "
            "tens of members")))  # fmt: skip
    sel = manifest.tournament_selection
    # A 2-agent tournament over a population of 1 keeps that agent (AgileRL's own manifests do it).
    size = getattr(sel, "tournament_size", None)  # MF-PBT's layout is checked by its own spec
    if sel is not None and size is not None and size > max(t.pop_size, 2):
        problems.append(Problem(
            "tournament_selection.tournament_size",
            f"{size} is larger than the population (training.pop_size {t.pop_size})",
        ))  # fmt: skip
    evolves = manifest.mutation is not None or sel is not None
    if evolves and t.pop_size > 1 and t.evo_steps is not None and t.evo_steps > t.max_steps:
        # Evolution runs between generations; max_steps ends the run inside the first one. (A budget
        # of exactly one generation is left alone: a cheap smoke run of a population.)
        which = "mutation" if manifest.mutation is not None else "tournament_selection"
        problems.append(Problem("training.evo_steps", (
            f"{t.evo_steps} is more than training.max_steps ({t.max_steps}): the run ends inside its first "
            f"generation, so the {which} section never acts; lower evo_steps or raise max_steps")))  # fmt: skip
    if manifest.mutation is not None:
        supported = type(manifest.algorithm).supported_mutations
        weights = manifest.mutation.probabilities.operator_weights()
        if not any(w > 0 for op, w in weights.items() if op in supported):
            problems.append(Problem(
                "mutation.probabilities",
                f"every operator {manifest.algorithm.name} supports has probability 0 "
                f"({', '.join(sorted(op for op in weights if op in supported))}); "
                "give one (no_mut for none) a positive weight, or remove the mutation section",
            ))  # fmt: skip
        choices = type(manifest.algorithm).activation_choices
        if weights["act_mut"] > 0 and "act_mut" in supported and choices is not None:
            unknown = [a for a in manifest.mutation.activation_selection if a not in choices]
            if unknown:
                problems.append(Problem(
                    "mutation.activation_selection",
                    f"{manifest.algorithm.name}'s networks have no activation {', '.join(map(repr, unknown))}; "
                    f"choose from {', '.join(sorted(choices))}",
                ))  # fmt: skip
    return problems


def writable_dir_problem(path: str, field: str) -> Problem | None:
    """Whether files can be written in the directory ``path`` names (created if missing): found now,
    not at the first checkpoint write after a generation's work. The nearest existing folder must be
    a directory that takes a file (tried with a temporary file, deleted at once: as root, permission
    bits say nothing, a read-only mount or ``/proc`` still refuse)."""
    import tempfile
    from pathlib import Path

    folder = Path(os.path.expandvars(path)).expanduser()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return Problem(field, f"{path!r} cannot hold files: {str(existing)!r} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return Problem(field, f"cannot write in {str(existing)!r} (for {path!r}): {exc.strerror or exc}")
    return None


def path_problems(manifest: TrainingManifest) -> list[Problem]:
    """Where the run writes its checkpoints, checked before any work is done."""
    t = manifest.training
    if not t.checkpoint_path:
        return []
    from pathlib import Path

    problem = writable_dir_problem(str(Path(t.checkpoint_path).parent), "training.checkpoint_path")
    return [problem] if problem is not None else []


def manifest_problems(manifest: TrainingManifest) -> list[Problem]:
    """Every check of this module, in order."""
    return [
        *cross_field_problems(manifest),
        *path_problems(manifest),
        *device_problems(manifest.training.device),
        *backend_problems(manifest),
        *resource_problems(manifest),
    ]


__all__ = ["FLOORS", "MAX_POP_SIZE", "available_memory", "backend_problems", "cross_field_problems", "device_problems",
           "machine_cpus", "manifest_problems", "path_problems", "resource_problems", "writable_dir_problem"]  # fmt: skip
