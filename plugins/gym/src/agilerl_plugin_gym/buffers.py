"""Preallocated experience buffers (public API, shared by the RL plugins).

* :class:`ReplayBuffer` — a ring buffer of transitions for off-policy learning (DQN, DDPG, TD3,
  MADDPG ...). Storage is numpy, allocated once (memory committed as rows are written:
  :func:`lazy_zeros`); :meth:`ReplayBuffer.add` copies a *batch* of transitions (one row per vector
  env) in a single slice assignment and :meth:`ReplayBuffer.sample` returns torch tensors. Fields
  are free-form: you name them on the first ``add``.
* :class:`RolloutBuffer` — fixed-size on-policy storage of ``(num_steps, num_envs)`` torch tensors
  with Generalised Advantage Estimation (PPO, IPPO ...), aware of Gymnasium 1.x *next-step*
  autoreset (see :meth:`RolloutBuffer.compute_returns_and_advantages`);
* :func:`gae` — the estimate itself over a ``(steps, envs)`` rollout (numpy only), aware of the
  autoreset step (``valid``) and of the difference between termination (no bootstrap) and an
  episode end that cuts a trajectory (bootstrap, but no credit across it).

Both save to / load from ``state_dict()`` made of tensors and python scalars only, so they ride in an
agilerl checkpoint (``torch.load(weights_only=True)``), including the sampling RNG.

Example::

    buf = ReplayBuffer(100_000, seed=0)
    buf.add(obs=obs, action=act, reward=rew, next_obs=nxt, done=term)   # arrays of shape (n, ...)
    batch = buf.sample(128)                                              # dict of tensors
"""

from __future__ import annotations

import mmap
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from agilerl_plugin_gym.observations import SEP, flatten_fields, is_structured, regroup_fields

__all__ = ["ReplayBuffer", "RolloutBuffer", "gae", "lazy_zeros", "numpy_rng_state", "set_numpy_rng_state"]

#: Arrays at least this large are mapped from the OS (:func:`lazy_zeros`); smaller ones are plain.
LAZY_ZEROS_MIN_BYTES = 1 << 20


def lazy_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.zeros(shape, dtype)`` whose memory is committed only where it is written.

    ``np.zeros`` calls ``calloc``, and glibc serves requests under its adaptive mmap threshold
    (raised, up to 32 MiB, each time the process frees a large mapped block) from its heap, whose
    reused memory it must clear byte by byte: in a training process a ``max_size`` 1,000,000 replay
    buffer's action, reward and done columns cost their full ~19 MB of RSS before the first
    transition. An anonymous private ``mmap`` is zero pages the kernel commits on first write (and
    copies on write in a forked child, as the heap would), so a buffer costs the rows it holds.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < LAZY_ZEROS_MIN_BYTES or not hasattr(mmap, "MAP_PRIVATE"):  # (Windows: no such flag)
        return np.zeros(shape, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE), dtype=dtype).reshape(shape)


def numpy_rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy Generator's state as checkpoint-safe python values (ints as strings: they are 128-bit)."""
    state = rng.bit_generator.state
    return {
        "bit_generator": state["bit_generator"],
        "state": str(state["state"]["state"]),
        "inc": str(state["state"]["inc"]),
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }


def set_numpy_rng_state(rng: np.random.Generator, saved: Mapping[str, Any]) -> None:
    """Restore what :func:`numpy_rng_state` returned."""
    rng.bit_generator.state = {
        "bit_generator": saved["bit_generator"],
        "state": {"state": int(saved["state"]), "inc": int(saved["inc"])},
        "has_uint32": int(saved["has_uint32"]),
        "uinteger": int(saved["uinteger"]),
    }


