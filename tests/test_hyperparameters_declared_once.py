"""Invariant 11 of DESIGN.md: a hyperparameter is declared once, typed, on its spec, with its
mutation range as field metadata (``Mutable``); algorithms read the spec; nothing copies fields
by reflection.

Walks every algorithm registered through the entry points (all plugins installed) plus the
repository's example plugins (the tutorial's A2C, the example's UCB1) from their sources when they
are not installed, and each one's algorithm class with every class it inherits from.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import agilerl.algorithm
from agilerl.algorithm import AlgorithmBase
from agilerl.imports import import_object
from agilerl.models import AlgorithmSpec, Mutable
from agilerl.registry import MANIFEST_REGISTRY, resolve

ROOT = Path(__file__).resolve().parents[1]
#: The repository's example plugins, walked from their sources when they are not installed.
EXAMPLES = {
    "UCB1": ("examples/plugins/agilerl-plugin-example/src", "agilerl_plugin_example.specs:UCB1Spec",
             "agilerl_plugin_example.ucb:UCB1"),
    "A2C": ("examples/plugins/agilerl-tutorial-a2c/src", "agilerl_tutorial_a2c.specs:A2CSpec",
            "agilerl_tutorial_a2c.a2c:A2C"),
}  # fmt: skip
#: The class variables that used to hold a second declaration of a hyperparameter.
RETIRED = ("hpo_ranges", "integer_hyperparameters")


def _registered() -> list[tuple[str, type[AlgorithmSpec], type]]:
    out = []
    for name, spec in MANIFEST_REGISTRY.items():
        algorithm = MANIFEST_REGISTRY.entry(name).extra.get("algorithm")
        if algorithm is not None:
            out.append((name, spec, resolve(algorithm, name)))
    for name, (src, spec_path, algorithm_path) in EXAMPLES.items():
        if name in {n for n, _, _ in out}:
            continue
        sys.path.insert(0, str(ROOT / src))
        try:
            out.append((name, import_object(spec_path), import_object(algorithm_path)))
        finally:
            sys.path.remove(str(ROOT / src))
    return out


ALGORITHMS = _registered()


def _own_classes(cls: type) -> list[type]:
    """``cls`` and the classes it inherits from that a plugin (or the tutorials) wrote."""
    skip = ("builtins", "typing", "abc", "torch")
    return [k for k in cls.__mro__ if k.__module__.split(".")[0] not in skip and k is not AlgorithmBase]


def _self_assignments(cls: type, names: set[str]) -> list[str]:
    """``self.<name> = ...`` (or ``+=``, annotated) in the class's own source, for spec field names."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            elts = target.elts if isinstance(target, ast.Tuple) else [target]
            for t in elts:
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and t.attr in names
                ):
                    found.append(f"{cls.__qualname__}: self.{t.attr} = ... (line {node.lineno} of the class)")
    return found


def test_the_walk_sees_every_paradigm() -> None:
    names = {n for n, _, _ in ALGORITHMS}
    assert {"PPO", "DQN", "TD3", "IPPO", "MADDPG", "GRPO", "SFT", "NeuralUCB", "A2C"} <= names, names


@pytest.mark.parametrize(("name", "spec", "algorithm"), ALGORITHMS, ids=[n for n, _, _ in ALGORITHMS])
def test_each_hyperparameter_is_declared_once_on_the_spec(
    name: str, spec: type[AlgorithmSpec], algorithm: type
) -> None:
    # No second table of ranges or integer flags beside the fields.
    for klass in spec.__mro__:
        for retired in RETIRED:
            assert retired not in vars(klass), f"{klass.__qualname__}.{retired}: use Mutable field metadata"
    # The mutation ranges are the fields' metadata, and name fields.
    ranges = spec.mutable_ranges()
    for field, mutable in ranges.items():
        assert isinstance(mutable, Mutable) and field in spec.model_fields
        assert mutable.low <= mutable.high
    for field in spec.default_mutable:
        assert field in ranges, f"{name}: default_mutable {field!r} has no Mutable range on its field"
    # The algorithm (and every class it inherits) declares none of the spec's fields again.
    fields = set(spec.model_fields)
    for klass in _own_classes(algorithm):
        for retired in RETIRED:
            assert retired not in vars(klass), f"{klass.__qualname__}.{retired}: use Mutable field metadata"
        # (A method may share a field's name, e.g. LLMAlgorithm.activation_offload(); a property may not.)
        attributes = {k for k, v in vars(klass).items() if not inspect.isfunction(v)}
        again = (set(vars(klass).get("__annotations__", {})) | attributes) & fields
        assert not again, f"{klass.__qualname__} re-declares spec fields {sorted(again)}: read self.spec.<field>"
        assert not _self_assignments(klass, fields), _self_assignments(klass, fields)


