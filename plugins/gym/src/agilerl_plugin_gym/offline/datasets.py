"""Offline datasets: AgileRL's HDF5 format and local Minari datasets, checked against the env's spaces.

Two sources, one result (:class:`Transitions`: ``obs``, ``action``, ``reward``, ``next_obs``,
``done`` arrays, one row per transition):

* **HDF5** (``environment.dataset_path``), AgileRL's offline format: datasets ``observations``,
  ``actions``, ``rewards``, ``terminals`` with one row per step. As in AgileRL, row ``i`` pairs with
  row ``i + 1`` as its next observation (so the last row has none and is dropped), and
  ``terminals[i]`` ends the bootstrap. Two optional datasets refine that: ``next_observations``
  (what AgileRL's Minari converter writes) gives each row its own next observation (every row is
  kept), and ``timeouts`` (D4RL's name) marks rows whose episode was cut off, whose next row
  belongs to another episode: without ``next_observations`` those rows are dropped.
* **Minari** (``environment.minari_dataset_id``): read with the ``minari`` package from the local
  Minari directory (``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``). Nothing is ever
  downloaded: a dataset that is not there is a validation error saying how to get it. Episodes give
  exact transitions (``observations[t]`` -> ``observations[t + 1]``, ``terminations[t]``).

Every problem (no such file, an empty or non-HDF5 file, a missing key, rows of a shape the env's
observation space does not have, actions outside the action space, non-finite values, keys of
different lengths) is one message naming the manifest field, the file and the key:
:func:`dataset_problems` returns them at validation, :func:`read_dataset` raises
:class:`OfflineDatasetError` when a run loads the data.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from agilerl.errors import AgileRLError, Problem, closest
from agilerl_plugin_gym.envs import make_single_env

if TYPE_CHECKING:
    from agilerl_plugin_gym.offline.specs import OfflineEnvSpec

__all__ = [
    "HDF5_KEYS",
    "OfflineDatasetError",
    "Transitions",
    "dataset_problems",
    "minari_root",
    "read_dataset",
]

#: The datasets an HDF5 file in AgileRL's offline format must hold.
HDF5_KEYS = ("observations", "actions", "rewards", "terminals")
_OPTIONAL_KEYS = ("next_observations", "timeouts")
_INSTALL = "pip install 'agilerl-plugin-gym[offline]'"


class OfflineDatasetError(AgileRLError):
    """The offline dataset cannot be used with this env (the message names the field, file and key)."""


class _Bad(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


@dataclass
class Transitions:
    """One row per transition: ``obs``, ``action``, ``reward``, ``next_obs``, ``done`` (terminated)."""

    fields: dict[str, np.ndarray]
    source: str
    #: Mean return of the dataset's episodes that end inside it (None when no episode does).
    behaviour_return: float | None = None

    def __len__(self) -> int:
        return int(self.fields["reward"].shape[0])

    def fingerprint(self) -> str:
        """sha256 of the transitions (a resumed run checks that it trains on the same data)."""
        h = hashlib.sha256()
        for key in sorted(self.fields):
            arr = np.ascontiguousarray(self.fields[key])
            h.update(f"{key}:{arr.dtype.str}:{arr.shape}".encode())
            h.update(arr.data.cast("B"))
        return h.hexdigest()


def minari_root() -> Path:
    """The local Minari directory: ``MINARI_DATASETS_PATH``, else ``~/.minari/datasets`` (not created)."""
    root = os.environ.get("MINARI_DATASETS_PATH")
    return Path(root) if root else Path.home() / ".minari" / "datasets"


def read_dataset(
    spec: OfflineEnvSpec, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]
) -> Transitions:
    """Load ``spec``'s dataset as transitions for an env with these spaces.

    :raises OfflineDatasetError: naming the manifest field, the file and the key at fault.
    """
    try:
        return _read(spec, observation_space, action_space)
    except _Bad as bad:
        raise OfflineDatasetError(f"{bad.field}: {bad.message}") from None


def dataset_problems(spec: OfflineEnvSpec, batch: int) -> list[Problem]:
    """Validation-time check of an offline env's dataset against one env made from it, and of the
    algorithm's ``batch_size`` (``batch``) against its size."""
    try:
        env = make_single_env(spec)
    except Exception:  # the env's own failure is reported by the env checks (or the run)
        return []
    try:
        data = _read(spec, env.observation_space, env.action_space)  # type: ignore[arg-type]
    except _Bad as bad:
        return [Problem(bad.field, bad.message)]
    finally:
        env.close()
    if batch > len(data):
        return [Problem(
            "algorithm.batch_size",
            f"{batch} is larger than the dataset ({len(data)} transitions in {data.source}); "
            "no batch could ever be sampled: make batch_size <= the dataset size",
        )]  # fmt: skip
    return []


