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

from agilerl.errors import AgileRLError

#: Manifest keys whose values are imported, executed or put on ``sys.path``.
CODE_KEYS = frozenset({"entrypoint", "factory", "path", "env_wrappers", "wrappers", "rubric_file_path",
                       "reward_file_path", "observation_processor"})  # fmt: skip


def code_references(manifest: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(field path, value)`` of every manifest field that names code to import or run."""
    found: list[tuple[str, Any]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                sub = f"{path}.{k}" if path else str(k)
                # `path` only matters for imports (data tables resolve against it too)
                imports = k != "path" or any(node.get(c) for c in ("entrypoint", "factory"))
                if k in CODE_KEYS and v not in (None, "", [], {}) and imports:
                    found.append((sub, v))
                else:
                    walk(v, sub)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    for section in ("environment", "algorithm"):
        walk(manifest.get(section) or {}, section)
    return found


class UntrustedCheckpointError(AgileRLError):
    """A checkpoint's stored manifest names code, and the user has not said to run it."""


def require_trust(checkpoint_path: str, manifest: Mapping[str, Any], *, trusted: bool) -> None:
    """Refuse to resume from a checkpoint whose manifest names code, unless ``trusted``."""
    refs = code_references(manifest)
    if not refs or trusted:
        return
    shown = "\n".join(f"  - {path}: {value!r}" for path, value in refs)
    raise UntrustedCheckpointError(
        f"the manifest stored in {checkpoint_path} names code that resuming would import or run:\n{shown}\n"
        "Resume with the manifest file you trust (agilerl train MANIFEST --resume CHECKPOINT), or pass "
        "--trust-checkpoint if you wrote this checkpoint yourself."
    )


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
