"""What this part registers with agilerl (called from agilerl_plugin_llm.hooks)."""

from __future__ import annotations

from typing import Any


def register_algorithms(register: Any) -> None:
    pass


def register_env_types(register: Any) -> None:
    pass


def register_builders(register: Any) -> None:
    pass


def register_strategies(register: Any) -> None:
    pass