class ReplayBuffer:
    """Uniform-sampling ring buffer, preallocated on the first :meth:`add`.

    :param max_size: capacity in transitions (the manifest's ``replay_buffer.max_size``).
    :param device: where :meth:`sample` puts its tensors.
    :param seed: seed of the sampling RNG (``None``: nondeterministic).
    :param dtypes: optional numpy dtype per field (default: the dtype of the first batch added,
        with float64 stored as float32).

    A field may be a Dict/Tuple observation batch (a dict or tuple of arrays, nested to any depth):
    each part is stored as a field of its own (``obs/image``, ``obs/vector``; uint8 images stay
    uint8) and :meth:`sample` returns the field as a dict of tensors again (a Tuple's parts keyed
    ``"0"``, ``"1"``, ...).
    """

    def __init__(
        self,
        max_size: int,
        *,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        dtypes: Mapping[str, Any] | None = None,
    ) -> None:
        if max_size < 1:
            raise ValueError("max_size must be >= 1")
        self.max_size = int(max_size)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        self.dtypes = dict(dtypes or {})
        self.data: dict[str, np.ndarray] = {}
        #: Fields added as Dict/Tuple batches (stored part by part, regrouped on sampling).
        self.structured: set[str] = set()
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _allocate(self, fields: Mapping[str, np.ndarray]) -> None:
        for key, value in fields.items():
            dtype = np.dtype(self.dtypes.get(key, value.dtype))
            if dtype == np.float64:
                dtype = np.dtype(np.float32)
            self.data[key] = lazy_zeros((self.max_size, *value.shape[1:]), dtype)

    def add(self, mask: np.ndarray | None = None, **fields: Any) -> int:
        """Store a batch of transitions: each field is an array with one row per transition.

        ``mask`` (bool, one per row) keeps only the rows where it is True (e.g. drop the
        transitions of sub-envs that just auto-reset). Returns the number of rows stored.
        """
        flat: dict[str, Any] = {}
        for key, value in fields.items():
            if is_structured(value):
                self.structured.add(key)
                flat.update(flatten_fields(key, value))
            else:
                flat[key] = value
        arrays = {k: np.asarray(v) for k, v in flat.items()}
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if not mask.all():
                arrays = {k: v[mask] for k, v in arrays.items()}
        n = len(next(iter(arrays.values())))
        if n == 0:
            return 0
        if not self.data:
            self._allocate(arrays)
        if n > self.max_size:  # only the newest max_size rows can survive
            arrays = {k: v[-self.max_size :] for k, v in arrays.items()}
            n = self.max_size
        end = self.pos + n
        if end <= self.max_size:
            for k, v in arrays.items():
                self.data[k][self.pos : end] = v.reshape(self.data[k][self.pos : end].shape)
        else:
            first = self.max_size - self.pos
            for k, v in arrays.items():
                self.data[k][self.pos :] = v[:first].reshape(self.data[k][self.pos :].shape)
                self.data[k][: n - first] = v[first:].reshape(self.data[k][: n - first].shape)
        self.pos = end % self.max_size
        self.size = min(self.size + n, self.max_size)
        return n

    def sample(self, batch_size: int) -> dict[str, Any]:
        """``batch_size`` transitions drawn uniformly with replacement, as tensors on ``device``."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = self.rng.integers(0, self.size, size=batch_size)
        return self._grouped(
            {k: torch.from_numpy(v[idx]).to(self.device, non_blocking=True) for k, v in self.data.items()}
        )

    def _grouped(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Dict/Tuple fields (stored part by part) as dicts again."""
        if not self.structured:
            return batch
        parts = {k: v for k, v in batch.items() if k.split(SEP, 1)[0] in self.structured}
        return {**{k: v for k, v in batch.items() if k not in parts}, **regroup_fields(parts)}

    def sample_many(self, batch_size: int, n: int) -> list[dict[str, Any]]:
        """``n`` independent batches of :meth:`sample`, drawn and gathered in one go.

        Several gradient steps per env step each need a batch; one index draw and one gather per
        field for all of them costs about as much as a single :meth:`sample`. The batches are
        views of one tensor per field (disjoint slices).
        """
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = self.rng.integers(0, self.size, size=n * batch_size)
        out: list[dict[str, torch.Tensor]] = [{} for _ in range(n)]
        for k, v in self.data.items():
            t = torch.from_numpy(v[idx]).to(self.device, non_blocking=True)
            for batch, part in zip(out, t.split(batch_size), strict=True):
                batch[k] = part
        return [self._grouped(b) for b in out]

    # --- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "max_size": self.max_size,
            "pos": self.pos,
            "size": self.size,
            "rng": numpy_rng_state(self.rng),
            "data": {k: torch.from_numpy(v[: self.size].copy()) for k, v in self.data.items()},
            "shapes": {k: list(v.shape[1:]) for k, v in self.data.items()},
            "dtypes": {k: str(v.dtype) for k, v in self.data.items()},
            "structured": sorted(self.structured),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.max_size = int(state["max_size"])
        self.pos = int(state["pos"])
        self.size = int(state["size"])
        set_numpy_rng_state(self.rng, state["rng"])
        self.structured = set(state.get("structured", ()))
        self.data = {}
        for k, t in state["data"].items():
            arr = lazy_zeros((self.max_size, *state["shapes"][k]), state["dtypes"][k])
            arr[: self.size] = t.cpu().numpy()
            self.data[k] = arr


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    dones: np.ndarray,
    valid: np.ndarray,
    last_value: np.ndarray,
    last_valid: np.ndarray,
    gamma: float,
    gae_lambda: float,
    out: np.ndarray,
) -> None:
    """GAE(lambda) of a ``(T, N)`` rollout into ``out`` (advantages; returns are ``out + values``).

    ``values[t + 1]`` (``last_value`` after the last step) is the value of the observation that
    followed step ``t``. It is bootstrapped unless step ``t`` *terminated*; credit never flows back
    across an episode end (``dones``); a step with ``valid == 0`` (an auto-reset step, or an agent
    that did not act) gets advantage 0 and passes no credit back.
    """
    next_values = np.concatenate([values[1:], np.asarray(last_value, dtype=np.float32)[None]])
    next_valid = np.concatenate([valid[1:], np.asarray(last_valid, dtype=np.float32)[None]])
    # Everything that does not depend on the recursion, computed for all steps at once.
    delta = rewards + gamma * next_values * (1.0 - terminated) - values
    carry = gamma * gae_lambda * (1.0 - dones) * next_valid
    last_gae = np.zeros(rewards.shape[1], dtype=np.float32)
    for t in range(rewards.shape[0] - 1, -1, -1):
        last_gae = (delta[t] + carry[t] * last_gae) * valid[t]
        out[t] = last_gae


