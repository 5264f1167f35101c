"""Prioritized experience replay and n-step returns for the off-policy engine (RainbowDQN, DQN).

* :class:`SumTree` — a 16-ary tree over ``capacity`` leaf priorities whose internal nodes hold the
  sum of their children. Updating a batch of leaves and finding the leaves at a batch of prefix
  sums are ``log16(capacity)`` vectorised numpy passes.
* :class:`PrioritizedReplayBuffer` — :class:`~agilerl_plugin_gym.buffers.ReplayBuffer` whose
  :meth:`~PrioritizedReplayBuffer.sample` draws transition ``i`` with probability
  ``p_i^alpha / sum_k p_k^alpha`` (stratified: one draw per equal slice of the total) and returns
  the importance weights ``(N P(i))^-beta / max_k (N P(k))^-beta`` and the sampled indices; new
  transitions get the largest priority seen so far, so each is sampled at least once soon after it
  arrives. The tree is part of the buffer's ``state_dict`` (exact resume).
* :class:`NStepCollector` — turns one-step vector-env transitions into n-step ones, per sub-env:
  ``(s_t, a_t, sum_{i<k} gamma^i r_{t+i}, s_{t+k}, terminated, k)`` with ``k = n`` inside an episode
  and ``k < n`` for the transitions an episode end (termination or truncation) cuts short. The
  bootstrap of a stored transition is ``gamma^k`` (``nsteps`` field), none after termination.
* :func:`annealed_beta` — the importance-sampling exponent, moved linearly from the algorithm's
  ``beta`` to 1 over the run's ``max_steps`` (computed from the agent's step count: nothing to save).
* :class:`ReplaySettings` — which of these a run uses, from its manifest.
* :func:`with_priority_update` — wraps an algorithm's ``learn`` so the TD errors it returns as
  ``priorities`` are written back to the tree after each gradient step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agilerl_plugin_gym.buffers import ReplayBuffer
from agilerl_plugin_gym.observations import flatten_fields, is_structured, regroup_fields

__all__ = [
    "NStepCollector",
    "PrioritizedReplayBuffer",
    "ReplaySettings",
    "SumTree",
    "annealed_beta",
    "with_priority_update",
]


class SumTree:
    """A sum tree over ``capacity`` non-negative leaf values, ``ARITY`` children per node.

    ``levels[0]`` is the root's children and ``levels[-1]`` the leaves (padded with zeros to a
    power of ``ARITY``); each node holds the sum of its ``ARITY`` children. A wide tree keeps the
    number of vectorised numpy passes per update or search at ``log_ARITY(capacity)`` (4 for a
    50k buffer), which is what a batch update costs here: each pass is a few microseconds.
    """

    ARITY = 16
    #: :meth:`find` binary-searches the cumulative sums of the deepest level this wide or narrower.
    SEARCH_WIDTH = 4096

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        depth, size = 1, self.ARITY
        while size < self.capacity:
            depth, size = depth + 1, size * self.ARITY
        self.depth, self.size = depth, size
        self.levels = [np.zeros(self.ARITY**d, dtype=np.float64) for d in range(1, depth + 1)]
        # Node i's children at level d + 1, as a view: children[d][i].
        self._children = [level.reshape(-1, self.ARITY) for level in self.levels]
        self._search_level = max(d for d in range(depth) if self.levels[d].size <= self.SEARCH_WIDTH or d == 0)

    @property
    def total(self) -> float:
        return float(self.levels[0].sum())

    @property
    def leaves(self) -> np.ndarray:
        """The leaf values (a view)."""
        return self.levels[-1][: self.capacity]

    def __getitem__(self, idx: Any) -> np.ndarray:
        return self.levels[-1][np.asarray(idx)]  # type: ignore[no-any-return]

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``idx`` to ``values`` (a repeated index keeps its last value) and refresh parents."""
        nodes = np.asarray(idx, dtype=np.int64)
        self.levels[-1][nodes] = values
        # Level by level up to the root's children; a parent listed twice gets the same value twice.
        for d in range(self.depth - 1, 0, -1):
            nodes = nodes // self.ARITY
            self.levels[d - 1][nodes] = self._children[d][nodes].sum(1)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each prefix sum in ``[0, total)``: the leaf ``i`` with ``sum(leaves[:i]) <= prefix < sum(leaves[:i+1])``."""
        value = np.array(prefix, dtype=np.float64).reshape(-1)
        # Start at the deepest level of at most SEARCH_WIDTH nodes: one cumulative sum and a binary
        # search over it replace the descents above it. Then one descent per level below.
        start = self._search_level
        level = self.levels[start]
        ends = level.cumsum()
        nodes = np.minimum(ends.searchsorted(value, side="right"), level.size - 1)
        value -= ends[nodes] - level[nodes]
        rows = np.arange(value.size)
        last = self.ARITY - 1
        for d in range(start + 1, self.depth):
            children = self._children[d][nodes]
            ends = children.cumsum(1)
            # The first child whose running sum passes the value (the last one on rounding overshoot).
            child = np.minimum((ends <= value[:, None]).sum(1), last)
            value -= ends[rows, child] - children[rows, child]
            nodes = nodes * self.ARITY + child
        return nodes.reshape(np.shape(prefix))

    def state_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "leaves": torch.from_numpy(self.leaves.copy())}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.__init__(int(state["capacity"]))  # type: ignore[misc]
        leaves = state["leaves"].cpu().numpy()
        used = np.flatnonzero(leaves > 0)
        if used.size:
            self.update(used, leaves[used])


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016) on the preallocated ring buffer.

    :param alpha: how strongly priorities shape sampling (0: uniform, 1: proportional to the TD error).
    Other parameters as :class:`~agilerl_plugin_gym.buffers.ReplayBuffer`.
    """

    def __init__(self, max_size: int, *, alpha: float = 0.6, **kwargs: Any) -> None:
        super().__init__(max_size, **kwargs)
        self.alpha = float(alpha)
        self.tree = SumTree(self.max_size)
        self.max_priority = 1.0
        # The smallest stored tree value and its slot (the importance weights' normaliser), kept
        # up to date by every write instead of a scan of the whole buffer per sample.
        self._min_value, self._min_slot = np.inf, -1

    def add(self, mask: np.ndarray | None = None, **fields: Any) -> int:
        start = self.pos
        n = super().add(mask, **fields)
        if n:
            idx = (start + np.arange(n)) % self.max_size
            self._write(idx, np.full(n, self.max_priority**self.alpha))
        return n

    def _write(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set tree values and keep the running minimum exact."""
        self.tree.update(idx, values)
        if (idx == self._min_slot).any():  # the minimum was overwritten: find the new one
            leaves = self.tree.leaves[: self.size]
            slot = int(leaves.argmin())
            self._min_value, self._min_slot = float(leaves[slot]), slot
            return
        written = self.tree[idx]  # a repeated index keeps its last value: read back what is stored
        j = int(written.argmin())
        if written[j] < self._min_value:
            self._min_value, self._min_slot = float(written[j]), int(idx[j])

    def sample(self, batch_size: int, beta: float = 0.4) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """A batch drawn by priority, with ``weights`` (importance weights, max 1) and ``idxs``."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        total = self.tree.total
        step = total / batch_size
        prefix = (np.arange(batch_size) + self.rng.random(batch_size)) * step
        idx = np.minimum(self.tree.find(np.minimum(prefix, np.nextafter(total, 0))), self.size - 1)
        # (N P(i))^-beta / max_k (N P(k))^-beta = (p_i / p_min)^-beta: weights <= 1, from the
        # smallest stored priority.
        weights = ((self.tree[idx] / self._min_value) ** (-beta)).astype(np.float32)
        cpu = self.device.type == "cpu"
        batch = self._grouped({
            k: torch.from_numpy(v[idx]) if cpu else torch.from_numpy(v[idx]).to(self.device, non_blocking=True)
            for k, v in self.data.items()
        })  # fmt: skip
        batch["weights"] = torch.from_numpy(weights) if cpu else torch.from_numpy(weights).to(self.device)
        batch["idxs"] = torch.from_numpy(idx)
        return batch

    def sample_many(self, batch_size: int, n: int, beta: float = 0.4) -> list[dict[str, torch.Tensor]]:  # type: ignore[override]
        """``n`` prioritized batches (each with its weights and indices), drawn from the same priorities.

        The strategy samples one batch per gradient step instead, so each sees the priorities the
        previous step wrote back; this is for callers that want several at once.
        """
        return [self.sample(batch_size, beta) for _ in range(n)]

    def update_priorities(self, idxs: Any, priorities: Any) -> None:
        """Set the priorities (TD errors, > 0) of sampled transitions."""
        idx = idxs.cpu().numpy() if isinstance(idxs, torch.Tensor) else np.asarray(idxs)
        pri = priorities.detach().cpu().numpy() if isinstance(priorities, torch.Tensor) else np.asarray(priorities)
        pri = pri.astype(np.float64)
        self.max_priority = max(self.max_priority, float(pri.max()))
        self._write(idx.astype(np.int64, copy=False), pri**self.alpha)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "alpha": self.alpha, "max_priority": self.max_priority,
                "tree": self.tree.state_dict()}  # fmt: skip

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.alpha = float(state["alpha"])
        self.max_priority = float(state["max_priority"])
        self.tree.load_state_dict(state["tree"])
        self._min_value, self._min_slot = np.inf, -1
        if self.size:
            leaves = self.tree.leaves[: self.size]
            self._min_slot = int(leaves.argmin())
            self._min_value = float(leaves[self._min_slot])


