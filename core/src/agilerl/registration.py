"""The ``register`` callables' signatures, as the registration hooks receive them.

Kept apart from :mod:`agilerl.registry` so that :mod:`agilerl.hookspecs` (imported by the plugin
manager, which the registry uses) depends on nothing but this: no import circle inside core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agilerl.models.base import AlgorithmSpec, EnvSpec


class RegisterAlgorithm(Protocol):
    def __call__(
        self,
        spec_cls: type[AlgorithmSpec],
        name: str | None = None,
        *,
        algorithm: Any = None,
        builder: Any = None,
        strategy: Any = None,
    ) -> None: ...


class RegisterEnvType(Protocol):
    def __call__(
        self,
        env_type: str,
        spec_cls: type[EnvSpec],
        factory: Any,
        *,
        functions: dict[str, Any] | None = None,
    ) -> None: ...


class RegisterBuilder(Protocol):
    def __call__(self, paradigm: str, builder: Any) -> None: ...


class RegisterStrategy(Protocol):
    def __call__(self, paradigm: str, regime: str, strategy: Any) -> None: ...


class RegisterSection(Protocol):
    def __call__(self, section: str, model: Any) -> None: ...


__all__ = ["RegisterAlgorithm", "RegisterBuilder", "RegisterEnvType", "RegisterSection", "RegisterStrategy"]