# --------------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------------


def _read(spec: OfflineEnvSpec, obs_space: spaces.Space[Any], act_space: spaces.Space[Any]) -> Transitions:
    if spec.minari_dataset_id:
        return _read_minari(spec.minari_dataset_id, obs_space, act_space)
    assert spec.dataset_path is not None  # the spec requires one source
    return _read_hdf5(spec.dataset_path, obs_space, act_space)


def _read_hdf5(path_str: str, obs_space: spaces.Space[Any], act_space: spaces.Space[Any]) -> Transitions:
    field = "environment.dataset_path"
    path = Path(path_str).expanduser()
    where = str(path.resolve())
    if not path.exists():
        raise _Bad(field, f"no such file: {where}")
    if path.is_dir():
        raise _Bad(field, f"{where} is a directory, not an HDF5 file")
    if path.stat().st_size == 0:
        raise _Bad(field, f"{where} is empty (0 bytes); expected an HDF5 file with {', '.join(HDF5_KEYS)}")
    try:
        import h5py
    except ImportError:
        raise _Bad(field, f"reading HDF5 datasets needs h5py: {_INSTALL}") from None
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise _Bad(field, f"{where} is not a readable HDF5 file ({exc})") from None
    with handle:
        missing = [k for k in HDF5_KEYS if k not in handle]
        if missing:
            names = ", ".join(repr(k) for k in missing)
            found = ", ".join(sorted(handle.keys())) or "nothing"
            raise _Bad(field, (
                f"{where} has no {names} dataset{'s' if len(missing) > 1 else ''}; AgileRL's offline format "
                f"needs {', '.join(HDF5_KEYS)} (the file has: {found})"
            ))  # fmt: skip
        arrays: dict[str, np.ndarray] = {}
        for key in (*HDF5_KEYS, *_OPTIONAL_KEYS):
            if key not in handle:
                continue
            node = handle[key]
            if not isinstance(node, h5py.Dataset) or node.ndim == 0:
                raise _Bad(field, f"{where}: '{key}' must be an array dataset with one row per step")
            arrays[key] = np.asarray(node[()])
    n = arrays["rewards"].shape[0]
    for key, arr in arrays.items():
        if arr.shape[0] != n:
            raise _Bad(field, f"{where}: '{key}' has {arr.shape[0]} rows but 'rewards' has {n}")
    if n == 0:
        raise _Bad(field, f"{where} holds no transitions (0 rows in 'rewards')")
    at = f"{where}: "
    obs = _check_obs(arrays["observations"], obs_space, at + "'observations'", field)
    action = _check_actions(arrays["actions"], act_space, at + "'actions'", field)
    reward = _check_scalar(arrays["rewards"], at + "'rewards'", field)
    done = _check_scalar(arrays["terminals"], at + "'terminals'", field) != 0
    if "next_observations" in arrays:
        next_obs = _check_obs(arrays["next_observations"], obs_space, at + "'next_observations'", field)
        keep = np.ones(n, dtype=bool)
    else:  # AgileRL's pairing: the next row is the next observation; the last row has none
        if n < 2:
            raise _Bad(field, (
                f"{where} has one row: without 'next_observations', each row's next observation is the "
                "next row, so one row holds no transition"
            ))  # fmt: skip
        next_obs, obs, action, reward, done = obs[1:], obs[:-1], action[:-1], reward[:-1], done[:-1]
        keep = np.ones(n - 1, dtype=bool)
        if "timeouts" in arrays:  # a cut-off episode's next row starts another episode
            keep &= _check_scalar(arrays["timeouts"], at + "'timeouts'", field)[:-1] == 0
    fields = {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs, "done": done}
    if not keep.all():
        fields = {k: v[keep] for k, v in fields.items()}
    if fields["reward"].shape[0] == 0:
        raise _Bad(field, f"{where} holds no transitions once rows cut off by 'timeouts' are dropped")
    episode_ends = arrays["terminals"].reshape(n) != 0
    if "timeouts" in arrays:
        episode_ends |= arrays["timeouts"].reshape(n) != 0
    return Transitions(_as_float(fields), where, _mean_return(arrays["rewards"].reshape(n), episode_ends))