def annealed_beta(beta: float, steps: int, max_steps: int | None) -> float:
    """``beta`` moved linearly to 1 as ``steps`` goes from 0 to ``max_steps`` (1 afterwards)."""
    if not max_steps:
        return float(beta)
    return float(beta + (1.0 - beta) * min(1.0, steps / max_steps))


def with_priority_update(
    learn: Callable[[Any], Mapping[str, Any]], memory: PrioritizedReplayBuffer
) -> Callable[[Any], Mapping[str, Any]]:
    """``learn`` that writes the ``priorities`` it returns back to ``memory`` (and drops them from the stats)."""

    def step(batch: Any) -> Mapping[str, Any]:
        stats = dict(learn(batch))
        memory.update_priorities(batch["idxs"], stats.pop("priorities"))
        return stats

    return step


class NStepCollector:
    """n-step transitions from a vector env's one-step ones (one window per sub-env).

    :param n: steps per return (``n = 1`` passes one-step transitions through, with ``nsteps = 1``).
    :param gamma: discount inside the return.
    :param one_step: also emit each transition's one-step fields (``reward_1``, ``next_obs_1``,
        ``done_1``), for RainbowDQN's ``combined_reward``.

    :meth:`step` takes one vector step (``valid`` False for a sub-env spending the step
    auto-resetting: it is skipped) and returns the transitions completed by it: the oldest of every
    full window, and every pending transition of a sub-env whose episode ended (shorter returns,
    ``done`` = terminated). :meth:`flush` ends every window as truncated (bootstrapped): the strategy
    calls it at the end of each ``learn`` call, since the next one starts fresh episodes, so no
    window outlives a call (nothing to checkpoint).
    """

    def __init__(self, n: int, gamma: float, *, one_step: bool = False) -> None:
        self.n, self.gamma, self.one_step = int(n), float(gamma), one_step
        self.t = 0
        self.count: np.ndarray = np.zeros(0, dtype=np.int64)
        #: One window per observation array (a Dict/Tuple observation is stored part by part,
        #: keyed as :func:`~agilerl_plugin_gym.observations.flatten_fields` names them).
        self.obs: dict[str, np.ndarray] = {}
        self.structured = False
        self.action: np.ndarray = np.zeros(0)
        self.reward: np.ndarray = np.zeros(0)

    def _allocate(self, obs: dict[str, np.ndarray], action: np.ndarray) -> None:
        e = action.shape[0]
        self.count = np.zeros(e, dtype=np.int64)
        self.obs = {k: np.zeros((self.n, *v.shape), dtype=v.dtype) for k, v in obs.items()}
        self.action = np.zeros((self.n, *action.shape), dtype=action.dtype)
        self.reward = np.zeros((self.n, e), dtype=np.float64)

    def _parts(self, obs: Any) -> dict[str, np.ndarray]:
        self.structured = is_structured(obs)
        return {k: np.asarray(v) for k, v in flatten_fields("obs", obs).items()}

    def _grouped(self, parts: dict[str, np.ndarray]) -> Any:
        return regroup_fields(parts)["obs"] if self.structured else parts["obs"]

    def step(
        self,
        obs: Any,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray,
        next_mask: np.ndarray | None = None,
    ) -> dict[str, Any] | None:
        """One vector step (``obs``/``next_obs``: arrays, or Dict/Tuple batches; ``next_mask``: the
        allowed actions at ``next_obs``, emitted as ``next_action_mask``)."""
        parts, action = self._parts(obs), np.asarray(action)
        if self.count.shape[0] != action.shape[0] or parts.keys() != self.obs.keys():
            self._allocate(parts, action)
        slot = self.t % self.n
        for k, v in parts.items():
            self.obs[k][slot] = v
        self.action[slot], self.reward[slot] = action, reward
        self.count += valid
        done = (terminated | truncated) & valid
        # Ages (0 = this step) to emit per sub-env: all pending at an episode end, else the oldest of a full window.
        ages = np.arange(self.n)[:, None]
        emit = np.where(done, ages < self.count, (ages == self.n - 1) & (self.count == self.n) & valid)
        out = self._emit(emit, next_obs, np.asarray(terminated) & done, next_mask)
        self.count[done] = 0
        self.count = np.minimum(self.count, self.n - 1)
        self.t += 1
        return out

    def flush(self, next_obs: Any, next_mask: np.ndarray | None = None) -> dict[str, Any] | None:
        """Emit every pending transition as cut off (bootstrapped from ``next_obs``); empty the windows."""
        if self.count.size == 0 or not self.count.any():
            return None
        # The last step written is t - 1: shift time back so that age 0 is that step.
        self.t -= 1
        emit = np.arange(self.n)[:, None] < self.count
        out = self._emit(emit, next_obs, np.zeros(self.count.shape[0], dtype=bool), next_mask)
        self.t += 1
        self.count[:] = 0
        return out

    def _emit(
        self, emit: np.ndarray, next_obs: Any, terminated: np.ndarray, next_mask: np.ndarray | None = None
    ) -> dict[str, Any] | None:
        if not emit.any():
            return None
        n, t = self.n, self.t
        # ret[a] = sum_{j<=a} gamma^(a-j) r_(t-j): the return from the step of age a to now.
        ret = np.zeros_like(self.reward)
        acc = np.zeros(self.reward.shape[1])
        for a in range(n):
            acc = self.reward[(t - a) % n] + self.gamma * acc
            ret[a] = acc
        age, env = np.nonzero(emit)
        slots = (t - age) % n
        next_parts = {k: np.asarray(v)[env] for k, v in flatten_fields("obs", next_obs).items()}
        done = terminated[env].astype(np.float32)
        out: dict[str, Any] = {
            "obs": self._grouped({k: v[slots, env] for k, v in self.obs.items()}),
            "action": self.action[slots, env],
            "reward": ret[age, env].astype(np.float32),
            "next_obs": self._grouped(next_parts),
            "done": done,
            "nsteps": (age + 1).astype(np.float32),
        }
        if next_mask is not None:  # a masked env: the bootstrap's allowed actions
            out["next_action_mask"] = np.asarray(next_mask)[env]
        if self.one_step:
            # The one-step successor of the step of age a >= 1 is the observation of age a - 1.
            first = age == 0
            later = {}
            for k, v in self.obs.items():
                part = v[(t - age + 1) % n, env]
                later[k] = np.where(first.reshape(-1, *[1] * (part.ndim - 1)), next_parts[k], part)
            out["reward_1"] = self.reward[slots, env].astype(np.float32)
            out["next_obs_1"] = self._grouped(later)
            out["done_1"] = np.where(first, done, 0.0).astype(np.float32)
        return out


