"""The algorithm protocol the core relies on.

Everything the evolutionary loop does to an agent goes through these members, so a third-party
algorithm that implements them gets populations, tournament selection, hyperparameter mutation,
checkpoints and resume for free. :class:`agilerl.algorithm.AlgorithmBase` implements the
bookkeeping; a plugin's algorithm usually subclasses it.

Required (:class:`EvolvableAlgorithm`):

``index``
    integer identity in the population; selection gives offspring fresh indices.
``fitness``
    evaluation scores, one appended per evaluation; selection reads the last.
``steps``
    env steps (or the paradigm's unit of experience) this agent has trained on.
``mut``
    label of the last mutation applied (``"None"``, a hyperparameter name, ``"arch:..."``).
``clone(index=None)``
    an independent deep copy (weights, optimizer state, hyperparameters, history).
``get_hyperparameter(name)`` / ``set_hyperparameter(name, value)``
    read and change a mutable hyperparameter; setting a learning rate rebuilds the optimizer.
``state_dict()`` / ``load_state_dict(state)``
    everything needed to resume; values must be tensors, numbers, strings, bools, None, and
    lists/tuples/dicts of those, so checkpoints load with ``torch.load(weights_only=True)``.
``test(env, *, max_steps=None, loop=1, seed=None)``
    mean return (or the paradigm's score) over ``loop`` evaluation episodes; with ``seed`` the
    evaluation env is reset with it (round ``i``: ``seed + i``), so evaluations are reproducible
    and a resumed run evaluates exactly as the uninterrupted one.

Optional (checked with ``hasattr``; the mutation operator is skipped with a log note if absent):

``mutate_architecture(rng, *, new_layer_prob)`` -> label or None
``mutate_parameters(rng, *, sd)`` -> label or None
``mutate_activation(rng, *, choices)`` -> label or None
"""

from __future__ import annotations

import random
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class EvolvableAlgorithm(Protocol):
    index: int
    fitness: list[float]
    steps: int
    mut: str | None

    def clone(self, index: int | None = None) -> EvolvableAlgorithm: ...

    def get_hyperparameter(self, name: str) -> float: ...

    def set_hyperparameter(self, name: str, value: float) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float: ...


@runtime_checkable
class ArchitectureMutable(Protocol):
    def mutate_architecture(self, rng: random.Random, *, new_layer_prob: float) -> str | None: ...


@runtime_checkable
class ParameterMutable(Protocol):
    def mutate_parameters(self, rng: random.Random, *, sd: float) -> str | None: ...


@runtime_checkable
class ActivationMutable(Protocol):
    def mutate_activation(self, rng: random.Random, *, choices: list[str]) -> str | None: ...
