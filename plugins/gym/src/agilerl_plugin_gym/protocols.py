"""The strategy <-> algorithm contract of the gym plugin (public API).

A strategy (``single_agent``/``multi_agent`` x ``on_policy``/``off_policy``) drives an env loop and
touches an algorithm only through the members declared here, on top of core's
:class:`agilerl.protocols.EvolvableAlgorithm` (index, fitness, steps, clone, hyperparameters,
``state_dict``, ``test(env, *, max_steps, loop, seed)``). Nothing here is private: an algorithm in
another package that implements one of these protocols and registers a spec with the matching
``paradigm`` and ``regime`` is trained by the existing strategies and engines, with HPO,
checkpoints and resume (see ``docs/gym.md``, "Add an algorithm to a paradigm").

State a resume needs lives in the algorithm's ``state_dict`` (weights, optimizer state,
``vec_steps``, epsilon, update counters) or in the strategy's (replay buffer and its sampling RNG,
the exploration RNG); OU noise state is per ``learn`` call (reset at its start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agilerl.protocols import VersionedProtocol
from agilerl_plugin_gym.sections.training import RLTrainingFields

__all__ = [
    "MULTI_AGENT_OFF_POLICY",
    "MULTI_AGENT_ON_POLICY",
    "OFF_POLICY",
    "ON_POLICY",
    "PROTOCOL_DOCS",
    "GymAlgorithmProtocol",
    "MultiAgentOffPolicyAlgorithm",
    "MultiAgentOnPolicyAlgorithm",
    "OffPolicyAlgorithm",
    "OffPolicySpecFields",
    "OnPolicyAlgorithm",
    "OnPolicySpecFields",
    "RLSpecFields",
    "RolloutLayout",
]


@dataclass(frozen=True)
class RolloutLayout:
    """How an on-policy algorithm's actions are stored in a rollout buffer.

    :param action_shape: one action's shape (``()`` for a Discrete action).
    :param action_dtype: numpy dtype of stored actions (int64 for categorical, float32 for Box).
    """

    action_shape: tuple[int, ...]
    action_dtype: Any

    @classmethod
    def for_actions(cls, kind: str, nvec: Any, action_space: Any) -> RolloutLayout:
        """Discrete actions are stored as int64 scalars, MultiDiscrete as int64 vectors, Box as float32."""
        if kind == "discrete":
            return cls((), np.int64)
        if kind == "multidiscrete":
            return cls((len(nvec),), np.int64)
        return cls(tuple(action_space.shape or ()), np.float32)


class RLSpecFields(Protocol):
    """The hyperparameters every gym strategy reads, from the algorithm's spec (``agent.spec``):
    the spec is their one declaration (``AlgorithmBase`` keeps it current under mutation)."""

    @property
    def learn_step(self) -> int: ...
    @property
    def gamma(self) -> float: ...


class OnPolicySpecFields(RLSpecFields, Protocol):
    """What the on-policy engine reads besides: GAE's lambda."""

    @property
    def gae_lambda(self) -> float: ...


class OffPolicySpecFields(RLSpecFields, Protocol):
    """What the off-policy engine reads besides: transitions per sampled batch."""

    @property
    def batch_size(self) -> int: ...


@runtime_checkable
class GymAlgorithmProtocol(Protocol):
    """What every gym strategy reads: bookkeeping, the device, the spec (the learn schedule)."""

    index: int
    steps: int
    #: Vector-env steps this agent has taken (persistent across ``learn`` calls, checkpointed).
    vec_steps: int
    device: Any

    @property
    def spec(self) -> RLSpecFields: ...

    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float: ...


@runtime_checkable
class OnPolicyAlgorithm(GymAlgorithmProtocol, Protocol):
    """Single-agent on-policy (PPO, A2C): the strategy collects rollouts, the algorithm updates."""

    @property
    def spec(self) -> OnPolicySpecFields: ...

    def rollout_layout(self) -> RolloutLayout: ...

    def obs_tensor(self, obs: np.ndarray) -> Any:
        """A batch of observations as the tensor ``act``/``value`` take."""
        ...

    def act(self, obs: Any) -> tuple[Any, Any, Any]:
        """Sample a batch: ``(action, log_prob, value)`` tensors (CPU-convertible)."""
        ...

    def value(self, obs: Any) -> Any: ...

    def env_action(self, action: Any) -> np.ndarray:
        """A sampled action as the env takes it (a numpy array on the CPU)."""
        ...

    def learn(self, buffer: Any) -> Mapping[str, float]:
        """Update from a filled :class:`~agilerl_plugin_gym.buffers.RolloutBuffer` (GAE computed)."""
        ...


