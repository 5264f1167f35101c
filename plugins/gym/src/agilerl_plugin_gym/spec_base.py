"""The base specs of this plugin's algorithm families (``SingleAgentAlgorithmSpec``,
``MultiAgentAlgorithmSpec``).

They live here, not in core: core knows no paradigm. Both subclass core's public
:class:`~agilerl.models.AlgorithmSpec`; ``agilerl.models.SingleAgentAlgorithmSpec`` (the seed API's
name) still resolves here through core's lazy forwarding of plugin-provided names.
Pure pydantic: importing this module imports neither torch nor gymnasium.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field

from agilerl.models.base import AlgorithmSpec, Mutable

if TYPE_CHECKING:
    from gymnasium import spaces

    from agilerl.models.manifest import TrainingManifest


@dataclass(frozen=True)
class SpaceRules:
    """Which env spaces an algorithm takes: a spec's ``space_rules`` (checked on one env at
    validation) and what its algorithm checks when built.

    ``actions``: ``"discrete"`` (a ``Discrete`` space: DQN's family), ``"continuous"`` (a 1-D ``Box``:
    DDPG's) or ``"any"`` (``Discrete``, 1-D ``MultiDiscrete`` or 1-D ``Box``: PPO's). Observations:
    vectors, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, images and ``Dict``/``Tuple`` of these.
    """

    actions: Literal["discrete", "continuous", "any"]

    def check(self, algo: str, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]) -> None:
        """Raise :class:`~agilerl_plugin_gym.single_agent.spaces.UnsupportedSpaceError` naming ``algo``
        unless it takes these spaces."""
        from agilerl_plugin_gym.single_agent.spaces import (
            check_spaces,  # deferred: gymnasium, loaded only when validation builds an env
        )

        check_spaces(self, algo, observation_space, action_space)


#: Discrete actions (DQN, Rainbow DQN, CQN).
DISCRETE_ACTIONS = SpaceRules("discrete")
#: Continuous 1-D Box actions (DDPG, TD3).
CONTINUOUS_ACTIONS = SpaceRules("continuous")
#: Discrete, MultiDiscrete or continuous actions (PPO).
ANY_ACTIONS = SpaceRules("any")


#: Bytes an RL run's parts cost at the least (measured on CPU, torch 2.13): a freshly built small
#: policy-gradient agent with the default network for CartPole is about 70 KiB resident (before its
#: optimizer state exists); a stored transition or rollout step holds at least an observation,
#: action, reward and done flag as 4-byte values. Core adds the envs (``agilerl.checks.FLOORS``).
MEMORY_FLOORS = {"agent": 64 << 10, "transition": 16}


class _RLMemory(AlgorithmSpec):
    """An RL run's share of the validation-time memory estimate: its agents, the steps one update
    stores (``stored_steps_field``) and the replay buffer (off-policy algorithms)."""

    #: The field giving how many env steps one update stores (one rollout, for the on-policy
    #: algorithms); None: none beyond the replay buffer.
    stored_steps_field: ClassVar[str | None] = None

    def memory_parts(self, manifest: TrainingManifest) -> dict[str, tuple[int, str]]:
        agent, per = MEMORY_FLOORS["agent"], MEMORY_FLOORS["transition"]
        pop = manifest.training.pop_size
        parts = {"training.pop_size": (pop * agent, f"{pop} agents x {agent >> 10} KiB")}
        field = type(self).stored_steps_field
        stored = getattr(self, field, None) if field else None
        if isinstance(stored, int):
            parts[f"algorithm.{field}"] = (stored * per, f"{stored} stored steps per update x {per} B")
        rb = manifest.replay_buffer
        if rb is not None and type(self).regime != "on_policy":
            parts["replay_buffer.max_size"] = (rb.max_size * per, f"{rb.max_size} transitions x {per} B")
        return parts


class SingleAgentAlgorithmSpec(_RLMemory):
    """Single-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "on_policy"
    default_env_type: ClassVar[str] = "gym"
    #: The env spaces the algorithm takes, checked on one env at validation (None: not checked).
    space_rules: ClassVar[SpaceRules | None] = None

    batch_size: Annotated[int, Field(ge=1, description="Samples per gradient step."), Mutable(8, 512)] = 64
    learn_step: Annotated[int, Field(ge=1, description="Env steps between learning updates."), Mutable(1, 10)] = 5
    gamma: Annotated[float, Field(ge=0.0, le=1.0, description="Discount factor."), Mutable(0.9, 0.9999)] = 0.99
    normalize_images: bool = True
    net_config: dict[str, Any] | None = None


class MultiAgentAlgorithmSpec(_RLMemory):
    """Multi-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "multi_agent"
    regime: ClassVar[str] = "on_policy"
    default_env_type: ClassVar[str] = "gym"

    batch_size: Annotated[int, Field(ge=1, description="Samples per gradient step."), Mutable(8, 512)] = 64
    learn_step: Annotated[int, Field(ge=1)] = 2048
    gamma: Annotated[float, Field(ge=0.0, le=1.0), Mutable(0.9, 0.9999)] = 0.99
    normalize_images: bool = True
    torch_compiler: str | None = None
    net_config: dict[str, Any] | None = None


__all__ = [
    "ANY_ACTIONS",
    "CONTINUOUS_ACTIONS",
    "DISCRETE_ACTIONS",
    "MEMORY_FLOORS",
    "MultiAgentAlgorithmSpec",
    "SingleAgentAlgorithmSpec",
    "SpaceRules",
]
