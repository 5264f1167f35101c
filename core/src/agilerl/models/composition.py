"""Which model validates each manifest section: core's own, the owning plugin's
(``agilerl_register_sections``), and core's ``training`` composed with every plugin's fields."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from agilerl.models.sections import LoggingSpec, MutationSpec, TournamentSelectionSpec, TrainingSpec, ValidationSpec
from agilerl.registry import EXTENSIBLE_SECTIONS, PLUGIN_SECTIONS, SECTION_SCHEMAS

__all__ = ["ALIASES", "SECTIONS", "plugin_training_fields", "section_models", "training_as", "training_spec_class"]

FieldsT = TypeVar("FieldsT", bound=BaseModel)

#: The manifest's sections in order; ``None``: validated elsewhere (the registries for ``algorithm``
#: and ``environment``, the owning plugin for ``network`` and ``replay_buffer``).
SECTIONS: dict[str, type[BaseModel] | None] = {
    "apiVersion": None,
    "algorithm": None,
    "environment": None,
    "network": None,
    "training": TrainingSpec,
    "mutation": MutationSpec,
    "replay_buffer": None,
    "tournament_selection": TournamentSelectionSpec,
    "logging": LoggingSpec,
    "validation": ValidationSpec,
}
ALIASES = {"api_version": "apiVersion", "selection_strategy": "tournament_selection"}
assert set(PLUGIN_SECTIONS) <= set(SECTIONS) and set(EXTENSIBLE_SECTIONS) <= set(SECTIONS)

_composed: dict[tuple[type[BaseModel], ...], type[TrainingSpec]] = {}


def training_spec_class() -> type[TrainingSpec]:
    """Core's :class:`TrainingSpec` with the fields installed plugins add (``agilerl_register_sections``).

    One class per set of extensions (so instances compare and pickle: it is reachable as
    ``agilerl.models.manifest.ComposedTrainingSpec``). Upstream notes and synonyms are merged.
    """
    extensions = tuple(SECTION_SCHEMAS.extensions("training"))
    if not extensions:
        return TrainingSpec
    cls = _composed.get(extensions)
    if cls is None:
        notes: dict[str, str] = {}
        synonyms: dict[str, str] = {}
        for base in (TrainingSpec, *extensions):
            notes.update(getattr(base, "upstream_notes", {}) or {})
            synonyms.update(getattr(base, "field_synonyms", {}) or {})
        namespace = {
            "__module__": "agilerl.models.manifest",
            "__qualname__": "ComposedTrainingSpec",
            "__doc__": TrainingSpec.__doc__,
            "upstream_notes": notes,
            "field_synonyms": synonyms,
        }
        # Core's class last among the bases: pydantic lists the last base's fields first (core's, then each plugin's).
        cls = type("ComposedTrainingSpec", (*reversed(extensions), TrainingSpec), namespace)
        _composed[extensions] = cls
    return cls


def training_as(manifest: Any, fields: type[FieldsT]) -> FieldsT:
    """``manifest.training`` as the ``fields`` model a plugin added to it (``register("training",
    fields)``): the composed section is an instance of every plugin's model, so a plugin reads its
    own fields typed. A manifest validated without that plugin is a ``TypeError`` naming it."""
    training = manifest.training
    if not isinstance(training, fields):
        raise TypeError(
            f"manifest.training lacks the fields of {fields.__module__}.{fields.__qualname__}: "
            "validate the manifest with the plugin that registers them installed"
        )
    return training


def plugin_training_fields() -> dict[str, Any]:
    """``training`` field name -> its default, for every field a plugin adds: each is refused for an
    algorithm whose spec does not list it in ``training_fields``."""
    out: dict[str, Any] = {}
    for ext in SECTION_SCHEMAS.extensions("training"):
        for name, info in ext.model_fields.items():
            if name not in TrainingSpec.model_fields:
                out[name] = info.get_default(call_default_factory=True)
    return out


def section_models() -> dict[str, type[BaseModel] | None]:
    """:data:`SECTIONS` with the plugin-owned schemas and the composed ``training`` filled in."""
    models = dict(SECTIONS)
    for key in PLUGIN_SECTIONS:
        models[key] = SECTION_SCHEMAS.owner(key)
    models["training"] = training_spec_class()
    return models
