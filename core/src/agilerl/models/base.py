"""Spec base classes: the data a manifest's ``algorithm`` and ``environment`` sections validate into.

A spec is data. It declares its routing as class variables (``paradigm``, ``regime``,
``default_env_type``) and its default mutation ranges (``hpo_ranges``); builders and strategies,
looked up from those, turn it into a live algorithm and pick the loop that trains it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

if TYPE_CHECKING:
    from agilerl.errors import Problem
    from agilerl.models.manifest import TrainingManifest


class Spec(BaseModel):
    """Base of every manifest section: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)


class AlgorithmSpec(Spec):
    """Fields every algorithm's manifest section carries."""

    #: Which builder makes it (the key a plugin registered its builder under).
    paradigm: ClassVar[str] = ""
    #: Which loop trains it (with ``paradigm``, the key a plugin registered its strategy under).
    regime: ClassVar[str] = ""
    #: ``environment.env_type`` used when the manifest omits it.
    default_env_type: ClassVar[str] = "gym"
    #: Env steps per agent between evaluations when ``training.evo_steps`` is not given.
    default_evo_steps: ClassVar[int] = 10_000
    #: Default (min, max) ranges for hyperparameter mutation, by field name.
    hpo_ranges: ClassVar[dict[str, tuple[float, float]]] = {}
    #: Hyperparameters mutated when ``mutation.rl_hp_selection`` is empty.
    default_mutable: ClassVar[tuple[str, ...]] = ()
    #: Mutation operators this family supports (``rl_hp_mut`` always; others if the algorithm can).
    supported_mutations: ClassVar[frozenset[str]] = frozenset(
        {"no_mut", "rl_hp_mut", "arch_mut", "new_layer", "params_mut", "act_mut"}
    )
    #: Why the operators outside ``supported_mutations`` are refused (shown in the error).
    unsupported_mutation_reason: ClassVar[str] = ""
    #: Fields that may be written under the manifest's ``network:`` section and are lifted onto
    #: this algorithm spec at validation (a field of the spec, or a validation alias of one).
    lifted_network_fields: ClassVar[frozenset[str]] = frozenset()

    batch_size: Annotated[int, Field(ge=1, description="Samples per gradient step.")] = 64

    _registry_name: str | None = PrivateAttr(default=None)

    @classmethod
    def default_name(cls) -> str:
        name = cls.__name__
        return name[: -len("Spec")] if name.endswith("Spec") and len(name) > 4 else name

    @property
    def name(self) -> str:
        """The registry key this spec was resolved from."""
        return self._registry_name or self.default_name()

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        """Cross-section checks a spec wants run at validation time (override; default none)."""
        return []

    def hyperparameters(self) -> dict[str, Any]:
        """Numeric fields: candidates for hyperparameter mutation."""
        return {k: v for k, v in self.model_dump().items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class SingleAgentAlgorithmSpec(AlgorithmSpec):
    """Single-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "on_policy"

    learn_step: Annotated[int, Field(ge=1, description="Env steps between learning updates.")] = 5
    gamma: Annotated[float, Field(ge=0.0, le=1.0, description="Discount factor.")] = 0.99
    normalize_images: bool = True
    net_config: dict[str, Any] | None = None


class MultiAgentAlgorithmSpec(AlgorithmSpec):
    """Multi-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "multi_agent"
    regime: ClassVar[str] = "on_policy"

    learn_step: Annotated[int, Field(ge=1)] = 2048
    gamma: Annotated[float, Field(ge=0.0, le=1.0)] = 0.99
    normalize_images: bool = True
    torch_compiler: str | None = None
    net_config: dict[str, Any] | None = None


class EnvSpec(Spec):
    """Base of environment sections. Plugins subclass it and register an ``env_type``."""

    env_type: str
    num_envs: Annotated[int, Field(ge=1)] = 1
    version: str | int | None = None

    @property
    def label(self) -> str:
        """A short human-readable name for logs and run directories."""
        name = getattr(self, "name", None)
        return str(name or self.env_type)
