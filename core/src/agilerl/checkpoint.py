"""Checkpoint files: written atomically (temp file + rename), loaded safely, verified.

With torch installed a checkpoint is a ``torch.save`` file loaded with ``weights_only=True``, so
values are limited to tensors, numbers, strings, bools, None and containers of those. Without torch
(a pure-Python algorithm) it is JSON.

Every checkpoint stores a SHA-256 :func:`digest` of its payload (each tensor's dtype, shape and
bytes, every key and value) under ``"digest"``; :func:`load` recomputes it and refuses a file
whose contents changed (:class:`CheckpointCorruptError`, naming the file). Files written before
the digest existed load unchecked.

Files are created with the process's umask applied to mode 0666, like every other file of a run
(see docs/reliability.md, "File permissions").
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError

FORMAT = "agilerl-population/1"
DIGEST_KEY = "digest"


class NoCheckpointError(AgileRLError):
    """There is no checkpoint where one was asked for (a missing file, a run directory without one)."""

    exit_code = 2


def no_checkpoint(path: str | os.PathLike[str], looked_for: str = "") -> NoCheckpointError:
    """The one "no checkpoint" error every entry point raises (same wording, exit code 2)."""
    hint = f" (looked for {looked_for})" if looked_for else ""
    return NoCheckpointError(
        f"no checkpoint at {path}{hint}: give a checkpoint file or a run directory written by agilerl train"
    )


class CheckpointCorruptError(AgileRLError):
    """A checkpoint file is damaged: truncated, unreadable, or its contents do not match its digest."""

    exit_code = 2


class NotACheckpointError(AgileRLError):
    """A file given as a checkpoint is something else (a manifest, most often)."""

    exit_code = 2


def _is_manifest(p: Path, payload: Any = None) -> bool:
    """Whether ``p`` (or its parsed JSON ``payload``) is a training manifest, not a checkpoint."""
    if p.suffix.lower() in (".yaml", ".yml"):
        return True
    return isinstance(payload, dict) and "format" not in payload and ("algorithm" in payload or "apiVersion" in payload)


def not_a_checkpoint(p: Path) -> NotACheckpointError:
    return NotACheckpointError(
        f"{p} is a manifest, not a checkpoint: a checkpoint is a .pt file (or a run directory) written by "
        f"agilerl train. Train from this manifest with agilerl train {p}; continue a run with "
        f"agilerl train {p} --resume RUN_DIR (or CHECKPOINT)"
    )


class CheckpointMismatchError(AgileRLError):
    """A checkpoint does not fit the manifest it is used with (another algorithm, another network)."""


def umask() -> int:
    """The process's file-creation mask (read without changing it where /proc tells it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def atomic_write(path: str | os.PathLike[str], write: Any) -> Path:
    """Call ``write(fileobj)`` on a temp file beside ``path``, fsync, then rename over ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes 0600; a run's files all follow the umask
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


class CheckpointWriteError(AgileRLError, OSError):
    """A checkpoint could not be written (disk full, read-only or missing directory): the run
    stops, and every checkpoint written before is intact (writes go to a temp file first)."""

    exit_code = 2


class _RecordingWriter:
    """A file wrapper that keeps the ``OSError`` a write raised: torch's writer turns it into a
    ``RuntimeError`` whose text depends on where in the file it happened."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return int(self._fh.write(data))
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self._fh.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def _write_error(path: str | os.PathLike[str], exc: OSError) -> CheckpointWriteError:
    reason = exc.strerror or str(exc)
    return CheckpointWriteError(
        f"cannot write checkpoint {path}: {reason}"
        + (f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else "")
        + ". Checkpoints written before it are intact; free space or fix the path, then resume from the last one"
    )