def _minari_ids(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(str(p.parent.parent.relative_to(root)) for p in root.glob("**/data/metadata.json"))


def _read_minari(dataset_id: str, obs_space: spaces.Space[Any], act_space: spaces.Space[Any]) -> Transitions:
    field = "environment.minari_dataset_id"
    root = minari_root()
    data_dir = root / dataset_id / "data"
    if not (data_dir / "metadata.json").is_file():
        where = f"MINARI_DATASETS_PATH={root}" if os.environ.get("MINARI_DATASETS_PATH") else "~/.minari/datasets"
        hint = closest(dataset_id, _minari_ids(root))
        raise _Bad(field, (
            f"Minari dataset {dataset_id!r} is not in the local Minari directory ({where})"
            + (f"; did you mean {hint!r}?" if hint else "")
            + f". Nothing is downloaded at run time: download it beforehand (`minari download {dataset_id}`), "
            "set MINARI_DATASETS_PATH to the directory that holds it, or give an HDF5 file in dataset_path"
        ))  # fmt: skip
    try:
        import minari
    except ImportError:
        raise _Bad(field, f"reading Minari datasets needs the minari package: {_INSTALL}") from None
    where = f"Minari dataset {dataset_id!r} ({data_dir})"
    try:
        dataset = minari.load_dataset(dataset_id, download=False)
    except Exception as exc:
        raise _Bad(field, f"{where} could not be read: {type(exc).__name__}: {exc}") from None
    for what, theirs, ours in (
        ("observation", dataset.observation_space, obs_space),
        ("action", dataset.action_space, act_space),
    ):
        if type(theirs) is not type(ours) or theirs.shape != ours.shape or _n(theirs) != _n(ours):
            raise _Bad(field, f"{where} has {what} space {theirs}, but the env's {what} space is {ours}")
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "action", "reward", "next_obs", "done")}
    returns: list[float] = []
    for episode in dataset.iterate_episodes():
        o = np.asarray(episode.observations)
        if not isinstance(episode.observations, np.ndarray) or o.shape[0] != len(episode.rewards) + 1:
            raise _Bad(
                field, f"{where}: episode {episode.id} has observations that are not one array of steps + 1 rows"
            )
        parts["obs"].append(o[:-1])
        parts["next_obs"].append(o[1:])
        parts["action"].append(np.asarray(episode.actions))
        parts["reward"].append(np.asarray(episode.rewards))
        parts["done"].append(np.asarray(episode.terminations))
        if bool(np.asarray(episode.terminations)[-1:].any() or np.asarray(episode.truncations)[-1:].any()):
            returns.append(float(np.sum(episode.rewards)))
    if not parts["reward"] or sum(len(r) for r in parts["reward"]) == 0:
        raise _Bad(field, f"{where} holds no transitions")
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    fields = {
        "obs": _check_obs(cat["obs"], obs_space, f"{where}: observations", field),
        "next_obs": _check_obs(cat["next_obs"], obs_space, f"{where}: observations", field),
        "action": _check_actions(cat["action"], act_space, f"{where}: actions", field),
        "reward": _check_scalar(cat["reward"], f"{where}: rewards", field),
        "done": _check_scalar(cat["done"], f"{where}: terminations", field) != 0,
    }
    return Transitions(_as_float(fields), where, float(np.mean(returns)) if returns else None)


