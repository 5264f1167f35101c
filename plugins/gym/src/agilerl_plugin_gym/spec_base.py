"""The base specs of this plugin's algorithm families (``SingleAgentAlgorithmSpec``,
``MultiAgentAlgorithmSpec``).

They live here, not in core: core knows no paradigm. Both subclass core's public
:class:`~agilerl.models.AlgorithmSpec`; ``agilerl.models.SingleAgentAlgorithmSpec`` (the seed API's
name) still resolves here through core's lazy forwarding of plugin-provided names.
Pure pydantic: importing this module imports neither torch nor gymnasium.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from agilerl.models import AlgorithmSpec


class SingleAgentAlgorithmSpec(AlgorithmSpec):
    """Single-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "on_policy"
    default_env_type: ClassVar[str] = "gym"

    learn_step: Annotated[int, Field(ge=1, description="Env steps between learning updates.")] = 5
    gamma: Annotated[float, Field(ge=0.0, le=1.0, description="Discount factor.")] = 0.99
    normalize_images: bool = True
    net_config: dict[str, Any] | None = None


class MultiAgentAlgorithmSpec(AlgorithmSpec):
    """Multi-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "multi_agent"
    regime: ClassVar[str] = "on_policy"
    default_env_type: ClassVar[str] = "gym"

    learn_step: Annotated[int, Field(ge=1)] = 2048
    gamma: Annotated[float, Field(ge=0.0, le=1.0)] = 0.99
    normalize_images: bool = True
    torch_compiler: str | None = None
    net_config: dict[str, Any] | None = None


__all__ = ["MultiAgentAlgorithmSpec", "SingleAgentAlgorithmSpec"]
