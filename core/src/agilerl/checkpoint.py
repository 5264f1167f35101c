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


def save(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` atomically to ``path``."""
    if _has_torch():
        import torch

        return atomic_write(path, lambda fh: torch.save(payload, fh))
    data = json.dumps(payload).encode()
    return atomic_write(path, lambda fh: fh.write(data))


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

            payload = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise AgileRLError(f"cannot read checkpoint {p}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise AgileRLError(f"{p} is not an agilerl population checkpoint")
    return payload
