"""The seed API's names that live in plugins, resolved through the registries: one module for them all.

``agilerl.models.<Name>Spec`` (``PPOSpec``, ``GymEnvSpec``, ``SingleAgentAlgorithmSpec``, ...) and the
named env factories of ``agilerl.models.env`` (``make_gym_env``, ``make_llm_env``, ...) were core
names in AgileRL; here they belong to plugins. Old code keeps importing them from where it always
did: those modules forward here, and a name whose plugin is not installed raises
:class:`~agilerl.errors.MissingPluginError` naming the distribution to install.

Nothing in core or in the built-in plugins imports these names: they import core's real modules
(``agilerl.models.base``, ``agilerl.models.manifest``, ...), so loading the plugins never needs the
registries that loading fills. A third-party plugin that still imports an old name at import time is
served too (:func:`agilerl.plugins.load_plugins` finishes the other plugins first).
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel

from agilerl.errors import MissingPluginError
from agilerl.known_plugins import KNOWN_PROVIDERS
from agilerl.registry import ENV_TYPES, MANIFEST_REGISTRY, PLUGIN_SECTIONS, SECTION_SCHEMAS


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The model classes an annotation names (``A | B | None``, ``Annotated[...]``, ``list[A]``, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _plugin_models() -> dict[str, type[BaseModel]]:
    """Every pydantic model reachable from a registered spec or section class: bases and field types."""
    found: dict[str, type[BaseModel]] = {}
    todo: list[type[BaseModel]] = [cls for _, cls in MANIFEST_REGISTRY.items()]
    todo += list(ENV_TYPES.spec_classes().values())
    todo += [m for m in (SECTION_SCHEMAS.owner(k) for k in PLUGIN_SECTIONS) if m is not None]
    todo += SECTION_SCHEMAS.extensions("training")
    while todo:
        cls = todo.pop()
        for base in cls.__mro__:
            if not (isinstance(base, type) and issubclass(base, BaseModel)) or base.__name__ in found:
                continue
            found[base.__name__] = base
            for field in base.model_fields.values():
                todo += _models_in(field.annotation)
    return found


def spec_class(name: str) -> Any:
    """Spec classes plugins provide, by class name (the seed API's names among them).

    A name resolves to a registered spec class, one of its base classes, or a model one of their
    fields uses; a name no loaded plugin provides raises :class:`MissingPluginError`.
    """
    if name.startswith("_"):
        raise AttributeError(f"module 'agilerl.models' has no attribute {name!r}")
    models = _plugin_models()
    if name in models:
        return models[name]
    if name in KNOWN_PROVIDERS:
        raise MissingPluginError(name)
    if name.endswith("Spec") and name[: -len("Spec")] in KNOWN_PROVIDERS:
        raise MissingPluginError(name[: -len("Spec")])
    raise AttributeError(f"module 'agilerl.models' has no attribute {name!r}")


def _forward(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return ENV_TYPES.function(name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Resolve ``{name}`` from the plugin that registered it, and call it."
    return call


make_gym_env = _forward("make_gym_env")
make_pz_env = _forward("make_pz_env")
make_single_env = _forward("make_single_env")
make_bandit_env = _forward("make_bandit_env")
make_llm_env = _forward("make_llm_env")
make_rollout_env_factory = _forward("make_rollout_env_factory")


__all__ = [
    "make_bandit_env",
    "make_gym_env",
    "make_llm_env",
    "make_pz_env",
    "make_rollout_env_factory",
    "make_single_env",
    "spec_class",
]
