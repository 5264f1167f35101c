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

Paradigm protocols (a plugin's strategy <-> algorithm contract, such as a paradigm plugin's
on-policy protocol) are :class:`VersionedProtocol` objects: a strategy names the one it needs in
``TrainingStrategy.algorithm_protocol``, an algorithm class may declare the version it was written
for as ``protocol_version``, and :func:`check_algorithm_class` (run by ``agilerl validate`` and
before a run builds anything) names every method the class lacks and what changed since the
version it declares.

Optional (checked with ``hasattr``; the mutation operator is skipped with a log note if absent):

``mutate_architecture(rng, *, new_layer_prob)`` -> label or None
``mutate_parameters(rng, *, sd)`` -> label or None
``mutate_activation(rng, *, choices)`` -> label or None
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agilerl.errors import PluginError


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


# --------------------------------------------------------------------------------------------------
# Versioned paradigm protocols
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionedProtocol:
    """A strategy <-> algorithm protocol with a version and a history that plugins can check against.

    :param title: how messages name it ("<paradigm> on-policy").
    :param protocol: the :class:`typing.Protocol` class; its methods are what is checked.
    :param version: the version this installed package speaks.
    :param history: version -> what that version changed (the first entry: what version 1 is).
    :param docs: where the protocol and its history are documented.
    """

    title: str
    protocol: type
    version: int
    history: Mapping[int, str] = field(default_factory=dict)
    docs: str = ""

    @property
    def qualname(self) -> str:
        return f"{self.protocol.__module__}.{self.protocol.__qualname__}"


def protocol_methods(protocol: type) -> list[str]:
    """The methods ``protocol`` (and the protocols it extends) declares, sorted."""
    names: set[str] = set()
    for base in protocol.__mro__:
        if base in (object, Protocol) or Protocol not in base.__bases__:  # a protocol names Protocol as a base
            continue
        names |= {n for n, v in vars(base).items() if not n.startswith("_") and callable(v)}
    return sorted(names)


def missing_methods(cls: type, protocol: type) -> list[str]:
    """The methods of ``protocol`` that ``cls`` does not define (data members cannot be checked on a class)."""
    return [name for name in protocol_methods(protocol) if not callable(getattr(cls, name, None))]


def check_algorithm_class(cls: type, expected: VersionedProtocol, *, name: str) -> None:
    """Raise :class:`PluginError` if ``cls`` cannot serve ``expected``, naming what it lacks.

    ``cls.protocol_version`` (optional) is the version its author wrote it for: a newer one than
    installed asks for an upgrade; an older one is listed with what changed since.
    """
    where = f"{name} ({cls.__module__}.{cls.__qualname__})"
    declared = getattr(cls, "protocol_version", None)
    if isinstance(declared, int) and declared > expected.version:
        raise PluginError(
            f"{where} is written for version {declared} of the {expected.title} protocol, but the installed "
            f"plugin speaks version {expected.version}: upgrade the plugin that provides the "
            f"{expected.title} strategy (see {expected.docs or expected.qualname})."
        )
    missing = missing_methods(cls, expected.protocol)
    if not missing:
        return
    message = (
        f"{where} does not implement the {expected.title} protocol, version {expected.version} "
        f"({expected.qualname}): it lacks {', '.join(m + '()' for m in missing)}."
    )
    if isinstance(declared, int) and declared < expected.version:
        changes = "; ".join(f"version {v}: {expected.history[v]}" for v in sorted(expected.history) if v > declared)
        message += f" It declares protocol_version {declared}; changed since: {changes}."
    message += (
        f" Update the algorithm's package to version {expected.version} of the protocol"
        + (f" ({expected.docs})" if expected.docs else "")
        + ", or ask its author to."
    )
    raise PluginError(message)