def test_a_hyperparameter_passed_between_methods_keeps_its_name() -> None:
    """GRPO's ``group_size`` used to travel as ``repeats`` and back (issue 33 point 1): every rollout
    algorithm's ``advantages`` takes it under the spec field's name."""
    overrides = [
        (name, klass)
        for name, spec, algorithm in ALGORITHMS
        if "group_size" in spec.model_fields
        for klass in _own_classes(algorithm)
        if "advantages" in vars(klass)
    ]
    assert {"GRPO", "RLOO"} <= {n for n, _ in overrides}, overrides
    for name, klass in overrides:
        params = list(inspect.signature(vars(klass)["advantages"]).parameters)
        assert "group_size" in params, f"{name}: {klass.__qualname__}.advantages{params} renames group_size"


def test_algorithm_base_sets_no_hyperparameter_by_reflection() -> None:
    tree = ast.parse(inspect.getsource(agilerl.algorithm))
    calls = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and (node.func.id == "setattr" or (node.func.id in ("getattr", "hasattr") and ast.unparse(node.args[0]) == "self"))
    ]  # fmt: skip
    assert calls == [], f"agilerl/algorithm.py reads or writes attributes of the algorithm by name at lines {calls}"
    assert "batch_size" not in AlgorithmSpec.model_fields  # a paradigm's field: its spec bases declare it


def test_mutation_makes_a_new_spec_and_one_hook_applies_it() -> None:
    from typing import Annotated, ClassVar

    from pydantic import Field

    class ToySpec(AlgorithmSpec):
        default_mutable: ClassVar[tuple[str, ...]] = ("lr",)
        lr: Annotated[float, Field(gt=0), Mutable(1e-4, 1e-2)] = 1e-3
        epochs: Annotated[int, Field(ge=1), Mutable(1, 8)] = 2

    class Toy(AlgorithmBase[ToySpec]):
        def __init__(self) -> None:
            super().__init__(ToySpec())
            self.seen: list[tuple[Any, frozenset[str]]] = []

        def on_spec_change(self, old: ToySpec, changed: frozenset[str]) -> None:
            self.seen.append((old.lr, changed))

    agent = Toy()
    first = agent.spec
    agent.set_hyperparameter("lr", 5e-3)
    assert agent.spec is not first and first.lr == 1e-3 and agent.spec.lr == 5e-3
    assert agent.seen == [(1e-3, frozenset({"lr"}))]
    agent.set_hyperparameter("epochs", 3.6)  # int fields stay whole numbers
    assert agent.spec.epochs == 4 and agent.get_hyperparameter("epochs") == 4
    agent.set_hyperparameter("epochs", 4)  # unchanged: no hook
    assert len(agent.seen) == 2
    assert "lr" not in vars(agent) and "epochs" not in vars(agent)
    # A checkpoint carries the values and applies them through the spec.
    state = agent.state_dict()
    assert state["hyperparameters"] == {"lr": 5e-3, "epochs": 4}
    fresh = Toy()
    fresh.load_state_dict({**state, "hyperparameters": {**state["hyperparameters"], "retired_field": 1}})
    assert (fresh.spec.lr, fresh.spec.epochs) == (5e-3, 4) and fresh.seen == [(1e-3, frozenset({"lr", "epochs"}))]
    with pytest.raises(KeyError):
        agent.set_hyperparameter("no_such_field", 1.0)
    assert ToySpec.mutable_ranges() == {"lr": Mutable(1e-4, 1e-2), "epochs": Mutable(1, 8)}


def test_the_retired_declarations_fail_where_they_are_written_and_name_the_fix() -> None:
    from typing import ClassVar

    with pytest.raises(TypeError, match=r"hpo_ranges is retired.*Mutable"):

        class OldSpec(AlgorithmSpec):
            hpo_ranges: ClassVar[dict[str, tuple[float, float]]] = {"lr": (1e-4, 1e-2)}
            lr: float = 1e-3

    with pytest.raises(TypeError, match=r"_on_hyperparameter_change.*on_spec_change"):

        class OldHook(AlgorithmBase[AlgorithmSpec]):
            def _on_hyperparameter_change(self, name: str, old: Any, new: Any) -> None: ...

    with pytest.raises(TypeError, match=r"integer_hyperparameters is retired"):

        class OldIntegers(AlgorithmBase[AlgorithmSpec]):
            integer_hyperparameters: ClassVar[frozenset[str]] = frozenset({"lr"})

    class Spec(AlgorithmSpec):
        lr: float = 1e-3

    agent = AlgorithmBase(Spec())
    with pytest.raises(AttributeError, match=r"self\.spec\.lr"):
        _ = agent.lr  # type: ignore[attr-defined]
    assert getattr(agent, "lr", None) is None and not hasattr(agent, "nothing")