@dataclass(frozen=True)
class ReplaySettings:
    """Which replay an off-policy run uses, read from its manifest.

    RainbowDQN (an algorithm with its own ``n_step``) always uses prioritized replay with
    ``replay_buffer.per_buffer_args.alpha`` and its ``n_step`` returns; other algorithms use what
    ``replay_buffer.per_buffer`` / ``n_step_buffer`` (``n_step_buffer_args.n_step``) switch on.
    """

    per: bool = False
    alpha: float = 0.5
    n_step: int = 1
    one_step: bool = False

    @classmethod
    def from_manifest(cls, manifest: Any) -> ReplaySettings:
        spec, rb = manifest.algorithm, manifest.replay_buffer
        alpha = float(rb.per_buffer_args.alpha) if rb is not None else cls.alpha
        own_n = getattr(spec, "n_step", None)
        if isinstance(own_n, int):
            return cls(True, alpha, own_n, bool(getattr(spec, "combined_reward", False)))
        if rb is None:
            return cls()
        return cls(bool(rb.per_buffer), alpha, int(rb.n_step_buffer_args.n_step) if rb.n_step_buffer else 1)

    def make_buffer(self, max_size: int, **kwargs: Any) -> ReplayBuffer:
        """The population's replay buffer (``kwargs`` as :class:`ReplayBuffer`)."""
        if self.per:
            return PrioritizedReplayBuffer(max_size, alpha=self.alpha, **kwargs)
        return ReplayBuffer(max_size, **kwargs)

    def collector(self, gamma: float) -> NStepCollector | None:
        """A fresh n-step collector for one ``learn`` call (None: store one-step transitions as they come)."""
        if self.n_step == 1 and not self.one_step:
            return None
        return NStepCollector(self.n_step, gamma, one_step=self.one_step)
