"""Spec base classes: the data a manifest's ``algorithm`` and ``environment`` sections validate into.

A spec is data. It declares its routing as class variables (``paradigm``, ``regime``,
``default_env_type``); each hyperparameter is a typed field, declared once, whose default mutation
range is field metadata (:class:`Mutable`). Builders and strategies, looked up from the routing,
turn it into a live algorithm (which reads its spec) and pick the loop that trains it.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

if TYPE_CHECKING:
    from agilerl.errors import Problem
    from agilerl.models.manifest import TrainingManifest


@dataclass(frozen=True)
class Mutable:
    """Field metadata: this hyperparameter is mutable by evolutionary HPO, by default within
    ``[low, high]``. Integer-ness comes from the field's type (``int`` fields stay whole numbers).

    ``rate: Annotated[float, Field(gt=0, description="..."), Mutable(1e-5, 1e-2)] = 3e-4``. A
    manifest's ``mutation.rl_hp_selection`` overrides the range (and may name any numeric field).
    """

    low: float
    high: float

    def __post_init__(self) -> None:
        if not self.low <= self.high:
            raise ValueError(f"Mutable({self.low}, {self.high}): low must not exceed high")


class Spec(BaseModel):
    """Base of every manifest section: unknown fields and non-finite floats are errors."""

    # allow_inf_nan=False: a float field means a finite number (`.inf` is refused, not trained on).
    # defer_build=True: a spec's validator is built on its first use, so a process builds those of the
    # sections it validates, not of every algorithm every installed plugin registers (3 MB of a
    # training process's RSS; `agilerl validate` ~0.3 s faster).
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, validate_assignment=True, allow_inf_nan=False, defer_build=True
    )

    #: Other libraries' names for this section's fields (SB3's name for a learning rate, ...):
    #: an unknown field listed here gets "did you mean" the field it names. A value is a field of
    #: this section, or a dotted path into another section (``training.max_steps``). Names whose
    #: target this spec does not have are skipped, so a base class may list its subclasses' names.
    field_synonyms: ClassVar[dict[str, str]] = {}
    #: How a ``field_synonyms`` name differs from the field it points at (its unit, per-device vs
    #: per-step, ...), said after the "did you mean"; absent: it is another library's name for it.
    synonym_notes: ClassVar[dict[str, str]] = {}
    #: Where a field differs from AgileRL's (meaning, default, values accepted), by field name: the
    #: reference page's "vs AgileRL" column. Absent: AgileRL's name, meaning and default.
    upstream_notes: ClassVar[dict[str, str]] = {}


class AlgorithmSpec(Spec):
    """Fields every algorithm's manifest section carries."""

    #: Which builder makes it (the key a plugin registered its builder under).
    paradigm: ClassVar[str] = ""
    #: Which loop trains it (with ``paradigm``, the key a plugin registered its strategy under).
    regime: ClassVar[str] = ""
    #: ``environment.env_type`` used when the manifest omits it ("": the manifest must give one).
    default_env_type: ClassVar[str] = ""
    #: Env steps per agent between evaluations when ``training.evo_steps`` is not given.
    default_evo_steps: ClassVar[int] = 10_000
    #: Hyperparameters mutated when ``mutation.rl_hp_selection`` is empty.
    default_mutable: ClassVar[tuple[str, ...]] = ()
    #: Mutation operators this family supports (``rl_hp_mut`` always; others if the algorithm can).
    supported_mutations: ClassVar[frozenset[str]] = frozenset(
        {"no_mut", "rl_hp_mut", "arch_mut", "new_layer", "params_mut", "act_mut"}
    )
    #: Why the operators outside ``supported_mutations`` are refused (shown in the error).
    unsupported_mutation_reason: ClassVar[str] = ""
    #: Activation names the family's networks can switch to under ``act_mut``: with ``act_mut`` on,
    #: a ``mutation.activation_selection`` entry outside it is refused (None: any name).
    activation_choices: ClassVar[frozenset[str] | None] = None
    #: Fields that may be written under the manifest's ``network:`` section and are lifted onto
    #: this algorithm spec at validation (a field of the spec, or a validation alias of one).
    lifted_network_fields: ClassVar[frozenset[str]] = frozenset()
    #: ``training`` fields plugins add (``agilerl_register_sections``) that this algorithm's strategy
    #: reads; setting any other of them is a validation error.
    training_fields: ClassVar[frozenset[str]] = frozenset()
    #: Non-empty: a name a plugin knows (e.g. from AgileRL's catalogue) but cannot train yet. A
    #: manifest naming it fails with exactly this one message, and nothing else is checked.
    not_supported: ClassVar[str] = ""

    _registry_name: str | None = PrivateAttr(default=None)

    @classmethod
    def default_name(cls) -> str:
        name = cls.__name__
        return name[: -len("Spec")] if name.endswith("Spec") and len(name) > 4 else name

    @property
    def name(self) -> str:
        """The registry key this spec was resolved from."""
        return self._registry_name or self.default_name()

    def memory_parts(self, manifest: TrainingManifest) -> dict[str, tuple[int, str]]:
        """Bytes the run needs that core cannot count (its members, what one update stores, its
        buffers), at the least: field path -> ``(bytes, "how it was counted")``, added to the
        validation-time memory estimate (core counts the envs)."""
        return {}

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        """Cross-section checks a spec wants run at validation time (override; default none)."""
        return []

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "hpo_ranges" in vars(cls):
            raise TypeError(
                f"{cls.__qualname__}.hpo_ranges is retired: declare each range on its field, "
                "e.g. Annotated[float, Field(gt=0), Mutable(1e-5, 1e-2)] (agilerl.models.Mutable)"
            )

    @classmethod
    def mutable_ranges(cls) -> dict[str, Mutable]:
        """Fields carrying :class:`Mutable` metadata: their default mutation ranges, by name."""
        out: dict[str, Mutable] = {}
        for name, info in cls.model_fields.items():
            for meta in info.metadata:
                if isinstance(meta, Mutable):
                    out[name] = meta
        return out

    @classmethod
    def integer_fields(cls) -> frozenset[str]:
        """Fields typed ``int`` (or ``int | None``): mutation keeps them whole numbers."""
        out = set()
        for name, info in cls.model_fields.items():
            ann = info.annotation
            args = typing.get_args(ann) if typing.get_origin(ann) in (typing.Union, types.UnionType) else (ann,)
            if int in args and bool not in args:
                out.add(name)
        return frozenset(out)

    def hyperparameters(self) -> dict[str, Any]:
        """Numeric fields: candidates for hyperparameter mutation."""
        return {k: v for k, v in self.model_dump().items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class EnvSpec(Spec):
    """Base of environment sections. Plugins subclass it and register an ``env_type``."""

    #: ``module:attr`` factories this env type's plugin vouches for (the trust rule, ``agilerl.trust``):
    #: registered code, and the ``entrypoint`` passed to one is an id it looks up, not an import.
    registered_factories: ClassVar[frozenset[str]] = frozenset()
    #: Whether a ``path`` field alone (no ``entrypoint`` or ``factory`` beside it) makes this env
    #: type's loader import from it (put it on ``sys.path``): then the trust rule counts it as code.
    #: An env type whose ``path`` is otherwise only the base of data files sets ``False``.
    path_imports_alone: ClassVar[bool] = True

    env_type: str
    num_envs: Annotated[int, Field(ge=1)] = 1
    version: str | int | None = None

    @property
    def label(self) -> str:
        """A short human-readable name for logs and run directories."""
        name = getattr(self, "name", None)
        return str(name or self.env_type)
