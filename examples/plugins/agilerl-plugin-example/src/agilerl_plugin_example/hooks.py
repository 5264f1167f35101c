"""The plugin's hook implementations: what it adds to agilerl.

Classes and functions are given as ``"module:attr"`` strings where importing them is not needed
to validate a manifest; agilerl imports them when a run needs them.
"""

from __future__ import annotations

from agilerl import hookimpl
from agilerl_plugin_example.specs import KArmedBanditSpec, UCB1Spec


@hookimpl
def agilerl_register_algorithms(register):  # type: ignore[no-untyped-def]
    register(UCB1Spec, algorithm="agilerl_plugin_example.ucb:UCB1")


@hookimpl
def agilerl_register_env_types(register):  # type: ignore[no-untyped-def]
    register("karmed", KArmedBanditSpec, "agilerl_plugin_example.env:make_karmed_env")


@hookimpl
def agilerl_register_builders(register):  # type: ignore[no-untyped-def]
    register("multi_armed_bandit", "agilerl_plugin_example.ucb:BanditBuilder")


@hookimpl
def agilerl_register_strategies(register):  # type: ignore[no-untyped-def]
    register("multi_armed_bandit", "online", "agilerl_plugin_example.ucb:OnlineBanditStrategy")
