"""A base class with the protocol's bookkeeping, for algorithms that want it (no torch needed)."""

from __future__ import annotations

import copy
import os
from typing import Any, ClassVar, TypeVar

from agilerl.errors import AgileRLError
from agilerl.inference import load
from agilerl.models.base import AlgorithmSpec

_A = TypeVar("_A", bound="AlgorithmBase")


class AlgorithmBase:
    """Implements ``index``, ``fitness``, ``steps``, ``mut``, ``clone`` and hyperparameter access.

    Hyperparameters are attributes named like the spec's fields. Subclasses list the ones whose
    change needs work in ``_on_hyperparameter_change`` (e.g. rebuild an optimizer after a learning rate changed).
    Subclasses implement ``state_dict``/``load_state_dict`` for their own state and call
    ``super()`` to include the bookkeeping.
    """

    #: Hyperparameters that must stay integers (at least 1) when mutated, beyond the spec's
    #: ``int``-typed fields (which always do).
    integer_hyperparameters: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, spec: AlgorithmSpec, *, index: int = 0) -> None:
        self.spec = spec
        self.index = int(index)
        self.fitness: list[float] = []
        self.scores: list[float] = []
        self.steps = 0
        self.mut: str | None = "None"
        for name, value in spec.hyperparameters().items():
            setattr(self, name, value)

    # --- hyperparameters ---------------------------------------------------------------------
    def get_hyperparameter(self, name: str) -> float:
        if not hasattr(self, name):
            raise KeyError(f"{type(self).__name__} has no hyperparameter {name!r}")
        return getattr(self, name)  # type: ignore[no-any-return]

    def set_hyperparameter(self, name: str, value: float) -> None:
        if not hasattr(self, name):
            raise KeyError(f"{type(self).__name__} has no hyperparameter {name!r}")
        if name in self.integer_hyperparameters or name in self.spec.integer_fields():
            value = max(1, round(value))
        old = getattr(self, name)
        setattr(self, name, value)
        if old != value:
            self._on_hyperparameter_change(name, old, value)

    def _on_hyperparameter_change(self, name: str, old: Any, new: Any) -> None:
        """Hook for subclasses: e.g. rebuild the optimizer when a learning rate changed."""

    # --- population ----------------------------------------------------------------------------
    def clone(self, index: int | None = None) -> AlgorithmBase:
        twin = copy.deepcopy(self)
        if index is not None:
            twin.index = int(index)
        return twin

    # --- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        hps = {k: getattr(self, k) for k in self.spec.hyperparameters() if hasattr(self, k)}
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
        for k, v in state.get("hyperparameters", {}).items():
            old = getattr(self, k, None)
            setattr(self, k, v)
            if old != v:
                self._on_hyperparameter_change(k, old, v)

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
