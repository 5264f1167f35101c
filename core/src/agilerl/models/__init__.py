"""The manifest contract: spec base classes, sections, the manifest, and the env factories.

Spec classes that plugins provide (``PPOSpec``, ``GymEnvSpec``, ...) are importable from here too;
they resolve through the registries, and a missing plugin gives an "install X" error.
"""

from __future__ import annotations

from typing import Any

from agilerl.compat import spec_class
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
from agilerl.registry import MANIFEST_REGISTRY


def __getattr__(name: str) -> Any:
    """Spec classes plugins provide, by class name: the seed API's names (:func:`agilerl.compat.spec_class`)."""
    return spec_class(name)


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
