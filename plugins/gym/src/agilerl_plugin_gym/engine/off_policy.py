"""The off-policy engine: one implementation of what DQN, DDPG, TD3, MADDPG and MATD3 share.

* :class:`TargetSync` — target networks that track online ones, by Polyak averaging
  (:meth:`TargetSync.soft`, one fused ``lerp`` over all parameters) or by copying
  (:meth:`TargetSync.hard`).
* :class:`ExplorationNoise` — Gaussian or Ornstein-Uhlenbeck action noise, one row per sub-env,
  drawn from a generator the caller owns (never the global ``np.random``), reset per sub-env at
  episode end.
* :class:`UpdateSchedule` — when gradient steps run: after ``learning_delay`` env steps of the
  agent and once the buffer holds a batch, at AgileRL's ``learn_step`` rate (env steps over all
  sub-envs per gradient step), counted on the agent's persistent vector-step counter so a resumed
  run updates on the very same steps.
* :func:`gradient_steps` — sample from a replay buffer and call ``agent.learn`` as often as the
  schedule says (several batches of one env step in one draw).

The loops themselves (single-agent gymnasium vector env, multi-agent PettingZoo vector env) are in
the strategies; they call only these pieces and the public algorithm protocol
(:mod:`agilerl_plugin_gym.protocols`). The replay buffer itself is
:class:`agilerl_plugin_gym.buffers.ReplayBuffer` (its sampling RNG is checkpointed with it). The
buffer stores one-step transitions; ``n_step`` returns would be computed where ``add`` is called.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agilerl_plugin_gym.buffers import numpy_rng_state, set_numpy_rng_state

__all__ = ["ExplorationNoise", "ReplayState", "TargetSync", "UpdateSchedule", "gradient_steps", "lerp_params"]


@torch.no_grad()
def lerp_params(target: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    """``target <- target + tau * (online - target)`` for every pair, in one fused kernel call."""
    torch._foreach_lerp_(target, online, tau)


class TargetSync:
    """Target copies of online networks, held in a ``{name: module}`` mapping.

    :param nets: the mapping that holds online and target networks (e.g. ``algorithm.nets``).
    :param target_of: target name -> online name.

    Parameter lists are gathered once (call :meth:`rebuild` after an architecture change), so a
    soft update is a single ``torch._foreach_lerp_`` call however many networks there are.
    """

    def __init__(self, nets: MutableMapping[str, Any], target_of: Mapping[str, str]) -> None:
        self.nets = nets
        self.target_of = dict(target_of)
        self.target: list[torch.Tensor] = []
        self.online: list[torch.Tensor] = []
        if all(t in nets for t in self.target_of):
            self.rebuild()

    def rebuild(self) -> None:
        """Re-gather the parameter lists (after networks were replaced or reshaped)."""
        self.target, self.online = [], []
        for target, source in self.target_of.items():
            # (before copy_online the two may differ in shape: the lists are gathered again after it)
            for t, o in zip(self.nets[target].parameters(), self.nets[source].parameters(), strict=False):
                if t is not o:  # a module both read (a shared encoder) needs no averaging
                    self.target.append(t)
                    self.online.append(o)

    def copy_online(self) -> None:
        """(Re)create every target as a frozen deep copy of its online network, then rebuild."""
        for target, source in self.target_of.items():
            self.nets[target] = copy.deepcopy(self.nets[source])
            self.nets[target].requires_grad_(False)
        self.rebuild()

    def soft(self, tau: float) -> None:
        """Polyak averaging of every target towards its online network."""
        if self.target:
            lerp_params(self.target, self.online, tau)

    @torch.no_grad()
    def hard(self) -> None:
        """Copy the online weights into the targets (same architectures)."""
        torch._foreach_copy_(self.target, self.online)


@dataclass
class NoiseSettings:
    """The exploration-noise hyperparameters (read from the algorithm each step: HPO may mutate them)."""

    ou: bool
    scale: float
    mean: float = 0.0
    theta: float = 0.15
    dt: float = 0.01


class ExplorationNoise:
    """Additive action noise with one row of state per sub-env.

    Gaussian: ``N(mean, scale)``. Ornstein-Uhlenbeck:
    ``x <- x + theta (mean - x) dt + scale sqrt(dt) N(0, 1)``, temporally correlated, which explores
    better in momentum-driven physics. The state of a sub-env is zeroed when its episode ends
    (:meth:`reset`). Random numbers come from the ``rng`` passed to :meth:`sample` (a seeded,
    checkpointed generator owned by the strategy), so a resumed run draws the same noise.
    """

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self.state = np.zeros((0, self.dim))

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Zero the OU state of the sub-envs in ``mask`` (all when None)."""
        if mask is None:
            self.state = np.zeros((0, self.dim))
        elif self.state.shape[0] == mask.shape[0]:
            self.state[mask] = 0.0

    def sample(self, n: int, rng: np.random.Generator, s: NoiseSettings) -> np.ndarray:
        """Noise for ``n`` sub-envs, shape ``(n, dim)``."""
        if not s.ou:
            return s.mean + s.scale * rng.standard_normal((n, self.dim))
        if self.state.shape[0] != n:
            self.state = np.zeros((n, self.dim))
        self.state += s.theta * (s.mean - self.state) * s.dt + s.scale * math.sqrt(s.dt) * rng.standard_normal(
            (n, self.dim)
        )
        return self.state


