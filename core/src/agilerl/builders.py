"""Builders turn a validated spec into a live algorithm. One per paradigm, registered by plugins."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.errors import AgileRLError
from agilerl.models.base import AlgorithmSpec
from agilerl.registry import BUILDERS, MANIFEST_REGISTRY, resolve

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest


@dataclass
class AlgorithmBuildRuntime:
    """Per-agent build inputs that a manifest cannot hold."""

    index: int = 0
    device: str = "cpu"
    seed: int | None = None
    #: Resolved mutable-hyperparameter ranges: name -> (min, max).
    hp_config: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: An agent state (from a checkpoint) to load after building.
    resume_state: dict[str, Any] | None = None
    manifest: TrainingManifest | None = None


class AlgorithmBuilder:
    """Paradigm-keyed factory that builds a live algorithm from a spec.

    Concrete builders set ``paradigm`` and implement :meth:`build_for_run`, which the trainer calls
    once per population member with the live environment; they may also offer a paradigm-specific
    ``build(spec, ...)`` for direct use (the seed API's ``SingleAgentBuilder.build(spec, obs, act)``).
    """

    paradigm: ClassVar[str] = ""

    @classmethod
    def algo_class(cls, spec: AlgorithmSpec) -> Any:
        """The algorithm class registered for ``spec`` (walking the spec's base classes)."""
        for klass in type(spec).__mro__:
            if not (isinstance(klass, type) and issubclass(klass, AlgorithmSpec)):
                continue
            name = MANIFEST_REGISTRY.name_of(klass)
            if name is None:
                continue
            algorithm = MANIFEST_REGISTRY.entry(name).extra.get("algorithm")
            if algorithm is not None:
                return resolve(algorithm, f"algorithm class of {name!r}")
        raise AttributeError(f"no algorithm class is registered for {type(spec).__name__}")

    @classmethod
    def build_for_run(cls, spec: Any, *, env: Any, manifest: TrainingManifest, runtime: AlgorithmBuildRuntime) -> Any:
        """Build one population member for a run on ``env``.

        ``spec`` is the validated algorithm spec (typed ``Any`` so concrete builders can narrow it
        to their own spec classes).
        """
        raise NotImplementedError(f"{cls.__name__} does not implement build_for_run")

    @classmethod
    def build_population(
        cls, spec: Any, *, env: Any, manifest: TrainingManifest, runtimes: list[AlgorithmBuildRuntime]
    ) -> list[Any]:
        """Build a run's whole population, one member per runtime, in index order.

        The default builds each member on its own with :meth:`build_for_run`. A builder whose
        members can share something (one frozen base model under every member's adapters, say)
        overrides this; the trainer loads each ``runtime.resume_state`` afterwards.
        """
        return [cls.build_for_run(spec, env=env, manifest=manifest, runtime=runtime) for runtime in runtimes]


def select_builder(spec: AlgorithmSpec) -> type[AlgorithmBuilder]:
    """Return the builder class for ``spec``'s paradigm (or the one its registration names)."""
    if not isinstance(spec, AlgorithmSpec):
        raise TypeError(f"select_builder needs an AlgorithmSpec, got {type(spec).__name__}")
    entry = MANIFEST_REGISTRY.entry_for(spec)
    override = entry.extra.get("builder") if entry else None
    if override is not None:
        return resolve(override, f"builder of {spec.name!r}")  # type: ignore[no-any-return]
    if not type(spec).paradigm:
        raise AgileRLError(f"{type(spec).__name__} declares no paradigm; set the class variable `paradigm`")
    return BUILDERS.get(type(spec).paradigm)  # type: ignore[no-any-return]


__all__ = ["AlgorithmBuildRuntime", "AlgorithmBuilder", "select_builder"]
