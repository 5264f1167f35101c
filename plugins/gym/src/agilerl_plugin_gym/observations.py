"""Observation batches of every shape the gym plugin takes: arrays, and ``Dict`` / ``Tuple`` trees.

A gymnasium vector env returns a ``Dict`` observation as a dict of batched arrays and a ``Tuple``
observation as a tuple of them. These helpers treat both (nested to any depth) like one array:
convert to tensors, count the batch, index rows, and flatten to named fields for storage
(``"obs/image"``, ``"obs/0/pos"``) and back. A Tuple comes back as a dict keyed ``"0"``, ``"1"``,
... (the networks read both forms).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

__all__ = [
    "SEP",
    "as_tensors",
    "batch_size",
    "field_layout",
    "flatten_fields",
    "is_structured",
    "map_obs",
    "regroup_fields",
    "rows",
    "subspaces",
]

#: Separator between a field name and a part's key in flattened storage.
SEP = "/"


def is_structured(obs: Any) -> bool:
    """Whether ``obs`` is a Dict/Tuple observation (a mapping or a tuple/list of parts)."""
    return isinstance(obs, (Mapping, tuple, list))


def subspaces(space: spaces.Dict | spaces.Tuple) -> dict[str, spaces.Space[Any]]:
    """The parts of a Dict (by key) or Tuple (keyed ``"0"``, ``"1"``, ...) space, in order."""
    if isinstance(space, spaces.Tuple):
        return {str(i): s for i, s in enumerate(space.spaces)}
    return dict(space.spaces)


def _items(obs: Any) -> list[tuple[str, Any]]:
    if isinstance(obs, Mapping):
        return [(str(k), v) for k, v in obs.items()]
    return [(str(i), v) for i, v in enumerate(obs)]


def map_obs(fn: Callable[[Any], Any], obs: Any) -> Any:
    """``fn`` applied to every array of ``obs`` (tuples become dicts keyed by position)."""
    if is_structured(obs):
        return {k: map_obs(fn, v) for k, v in _items(obs)}
    return fn(obs)


def as_tensors(obs: Any, device: torch.device | str = "cpu") -> Any:
    """A batch as tensors on ``device`` (no copy on CPU where numpy allows)."""
    return map_obs(lambda x: torch.as_tensor(x, device=device), obs)


def batch_size(obs: Any) -> int:
    """Rows in a batch (of the first array of a Dict/Tuple batch)."""
    while is_structured(obs):
        obs = _items(obs)[0][1]
    return int(obs.shape[0])


def flatten_fields(name: str, value: Any) -> dict[str, Any]:
    """``{name: value}`` for an array; ``{"name/key": array, ...}`` for a Dict/Tuple batch."""
    if not is_structured(value):
        return {name: value}
    out: dict[str, Any] = {}
    for k, v in _items(value):
        out.update(flatten_fields(f"{name}{SEP}{k}", v))
    return out


def regroup_fields(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`flatten_fields` over many fields (Tuples come back as dicts)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *path, last = key.split(SEP)
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def field_layout(name: str, obs: Any) -> tuple[Any, Any]:
    """``(shape, dtype)`` of one row of a batch: a tuple and a dtype for an array, and for a
    Dict/Tuple batch mappings keyed like :func:`flatten_fields` (what ``RolloutBuffer`` takes)."""
    if not is_structured(obs):
        arr = np.asarray(obs)
        return tuple(arr.shape[1:]), arr.dtype
    parts = {k: np.asarray(v) for k, v in flatten_fields(name, obs).items()}
    return {k: tuple(v.shape[1:]) for k, v in parts.items()}, {k: v.dtype for k, v in parts.items()}


def rows(batch: Any, idx: Any) -> Any:
    """The rows ``idx`` of a batch (every part of a Dict/Tuple batch)."""
    return map_obs(lambda x: x[idx], batch) if is_structured(batch) else batch[idx]
