"""The manifest contract: spec base classes, sections, the manifest, and the env factories.

Spec classes that plugins provide (``PPOSpec``, ``GymEnvSpec``, ...) are importable from here too;
they resolve through the registries, and a missing plugin gives an "install X" error.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel

from agilerl.errors import KNOWN_PROVIDERS, MissingPluginError
from agilerl.models import env
from agilerl.models.base import (
    AlgorithmSpec,
    EnvSpec,
    Mutable,
    Spec,
)
from agilerl.models.composition import section_models, training_spec_class
from agilerl.models.env import *  # noqa: F403  (the env factories: env.__all__, listed below)
from agilerl.models.manifest import (
    API_VERSION,
    TrainingManifest,
    load_manifest,
    read_manifest_file,
    validate_manifest,
)
from agilerl.models.sections import (
    MultiFrequencySelectionSpec,
    MutationProbabilities,
    MutationSpec,
    RLHyperparameter,
    TournamentSelectionSpec,
    TrainingSpec,
)
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


def __getattr__(name: str) -> Any:
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


__all__ = [
    "API_VERSION",
    "MANIFEST_REGISTRY",
    "AlgorithmSpec",
    "EnvSpec",
    "MultiFrequencySelectionSpec",
    "Mutable",
    "MutationProbabilities",
    "MutationSpec",
    "RLHyperparameter",
    "Spec",
    "TournamentSelectionSpec",
    "TrainingManifest",
    "TrainingSpec",
    "load_manifest",
    "read_manifest_file",
    "section_models",
    "training_spec_class",
    "validate_manifest",
]
__all__ += env.__all__
