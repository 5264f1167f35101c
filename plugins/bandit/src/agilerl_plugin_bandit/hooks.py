"""Hook implementations of agilerl-plugin-bandit.

Only the pydantic specs are imported here; the env factory, algorithms, builder and strategy are
named as ``"module:attr"`` strings so ``agilerl validate`` never imports torch or pandas.
"""

from __future__ import annotations

from typing import Any

from agilerl.hookspecs import hookimpl
from agilerl_plugin_bandit.specs import BanditEnvSpec, NeuralTSSpec, NeuralUCBSpec

_PKG = "agilerl_plugin_bandit"


@hookimpl
def agilerl_register_algorithms(register: Any) -> None:
    register(NeuralUCBSpec, "NeuralUCB", algorithm=f"{_PKG}.neural_ucb:NeuralUCB")
    register(NeuralTSSpec, "NeuralTS", algorithm=f"{_PKG}.neural_ts:NeuralTS")


@hookimpl
def agilerl_register_env_types(register: Any) -> None:
    register(
        "bandit",
        BanditEnvSpec,
        f"{_PKG}.env:make_bandit_env",
        functions={"make_bandit_env": f"{_PKG}.env:make_bandit_env"},
    )


@hookimpl
def agilerl_register_builders(register: Any) -> None:
    register("bandit", f"{_PKG}.training:BanditBuilder")


@hookimpl
def agilerl_register_strategies(register: Any) -> None:
    register("bandit", "online", f"{_PKG}.training:BanditStrategy")
