"""Checkpoint files: written atomically (temp file + rename), loaded safely.

With torch installed a checkpoint is a ``torch.save`` file loaded with ``weights_only=True``, so
values are limited to tensors, numbers, strings, bools, None and containers of those. Without torch
(a pure-Python algorithm) it is JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError

FORMAT = "agilerl-population/1"


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def atomic_write(path: str | os.PathLike[str], write: Any) -> Path:
    """Call ``write(fileobj)`` on a temp file beside ``path``, fsync, then rename over ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
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


def save(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` atomically to ``path``; :class:`CheckpointWriteError` if it cannot be."""
    try:
        if _has_torch():
            import torch

            return atomic_write(path, lambda fh: torch.save(payload, fh))
        data = json.dumps(payload).encode()
        return atomic_write(path, lambda fh: fh.write(data))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CheckpointWriteError(
            f"cannot write checkpoint {path}: {reason}"
            + (f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else "")
            + ". Checkpoints written before it are intact; free space or fix the path, then resume from the last one"
        ) from None
    except RuntimeError as exc:  # torch.save reports a failed write as RuntimeError (e.g. ENOSPC)
        if "write" not in str(exc).lower() and "file" not in str(exc).lower():
            raise
        raise CheckpointWriteError(
            f"cannot write checkpoint {path}: {exc}. Checkpoints written before it are intact; "
            "free space or fix the path, then resume from the last one"
        ) from None


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


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save`."""
    p = Path(path)
    if not p.is_file():
        raise AgileRLError(f"checkpoint not found: {p}")
    with p.open("rb") as fh:
        head = fh.read(1)
    try:
        if head == b"{":
            payload = json.loads(p.read_text())
        else:
            import torch

            _check_torch_version(torch.__version__)
            payload = torch.load(p, map_location="cpu", weights_only=True)
    except AgileRLError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise AgileRLError(f"cannot read checkpoint {p}: {type(exc).__name__}: {first}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise AgileRLError(f"{p} is not an agilerl population checkpoint")
    return payload