class UpdateSchedule:
    """When gradient steps run, with AgileRL's meaning of ``learn_step``.

    ``learn_step`` counts env steps over all sub-envs: at or above ``num_envs`` one update runs
    every ``learn_step // num_envs`` vector steps, below it ``num_envs // learn_step`` run per vector
    step (the same update-to-data ratio as AgileRL, so hyperparameters carry over).
    """

    def __init__(self, learn_step: int, num_envs: int, learning_delay: int, batch_size: int) -> None:
        self.learn_step, self.num_envs = int(learn_step), int(num_envs)
        self.learning_delay, self.batch_size = int(learning_delay), int(batch_size)

    def warming_up(self, agent_steps: int) -> bool:
        """True while the agent has taken fewer than ``learning_delay`` env steps."""
        return agent_steps < self.learning_delay

    def due(self, vec_steps: int, agent_steps: int, buffer_size: int) -> int:
        """Gradient steps to run after the agent's ``vec_steps``-th vector step (counted from 1)."""
        if self.warming_up(agent_steps) or buffer_size < self.batch_size:
            return 0
        if self.learn_step >= self.num_envs:
            return 1 if vec_steps % (self.learn_step // self.num_envs) == 0 else 0
        return self.num_envs // self.learn_step


def gradient_steps(
    count: int,
    sample: Callable[[int], Any],
    learn: Callable[[Any], Mapping[str, Any]],
    batch_size: int,
    sample_many: Callable[[int, int], Iterable[Any]] | None = None,
    *,
    record: bool = False,
) -> dict[str, Any]:
    """Run ``count`` gradient steps on fresh batches.

    Returns the last step's stats, or with ``record`` every step's (``{name: [value, ...]}``).
    ``sample_many`` (when given) draws all batches of one env step in a single gather.
    """
    batches: Iterable[Any]
    if count > 1 and sample_many is not None:
        batches = sample_many(batch_size, count)
    else:
        batches = (sample(batch_size) for _ in range(count))
    stats: dict[str, Any] = {}
    for batch in batches:
        step = learn(batch)
        if record:
            for k, v in step.items():
                stats.setdefault(k, []).append(v)
        else:
            stats = dict(step)
    return stats


class ReplayState:
    """What an off-policy strategy keeps for the whole population, checkpointed with the run.

    ``memory`` is the shared replay buffer (AgileRL's experience sharing; its sampling RNG is part
    of its state) and ``rng`` the exploration generator (epsilon draws, action noise), seeded
    from the run seed. Strategies inherit this and call :meth:`init_replay` in ``setup``.
    """

    memory: Any = None
    rng: np.random.Generator = np.random.default_rng()

    def init_replay(self, memory: Any, run_seed: int | None) -> None:
        self.memory = memory
        self.rng = np.random.default_rng(None if run_seed is None else run_seed + 1)

    def state_dict(self) -> dict[str, Any]:
        if self.memory is None:
            return {}
        return {"memory": self.memory.state_dict(), "rng": numpy_rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        memory = state.get("memory", state.get("buffer"))  # "buffer": single-agent checkpoints before the engines
        if self.memory is not None and memory is not None:
            self.memory.load_state_dict(memory)
        if "rng" in state:
            set_numpy_rng_state(self.rng, state["rng"])
