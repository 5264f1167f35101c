"""A base class with the protocol's bookkeeping, for algorithms that want it (no torch needed)."""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agilerl.errors import AgileRLError
from agilerl.inference import load
from agilerl.models.base import AlgorithmSpec

_A = TypeVar("_A", bound="AlgorithmBase[Any]")
#: The algorithm's spec class: ``class MyAlgorithm(AlgorithmBase[MySpec])`` types ``self.spec.<field>``.
SpecT = TypeVar("SpecT", bound=AlgorithmSpec)


class AlgorithmBase(Generic[SpecT]):
    """Implements ``index``, ``fitness``, ``steps``, ``mut``, ``clone`` and hyperparameter access.

    The spec is the single truth for hyperparameters: an algorithm reads ``self.spec.<field>``.
    ``set_hyperparameter`` (what mutation, migration and ``--set`` on resume call) replaces
    ``self.spec`` with a copy holding the new value and calls :meth:`on_spec_change`, where a
    subclass applies it (e.g. rebuilds an optimizer when a learning rate changed).
    Subclasses implement ``state_dict``/``load_state_dict`` for their own state and call
    ``super()`` to include the bookkeeping.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Names of the retired protocol: fail where the class is written, not silently at mutation.
        if "_on_hyperparameter_change" in vars(cls):
            raise TypeError(
                f"{cls.__qualname__}._on_hyperparameter_change(name, old, new) is no longer called: implement "
                "on_spec_change(self, old_spec, changed_names) and read the new values from self.spec"
            )
        if "integer_hyperparameters" in vars(cls):
            raise TypeError(
                f"{cls.__qualname__}.integer_hyperparameters is retired: a hyperparameter is an integer when its "
                "spec field is typed int"
            )

    def __init__(self, spec: SpecT, *, index: int = 0) -> None:
        self.spec: SpecT = spec
        self.index = int(index)
        self.fitness: list[float] = []
        self.scores: list[float] = []
        self.steps = 0
        self.mut: str | None = "None"

    if not TYPE_CHECKING:  # hidden from type checkers: they must still see a missing attribute

        def __getattr__(self, name: str) -> Any:
            # Only reached when normal lookup failed: name the fix when code reads a spec field off the
            # algorithm (what AlgorithmBase used to copy there).
            spec = self.__dict__.get("spec")
            if spec is not None and name in type(spec).model_fields:
                raise AttributeError(
                    f"{type(self).__name__!r} object has no attribute {name!r}: hyperparameters are read from the "
                    f"spec, self.spec.{name} (AlgorithmBase does not copy spec fields onto the algorithm)"
                )
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- hyperparameters ---------------------------------------------------------------------
    def get_hyperparameter(self, name: str) -> float:
        if name not in type(self.spec).model_fields:
            raise KeyError(f"{type(self).__name__} has no hyperparameter {name!r}")
        return getattr(self.spec, name)  # type: ignore[no-any-return]

    def set_hyperparameter(self, name: str, value: float) -> None:
        if name not in type(self.spec).model_fields:
            raise KeyError(f"{type(self).__name__} has no hyperparameter {name!r}")
        if name in self.spec.integer_fields():
            value = max(1, round(value))
        self._update_spec({name: value})

    def _update_spec(self, values: dict[str, Any]) -> None:
        """A new spec with ``values`` (no re-validation: mutation keeps values inside the field's
        bounds), then one :meth:`on_spec_change` for the names whose value changed."""
        old = self.spec
        changed = {k: v for k, v in values.items() if getattr(old, k) != v}
        if changed:
            self.spec = old.model_copy(update=changed)
            self.on_spec_change(old, frozenset(changed))

    def on_spec_change(self, old: SpecT, changed: frozenset[str]) -> None:
        """Hook for subclasses: apply the hyperparameters in ``changed`` (``self.spec`` holds the new
        values, ``old`` the previous spec), e.g. rebuild the optimizer when a learning rate changed."""

    # --- population ----------------------------------------------------------------------------
    def clone(self, index: int | None = None) -> AlgorithmBase[SpecT]:
        twin = copy.deepcopy(self)
        if index is not None:
            twin.index = int(index)
        return twin

    # --- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        hps = self.spec.hyperparameters()
        return {
            "index": self.index,
            "fitness": list(self.fitness),
            "scores": list(self.scores),
            "steps": self.steps,
            "mut": self.mut,
            "hyperparameters": hps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.index = int(state["index"])
        self.fitness = list(state.get("fitness", []))
        self.scores = list(state.get("scores", []))
        self.steps = int(state.get("steps", 0))
        self.mut = state.get("mut")
        # A checkpoint's hyperparameters are applied to the spec (a mutated member resumes with its
        # own values); a name the spec no longer declares (a checkpoint of an older version) is
        # skipped: no code reads it.
        fields = type(self.spec).model_fields
        self._update_spec({k: v for k, v in state.get("hyperparameters", {}).items() if k in fields})

    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float:
        raise NotImplementedError

    # --- using a trained agent ------------------------------------------------------------------
    @classmethod
    def load(
        cls: type[_A], path: str | os.PathLike[str], *, device: str = "cpu", member: int | None = None,
        trust: bool = False, manifest: Any = None,
    ) -> _A:  # fmt: skip
        """``MyAlgorithm.load("runs/x")``: :func:`agilerl.load`, checking the agent is a ``cls``."""
        agent = load(path, device=device, member=member, trust=trust, manifest=manifest)
        if not isinstance(agent, cls):
            raise AgileRLError(f"{path} holds a {type(agent).__name__}, not a {cls.__name__}")
        return agent