class RolloutBuffer:
    """On-policy storage for ``num_steps`` vector steps of ``num_envs`` envs, with GAE.

    Arrays are allocated once; :meth:`add` writes step ``t`` in place. Per step it stores the
    observation the policy acted on, the action, its log-probability, the value estimate, the
    reward, ``terminated``/``done`` flags of that step, and ``valid``: False for the step a sub-env
    spends auto-resetting under Gymnasium's next-step autoreset (its action was ignored and its
    reward is meaningless), so the loss skips it.

    Storage is numpy with torch views of the same memory: writing a step is a handful of numpy
    slice assignments (no tensor allocation), GAE runs on numpy rows, and :meth:`flat` hands torch
    tensors to the update without copying (moved to ``device`` when that is not the CPU).

    :param num_steps: vector steps per rollout.
    :param num_envs: parallel envs.
    :param obs_shape: one observation's shape; for Dict/Tuple observations a mapping of part field
        (``obs/<key>``, as :func:`~agilerl_plugin_gym.observations.field_layout` names them) to shape,
        with ``obs_dtype`` a mapping of the same keys to dtypes (:meth:`flat` regroups the parts).
    :param action_shape: one action's shape (``()`` for Discrete).
    :param obs_dtype: observation dtype, numpy or torch (uint8 images stay uint8 until the network).
    :param action_dtype: int64 for discrete actions, float32 for continuous (numpy or torch).
    :param mask_dim: columns of an action mask stored per step (0: none; a masked policy's rollout).
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...] | Mapping[str, tuple[int, ...]],
        action_shape: tuple[int, ...],
        *,
        obs_dtype: Any = np.float32,
        action_dtype: Any = np.float32,
        device: str | torch.device = "cpu",
        mask_dim: int = 0,
    ) -> None:
        self.num_steps, self.num_envs = int(num_steps), int(num_envs)
        self.device = torch.device(device)
        T, N = self.num_steps, self.num_envs
        self.obs: Any
        if isinstance(obs_shape, Mapping):
            dtypes = obs_dtype if isinstance(obs_dtype, Mapping) else dict.fromkeys(obs_shape, obs_dtype)
            self.obs = {k: np.zeros((T, N, *shape), dtype=_np_dtype(dtypes[k])) for k, shape in obs_shape.items()}
        else:
            self.obs = np.zeros((T, N, *obs_shape), dtype=_np_dtype(obs_dtype))
        self.actions = np.zeros((T, N, *action_shape), dtype=_np_dtype(action_dtype))
        # Per-step scalars, one (T, N) float32 array each.
        self.log_probs: np.ndarray = np.zeros((T, N), dtype=np.float32)
        self.values: np.ndarray = np.zeros((T, N), dtype=np.float32)
        self.rewards: np.ndarray = np.zeros((T, N), dtype=np.float32)
        self.terminated: np.ndarray = np.zeros((T, N), dtype=np.float32)
        self.dones: np.ndarray = np.zeros((T, N), dtype=np.float32)
        self.valid: np.ndarray = np.zeros((T, N), dtype=np.float32)
        self.advantages: np.ndarray = np.zeros((T, N), dtype=np.float32)
        self.returns: np.ndarray = np.zeros((T, N), dtype=np.float32)
        #: The allowed actions at each step (``mask_dim`` columns; only for a masked policy).
        self.action_masks: np.ndarray | None = np.zeros((T, N, mask_dim), dtype=bool) if mask_dim else None

    def add(
        self,
        t: int,
        obs: Any,
        action: Any,
        log_prob: Any,
        value: Any,
        reward: Any,
        terminated: Any,
        done: Any,
        valid: Any,
        action_mask: Any = None,
    ) -> None:
        """Write vector step ``t`` (arrays or tensors on any device, one row per env)."""
        if self.action_masks is not None:
            self.action_masks[t] = action_mask
        if isinstance(self.obs, dict):
            for key, part in flatten_fields("obs", obs).items():
                self.obs[key][t] = _host(part)
        else:
            self.obs[t] = _host(obs)
        self.actions[t] = _host(action)
        self.log_probs[t] = _host(log_prob)
        self.values[t] = _host(value)
        self.rewards[t] = reward
        self.terminated[t] = terminated
        self.dones[t] = done
        self.valid[t] = valid

    def compute_returns_and_advantages(self, last_value: Any, last_valid: Any, gamma: float, gae_lambda: float) -> None:
        """GAE(lambda) under next-step autoreset.

        For a step that ended an episode, the observation of the *following* step is the final
        observation (the reset arrives one step later), so ``values[t + 1]`` is V(final obs): we
        bootstrap from it unless the episode *terminated*, which handles truncation correctly.
        Credit never flows back across an episode end (``done``), and the auto-reset step itself
        (``valid == 0``) gets advantage 0. ``last_value``/``last_valid`` describe the observation
        after the last stored step.
        """
        gae(
            self.rewards,
            self.values,
            self.terminated,
            self.dones,
            self.valid,
            np.asarray(_host(last_value), dtype=np.float32),
            np.asarray(last_valid, dtype=np.float32),
            gamma,
            gae_lambda,
            self.advantages,
        )
        np.add(self.advantages, self.values, out=self.returns)

    def flat(self) -> dict[str, torch.Tensor]:
        """All valid steps flattened to ``(n, ...)`` tensors, for minibatching."""
        obs = self.obs if isinstance(self.obs, dict) else {"obs": self.obs}
        out = {
            **{k: v.reshape(-1, *v.shape[2:]) for k, v in obs.items()},
            "actions": self.actions.reshape(-1, *self.actions.shape[2:]),
            "log_probs": self.log_probs.reshape(-1),
            "values": self.values.reshape(-1),
            "advantages": self.advantages.reshape(-1),
            "returns": self.returns.reshape(-1),
        }
        if self.action_masks is not None:
            out["action_masks"] = self.action_masks.reshape(-1, self.action_masks.shape[-1])
        mask = self.valid.reshape(-1) > 0
        if not mask.all():
            out = {k: v[mask] for k, v in out.items()}
        tensors = {k: torch.from_numpy(v).to(self.device) for k, v in out.items()}
        return regroup_fields(tensors) if isinstance(self.obs, dict) else tensors


def _host(x: Any) -> Any:
    """A tensor as a host numpy array (``.cpu()`` first: it may live on an accelerator); others as is."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def _np_dtype(dtype: Any) -> np.dtype[Any]:
    if isinstance(dtype, torch.dtype):
        return np.dtype(torch.empty((), dtype=dtype).numpy().dtype)
    return np.dtype(dtype)