def save(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` (with its :func:`digest`) atomically to ``path``; :class:`CheckpointWriteError`
    if it cannot be (disk full at any point of the file, read-only or missing directory)."""
    payload = {k: v for k, v in payload.items() if k != DIGEST_KEY}
    torch_file = _has_torch()
    if not torch_file:  # digest what JSON gives back (its keys are strings, its tuples lists)
        payload = json.loads(json.dumps(payload))
    payload[DIGEST_KEY] = digest(payload)
    recorder: list[_RecordingWriter] = []
    try:
        if torch_file:
            import torch

            def write(fh: Any) -> None:
                rec = _RecordingWriter(fh)
                recorder.append(rec)
                torch.save(payload, rec)

            return atomic_write(path, write)
        data = json.dumps(payload).encode()
        return atomic_write(path, lambda fh: fh.write(data))
    except OSError as exc:
        raise _write_error(path, exc) from None
    except RuntimeError as exc:  # torch.save reports a failed write as RuntimeError (e.g. ENOSPC)
        if recorder and recorder[0].error is not None:
            raise _write_error(path, recorder[0].error) from None
        if "write" not in str(exc).lower() and "file" not in str(exc).lower():
            raise
        raise CheckpointWriteError(
            f"cannot write checkpoint {path}: {exc}. Checkpoints written before it are intact; "
            "free space or fix the path, then resume from the last one"
        ) from None


def digest(payload: Mapping[str, Any]) -> str:
    """``"sha256:<hex>"`` of ``payload`` (its ``"digest"`` key left out): every key and value, and each
    tensor's dtype, shape and bytes, so a flipped byte anywhere in the data changes it."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in payload.items() if k != DIGEST_KEY})
    return "sha256:" + h.hexdigest()


def _feed(h: Any, value: Any) -> None:
    if value is None or isinstance(value, bool):
        h.update(b"N" if value is None else (b"T" if value else b"F"))
    elif isinstance(value, int):
        text = str(value).encode()
        h.update(b"i" + struct.pack("<Q", len(text)) + text)
    elif isinstance(value, float):
        # NaN is one value here whatever its payload bits (JSON cannot keep them apart either)
        h.update(b"f" + (b"nan" if math.isnan(value) else struct.pack("<d", value)))
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        h.update(b"s" + struct.pack("<Q", len(data)) + data)
    elif isinstance(value, (bytes, bytearray)):
        h.update(b"b" + struct.pack("<Q", len(value)) + bytes(value))
    elif isinstance(value, Mapping):
        h.update(b"{" + struct.pack("<Q", len(value)))
        for k, v in value.items():
            _feed(h, k)
            _feed(h, v)
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        h.update(b"[" + struct.pack("<Q", len(value)))
        for v in value:
            _feed(h, v)
        h.update(b"]")
    else:
        _feed_array(h, value)


def _buffer(arr: Any) -> Any:
    """A contiguous array's bytes for the hash without copying them (the largest tensors of a run
    would otherwise be held twice in memory while the checkpoint is written); ``tobytes`` where the
    buffer protocol refuses the dtype (e.g. datetime64). The same bytes either way."""
    try:
        return memoryview(arr)
    except (TypeError, ValueError):
        return arr.tobytes()


def _feed_array(h: Any, value: Any) -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        head = f"tensor:{t.dtype}:{tuple(t.shape)}".encode()
        h.update(b"t" + struct.pack("<Q", len(head)) + head)
        if t.numel():
            try:
                h.update(_buffer(t.reshape(-1).contiguous().view(torch.uint8).numpy()))
            except (RuntimeError, TypeError, NotImplementedError):  # a sparse or other exotic layout
                _feed(h, t.to_dense().tolist() if t.is_sparse else t.tolist())
        return
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        head = f"ndarray:{value.dtype.str}:{value.shape}".encode()
        h.update(b"a" + struct.pack("<Q", len(head)) + head)
        h.update(_buffer(np.ascontiguousarray(value)))
        return
    if np is not None and isinstance(value, np.generic):
        _feed(h, value.item())
        return
    text = f"{type(value).__module__}.{type(value).__qualname__}:{value!r}".encode()
    h.update(b"o" + struct.pack("<Q", len(text)) + text)


#: ``torch.load(weights_only=True)`` is the safe loader from torch 2.6 on (earlier releases had
#: bypasses of the weights-only unpickler); older torch is refused rather than trusted.
MIN_TORCH = (2, 6)


def _check_torch_version(version: str) -> None:
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    if tuple(parts) < MIN_TORCH:
        raise AgileRLError(
            f"loading checkpoints needs torch >= {'.'.join(map(str, MIN_TORCH))} (safe weights_only loading); "
            f"this is torch {version}"
        )


def _read_error(p: Path, exc: Exception) -> CheckpointCorruptError:
    """What a file :func:`load` could not read is: one holding non-data objects (torch's weights-only
    unpickler names the global it refused), or a damaged one. torch's own advice (load it again with
    ``weights_only=False``, which would run the file's code) is never passed on."""
    text = str(exc)
    refused = re.search(r"\bGLOBAL ([\w.]+)", text)  # "Unsupported global: GLOBAL x", "unsupported GLOBAL x"
    if refused:
        return CheckpointCorruptError(
            f"checkpoint {p} holds non-data objects (it names {refused.group(1)}): refused. A checkpoint holds only "
            "tensors, numbers, strings and containers of those, and is never loaded as a pickle that runs code; "
            "use a checkpoint written by agilerl train"
        )
    unpickler = re.search(r"WeightsUnpickler error: ([^\n]*)", text)
    if unpickler:
        first = unpickler.group(1).strip()
    else:
        first = text.strip().splitlines()[0] if text.strip() else ""
        if "weights_only" in first:  # torch's advice, not a reason
            first = ""
    return CheckpointCorruptError(
        f"cannot read checkpoint {p} (damaged or truncated?): {type(exc).__name__}" + (f": {first}" if first else "")
    )


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save`, verifying its digest.

    :raises NoCheckpointError: no file at ``path``.
    :raises CheckpointCorruptError: the file is truncated, unreadable or changed since it was written, or
        holds non-data objects (refused, never unpickled).
    """
    p = Path(path)
    if not p.is_file():
        raise no_checkpoint(p)
    try:
        with p.open("rb") as fh:
            head = fh.read(1)
    except OSError as exc:
        raise CheckpointCorruptError(f"cannot read checkpoint {p}: {exc.strerror or exc}") from None
    if not head:
        raise CheckpointCorruptError(f"checkpoint {p} is damaged: the file is empty (0 bytes)")
    if _is_manifest(p):
        raise not_a_checkpoint(p)
    try:
        if head == b"{":
            payload = json.loads(p.read_text())
            if _is_manifest(p, payload):
                raise not_a_checkpoint(p)
        else:
            import torch

            _check_torch_version(torch.__version__)
            payload = torch.load(p, map_location="cpu", weights_only=True)
    except AgileRLError:
        raise
    except Exception as exc:
        raise _read_error(p, exc) from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise AgileRLError(f"{p} is not an agilerl population checkpoint")
    stored = payload.get(DIGEST_KEY)
    if stored is not None and stored != digest(payload):
        raise CheckpointCorruptError(
            f"checkpoint {p} is damaged: its contents do not match the digest stored in it when it was written "
            "(a changed byte, a bad disk or copy); use an older checkpoint of the run"
        )
    _check_structure(p, payload)
    return payload


#: The manifest sections a checkpoint's manifest must hold as mappings, when present.
_SECTIONS = ("algorithm", "environment", "training", "network", "mutation", "replay_buffer",
             "tournament_selection", "logging")  # fmt: skip


def _check_structure(p: Path, payload: dict[str, Any]) -> None:
    """Name what is wrong with a payload's shape (a hand-written or foreign file), instead of the
    ``AttributeError`` or ``KeyError`` that using it would raise later."""

    def kind(v: Any) -> str:
        return type(v).__name__

    manifest = payload.get("manifest", {})
    if not isinstance(manifest, dict):
        raise CheckpointCorruptError(
            f"checkpoint {p}: its stored manifest is a {kind(manifest)}, not a mapping; was this file written "
            "by agilerl train?"
        )
    for section in _SECTIONS:
        if section in manifest and manifest[section] is not None and not isinstance(manifest[section], dict):
            raise CheckpointCorruptError(
                f"checkpoint {p}: its stored manifest's {section} is a {kind(manifest[section])}, not a mapping"
            )
    agents = payload.get("agents", [])
    if not isinstance(agents, list) or not all(isinstance(a, dict) for a in agents):
        raise CheckpointCorruptError(f"checkpoint {p}: agents must be a list of agent states")
    generation = payload.get("generation", 0)
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise CheckpointCorruptError(f"checkpoint {p}: generation is a {kind(generation)}, not an integer")


def stored_algorithm(payload_manifest: Mapping[str, Any] | None) -> str | None:
    algo = (payload_manifest or {}).get("algorithm")
    name = algo.get("name") if isinstance(algo, Mapping) else None
    return str(name) if name is not None else None


def check_same_algorithm(
    path: str | os.PathLike[str], stored: Mapping[str, Any] | None, current: Mapping[str, Any]
) -> None:
    """Refuse to use a checkpoint of one algorithm with a manifest naming another (one algorithm's
    population resumed with another's manifest), naming both."""
    was, now = stored_algorithm(stored), stored_algorithm(current)
    if was is not None and now is not None and was != now:
        raise CheckpointMismatchError(
            f"{path} holds a {was} population, but the manifest names algorithm {now}; use the manifest it was "
            f"trained with (algorithm.name: {was}), or start a new run"
        )


def check_has_agents(path: str | os.PathLike[str], payload: Mapping[str, Any]) -> None:
    """Refuse to resume a checkpoint that holds no agent state (an empty or missing ``agents`` list),
    or whose run record lacks the random streams a resume restores (``rng``: a hand-made or foreign
    file; ``agilerl eval`` needs neither and still reads it)."""
    if not payload.get("agents"):
        raise CheckpointMismatchError(f"{path} holds no agent state (its agents list is empty): nothing to resume")
    rng = payload.get("rng")
    needed = ("python_version", "python")
    if not isinstance(rng, Mapping) or any(k not in rng for k in needed):
        what = "has no rng record" if rng is None else f"has an rng record without {', '.join(needed)}"
        raise CheckpointMismatchError(
            f"{path} {what} (the run's random streams, written by agilerl train): it cannot be resumed "
            "exactly; evaluate it with agilerl eval, or start a new run from its manifest"
        )


def newest_intact(candidates: list[Path], warn: Any = None) -> tuple[Path, dict[str, Any]]:
    """The first of ``candidates`` (newest first) that loads and verifies, with its payload.

    Each damaged file skipped is reported through ``warn(message)`` (default: the ``agilerl``
    logger's warning); if every one is damaged, the newest one's error is raised.
    """
    import logging

    report = warn or logging.getLogger("agilerl.checkpoint").warning
    first: CheckpointCorruptError | None = None
    for i, path in enumerate(candidates):
        try:
            payload = load(path)
        except CheckpointCorruptError as exc:
            first = first or exc
            later = candidates[i + 1] if i + 1 < len(candidates) else None
            report(f"{exc}" + (f"; falling back to {later}" if later else ""))
            continue
        return path, payload
    assert first is not None, "newest_intact needs at least one candidate"
    raise first