class RecurrentOnPolicyAlgorithm(OnPolicyAlgorithm, Protocol):
    """An on-policy algorithm whose policy keeps a hidden state per env (recurrent PPO; ``spec.recurrent`` True)."""

    #: Width of one env's flat hidden state (the rollout buffer stores one per step).
    state_size: int
    #: The state the last rollout ended with (checkpointed).
    hidden_state: Any

    def initial_hidden_state(self, n: int) -> Any: ...

    def act_recurrent(self, obs: Any, state: Any) -> tuple[Any, Any, Any, Any]:
        """``(action, log_prob, value, next_state)`` for a batch."""
        ...

    def value_recurrent(self, obs: Any, state: Any) -> Any: ...


@runtime_checkable
class OffPolicyAlgorithm(GymAlgorithmProtocol, Protocol):
    """Single-agent off-policy (DQN, DDPG, TD3): act, store, learn from sampled batches."""

    #: ``spec.batch_size``: transitions per sampled batch; ``spec.gamma``: the engine's n-step
    #: returns discount with it.
    @property
    def spec(self) -> OffPolicySpecFields: ...

    def init_exploration(self, training: RLTrainingFields) -> None:
        """Read the exploration schedule from ``training`` (keeps a restored epsilon)."""
        ...

    def reset_noise(self, mask: np.ndarray | None) -> None: ...

    def explore(
        self, obs: np.ndarray, rng: np.random.Generator, *, warmup: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(action to store, action for the env)`` for a batch, drawing randomness from ``rng``."""
        ...

    def end_step(self, done: np.ndarray) -> None:
        """After a vector step: decay epsilon, reset the noise of finished sub-envs."""
        ...

    def exploration_stats(self) -> dict[str, float]: ...

    def learn(self, batch: Mapping[str, Any]) -> Mapping[str, Any]: ...


@runtime_checkable
class MultiAgentOnPolicyAlgorithm(GymAlgorithmProtocol, Protocol):
    """IPPO: per-agent policies over a PettingZoo vector env."""

    agent_ids: list[str]

    @property
    def spec(self) -> OnPolicySpecFields: ...

    def episode_score(self, returns: np.ndarray) -> np.ndarray: ...

    def rollout_layouts(self) -> dict[str, RolloutLayout]: ...

    def act_for_rollout(
        self, obs: Mapping[str, np.ndarray], action_masks: Mapping[str, np.ndarray] | None = None
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(per-agent {action, log_prob, value} arrays, env actions)`` for one vector step (allowed
        actions only under ``action_masks``)."""
        ...

    def check_masks(self, kind: str | None) -> None:
        """An error unless the env's action masks and ``action_masking`` agree (after a reset)."""
        ...

    def values(self, obs: Mapping[str, np.ndarray], agents: list[str] | None = None) -> dict[str, np.ndarray]: ...

    def learn(self, rollout: Mapping[str, Mapping[str, Any]]) -> Mapping[str, float]: ...


@runtime_checkable
class MultiAgentOffPolicyAlgorithm(GymAlgorithmProtocol, Protocol):
    """MADDPG, MATD3: decentralised actors, joint replay."""

    agent_ids: list[str]

    @property
    def spec(self) -> OffPolicySpecFields: ...

    def episode_score(self, returns: np.ndarray) -> np.ndarray: ...

    def reset_noise(self, num_envs: int) -> None: ...

    def check_masks(self, kind: str | None) -> None:
        """An error when the env reports action masks (MADDPG and MATD3 do not mask)."""
        ...

    def get_actions(
        self, obs: Mapping[str, np.ndarray], *, explore: bool, rng: np.random.Generator | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]: ...

    def learn(self, batch: Mapping[str, Mapping[str, Any]]) -> Mapping[str, float]: ...


# --------------------------------------------------------------------------------------------------
# Versions. An algorithm class states the version it was written for as ``protocol_version``; the
# strategies check it (``agilerl validate``, and before a run builds anything) and name every
# method it lacks. A change to a protocol's methods bumps its version and adds a line here and to
# docs/gym.md ("Protocol versions").
# --------------------------------------------------------------------------------------------------

PROTOCOL_DOCS = 'docs/gym.md, "Protocol versions"'
_V1 = "first published version (the strategies' only contract; no private attributes)"

ON_POLICY = VersionedProtocol("single_agent on-policy", OnPolicyAlgorithm, 1, {1: _V1}, PROTOCOL_DOCS)
OFF_POLICY = VersionedProtocol("single_agent off-policy", OffPolicyAlgorithm, 1, {1: _V1}, PROTOCOL_DOCS)
MULTI_AGENT_ON_POLICY = VersionedProtocol(
    "multi_agent on-policy", MultiAgentOnPolicyAlgorithm, 1, {1: _V1}, PROTOCOL_DOCS
)
MULTI_AGENT_OFF_POLICY = VersionedProtocol(
    "multi_agent off-policy", MultiAgentOffPolicyAlgorithm, 1, {1: _V1}, PROTOCOL_DOCS
)
