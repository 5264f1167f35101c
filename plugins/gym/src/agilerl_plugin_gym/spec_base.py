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

from agilerl.models import AlgorithmSpec

if TYPE_CHECKING:
    from gymnasium import spaces

    from agilerl.models import TrainingManifest


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
        from agilerl_plugin_gym.single_agent.spaces import check_spaces

        check_spaces(self, algo, observation_space, action_space)


#: Discrete actions (DQN, Rainbow DQN, CQN).
DISCRETE_ACTIONS = SpaceRules("discrete")
#: Continuous 1-D Box actions (DDPG, TD3).
CONTINUOUS_ACTIONS = SpaceRules("continuous")
#: Discrete, MultiDiscrete or continuous actions (PPO).
ANY_ACTIONS = SpaceRules("any")


class _ReplayMemory(AlgorithmSpec):
    """The replay buffer's share of the validation-time memory estimate (off-policy algorithms)."""

    def memory_parts(self, manifest: TrainingManifest) -> dict[str, tuple[int, str]]:
        from agilerl.checks import FLOORS

        rb = manifest.replay_buffer
        if rb is None or type(self).regime == "on_policy":
            return {}
        per = FLOORS["transition"]
        return {"replay_buffer.max_size": (rb.max_size * per, f"{rb.max_size} transitions x {per} B")}


class SingleAgentAlgorithmSpec(_ReplayMemory):
    """Single-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "on_policy"
    default_env_type: ClassVar[str] = "gym"
    #: The env spaces the algorithm takes, checked on one env at validation (None: not checked).
    space_rules: ClassVar[SpaceRules | None] = None

    learn_step: Annotated[int, Field(ge=1, description="Env steps between learning updates.")] = 5
    gamma: Annotated[float, Field(ge=0.0, le=1.0, description="Discount factor.")] = 0.99
    normalize_images: bool = True
    net_config: dict[str, Any] | None = None


class MultiAgentAlgorithmSpec(_ReplayMemory):
    """Multi-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "multi_agent"
    regime: ClassVar[str] = "on_policy"
    default_env_type: ClassVar[str] = "gym"

    learn_step: Annotated[int, Field(ge=1)] = 2048
    gamma: Annotated[float, Field(ge=0.0, le=1.0)] = 0.99
    normalize_images: bool = True
    torch_compiler: str | None = None
    net_config: dict[str, Any] | None = None


__all__ = [
    "ANY_ACTIONS",
    "CONTINUOUS_ACTIONS",
    "DISCRETE_ACTIONS",
    "MultiAgentAlgorithmSpec",
    "SingleAgentAlgorithmSpec",
    "SpaceRules",
]
