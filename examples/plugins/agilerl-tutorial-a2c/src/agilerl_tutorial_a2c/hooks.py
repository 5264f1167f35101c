"""What the plugin adds to agilerl: one algorithm in an existing paradigm (no builder, strategy or env)."""

from __future__ import annotations

from typing import Any

from agilerl import hookimpl
from agilerl_plugin_gym.single_agent.spaces import declare_space_rules
from agilerl_tutorial_a2c.specs import A2CSpec


@hookimpl
def agilerl_register_algorithms(register: Any) -> None:
    # Discrete actions, Box/Discrete/image observations: DQN's space rules (checked at validation).
    declare_space_rules("A2C", like="DQN")
    register(A2CSpec, algorithm="agilerl_tutorial_a2c.a2c:A2C")
