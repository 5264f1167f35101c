"""Resuming a run: what differs from the stored manifest, and what code a checkpoint would import.

A checkpoint is loaded with ``torch.load(weights_only=True)``: the file itself runs nothing. But
its stored manifest can name code (an env ``entrypoint``, a ``factory``, a ``path`` put on
``sys.path``, wrappers, a rubric file) that a resume would import. :func:`code_references` lists
those so ``agilerl train --resume`` can show them and require either the manifest file or an
explicit ``--trust-checkpoint``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The trust rule lives in agilerl.trust (every entry point that reads a checkpoint applies it).
from agilerl.trust import CODE_KEYS, UntrustedCheckpointError, code_references, require_trust


def _flatten(node: Any, path: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{path}.{k}" if path else str(k)))
        return out
    return {path: node}


def manifest_diff(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(field path, stored value, current value)`` for each field that differs (defaults omitted)."""
    a, b = _flatten(stored), _flatten(current)
    missing = object()
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            out.append((key, None if va is missing else va, None if vb is missing else vb))
    return out


def describe_diff(diff: list[tuple[str, Any, Any]]) -> str:
    if not diff:
        return "resuming with the checkpoint's manifest unchanged"
    lines = [f"resuming with {len(diff)} field(s) that differ from the checkpoint's manifest:"]
    lines += [f"  {path}: {old!r} -> {new!r}" for path, old, new in diff]
    return "\n".join(lines)


__all__ = ["CODE_KEYS", "UntrustedCheckpointError", "code_references", "describe_diff", "manifest_diff",
           "require_trust"]  # fmt: skip
