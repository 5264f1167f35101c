"""What the plugin adds to agilerl: one algorithm in an existing paradigm (no builder, strategy or env)."""

from __future__ import annotations

from typing import Any

from agilerl import hookimpl
from agilerl_tutorial_a2c.specs import A2CSpec


@hookimpl
def agilerl_register_algorithms(register: Any) -> None:
    # A name of its own: the gym plugin has a built-in A2C (agilerl_plugin_gym.single_agent.a2c).
    register(A2CSpec, name="TutorialA2C", algorithm="agilerl_tutorial_a2c.a2c:A2C")
