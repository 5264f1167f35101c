"""The manifest contract: spec base classes, sections, the manifest, and the env factories.

Spec classes that plugins provide (``PPOSpec``, ``GymEnvSpec``, ...) are importable from here too;
they resolve through the registries, and a missing plugin gives an "install X" error.
"""

from __future__ import annotations

from typing import Any

from agilerl.errors import MissingPluginError
from agilerl.models.base import (
    AlgorithmSpec,
    EnvSpec,
    LLMAlgorithmSpec,
    LoraConfigDict,
    MultiAgentAlgorithmSpec,
    SingleAgentAlgorithmSpec,
    Spec,
)
from agilerl.models.env import (
    make_bandit_env,
    make_env,
    make_gym_env,
    make_llm_env,
    make_pz_env,
    make_rollout_env_factory,
    make_single_env,
)
from agilerl.models.manifest import (
    API_VERSION,
    TrainingManifest,
    load_manifest,
    read_manifest_file,
    validate_manifest,
)
from agilerl.models.sections import (
    CnnSpec,
    MlpSpec,
    MultiFrequencySelectionSpec,
    MutationProbabilities,
    MutationSpec,
    NetworkSpec,
    ReplayBufferSpec,
    RLHyperparameter,
    TournamentSelectionSpec,
    TrainingSpec,
)
from agilerl.registry import ENV_TYPES, MANIFEST_REGISTRY


def __getattr__(name: str) -> Any:
    """``agilerl.models.PPOSpec`` and friends: spec classes registered by plugins."""
    if not name.endswith("Spec") or name.startswith("_"):
        raise AttributeError(f"module 'agilerl.models' has no attribute {name!r}")
    for _, cls in MANIFEST_REGISTRY.items():
        if cls.__name__ == name:
            return cls
    for env_cls in ENV_TYPES.spec_classes().values():
        if env_cls.__name__ == name:
            return env_cls
    base = name[: -len("Spec")]
    raise MissingPluginError(name if name in {"GymEnvSpec", "BanditEnvSpec", "LLMEnvSpec"} else base)


__all__ = [
    "API_VERSION",
    "MANIFEST_REGISTRY",
    "AlgorithmSpec",
    "CnnSpec",
    "EnvSpec",
    "LLMAlgorithmSpec",
    "LoraConfigDict",
    "MlpSpec",
    "MultiAgentAlgorithmSpec",
    "MultiFrequencySelectionSpec",
    "MutationProbabilities",
    "MutationSpec",
    "NetworkSpec",
    "RLHyperparameter",
    "ReplayBufferSpec",
    "SingleAgentAlgorithmSpec",
    "Spec",
    "TournamentSelectionSpec",
    "TrainingManifest",
    "TrainingSpec",
    "load_manifest",
    "make_bandit_env",
    "make_env",
    "make_gym_env",
    "make_llm_env",
    "make_pz_env",
    "make_rollout_env_factory",
    "make_single_env",
    "read_manifest_file",
    "validate_manifest",
]