# --------------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------------


def _n(space: spaces.Space[Any]) -> int | None:
    return int(space.n) if isinstance(space, spaces.Discrete) else None


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1))[0])


def _check_obs(arr: np.ndarray, space: spaces.Space[Any], what: str, field: str) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        if arr.shape[1:] not in ((), (1,)):
            raise _Bad(
                field, f"{what} rows have shape {arr.shape[1:]}, but the env's observations are {space} (one integer)"
            )
        arr = arr.reshape(arr.shape[0])
        if not np.issubdtype(arr.dtype, np.number) or np.any(arr != np.round(arr)):
            raise _Bad(field, f"{what} must be integers for the env's {space} observations")
        bad = (arr < space.start) | (arr >= space.start + space.n)
        if bad.any():
            raise _Bad(field, f"{what}: {arr[_first_bad(bad)]} at row {_first_bad(bad)} is outside the env's {space}")
        return arr.astype(np.int64)
    shape = getattr(space, "shape", None)
    if arr.shape[1:] != shape:
        raise _Bad(field, (
            f"{what} rows have shape {arr.shape[1:]}, but the env's observation space {space} has shape {shape}"
        ))  # fmt: skip
    if not np.issubdtype(arr.dtype, np.number):
        raise _Bad(field, f"{what} has dtype {arr.dtype}; observations are numbers")
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr)
        if bad.any():
            raise _Bad(field, f"{what}: a non-finite value (NaN or inf) at row {_first_bad(bad)}")
    dtype = getattr(space, "dtype", None)
    return arr.astype(dtype, copy=False) if dtype is not None else arr


def _check_actions(arr: np.ndarray, space: spaces.Space[Any], what: str, field: str) -> np.ndarray:
    if not isinstance(space, spaces.Discrete):
        raise _Bad(field, f"offline training here needs a Discrete action space, not {space}")
    if arr.shape[1:] not in ((), (1,)):
        raise _Bad(field, f"{what} rows have shape {arr.shape[1:]}, but the env's actions are {space} (one integer)")
    arr = arr.reshape(arr.shape[0])
    if not np.issubdtype(arr.dtype, np.number) or (
        np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr) & (arr == np.round(arr)))
    ):
        raise _Bad(field, f"{what} must be integers (actions of {space})")
    bad = (arr < space.start) | (arr >= space.start + space.n)
    if bad.any():
        i = _first_bad(bad)
        raise _Bad(field, f"{what}: action {arr[i]} at row {i} is outside the env's action space {space}")
    return (arr - space.start).astype(np.int64)


def _check_scalar(arr: np.ndarray, what: str, field: str) -> np.ndarray:
    if arr.shape[1:] not in ((), (1,)):
        raise _Bad(field, f"{what} rows have shape {arr.shape[1:]}; expected one number per step")
    arr = arr.reshape(arr.shape[0])
    if arr.dtype != np.bool_ and not np.issubdtype(arr.dtype, np.number):
        raise _Bad(field, f"{what} has dtype {arr.dtype}; expected numbers")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise _Bad(field, f"{what}: a non-finite value (NaN or inf) at row {_first_bad(~np.isfinite(arr))}")
    return arr


def _as_float(fields: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rewards and done flags as float32 (what the loss reads); the rest as checked."""
    return {**fields, "reward": fields["reward"].astype(np.float32), "done": fields["done"].astype(np.float32)}


def _mean_return(rewards: np.ndarray, ends: np.ndarray) -> float | None:
    """Mean return of the episodes that end (``ends``) inside the rows (the first one may be partial)."""
    idx = np.flatnonzero(ends)
    if idx.size == 0:
        return None
    totals = np.cumsum(rewards.astype(np.float64))[idx]
    return float(np.mean(np.diff(totals, prepend=0.0)))
