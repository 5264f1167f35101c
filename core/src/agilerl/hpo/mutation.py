"""Mutation operators, chosen per agent from the normalised ``mutation.probabilities``.

Hyperparameter mutation is done here, generically, through ``get_hyperparameter`` /
``set_hyperparameter``. Architecture, parameter and activation mutation are the algorithm's own
(``mutate_architecture``, ``mutate_parameters``, ``mutate_activation``); an algorithm without one
gets no mutation for that draw, labelled so in the log. Operators the algorithm's spec does not
list in ``supported_mutations`` are refused with a clear error (and the spec's ``unsupported_mutation_reason``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from annotated_types import Ge, Gt, Le, Lt

from agilerl.errors import AgileRLError
from agilerl.models.base import AlgorithmSpec
from agilerl.models.sections import MutationSpec, unsupported_operators_message

#: What each operator does, for error messages.


class UnsupportedMutationError(AgileRLError):
    """A mutation operator was asked for that the algorithm cannot apply."""


@dataclass(frozen=True)
class HPRange:
    min: float
    max: float
    grow_factor: float = 1.2
    shrink_factor: float = 0.8


def resolve_hp_ranges(spec: AlgorithmSpec, mutation: MutationSpec) -> dict[str, HPRange]:
    """Mutable hyperparameters and their ranges: the manifest's ``rl_hp_selection`` if given,
    else the spec's ``default_mutable`` with ranges from their fields' :class:`~agilerl.models.Mutable`
    metadata (a default-mutable field without one: a decade either side of its value)."""
    if mutation.rl_hp_selection:
        return {k: HPRange(v.min, v.max, v.grow_factor, v.shrink_factor) for k, v in mutation.rl_hp_selection.items()}
    ranges = type(spec).mutable_ranges()
    values = spec.hyperparameters()
    out: dict[str, HPRange] = {}
    for name in type(spec).default_mutable:
        if name in ranges:
            lo, hi = ranges[name].low, ranges[name].high
        elif name in values:
            v = float(values[name])
            lo, hi = (v / 10, v * 10) if v > 0 else (v * 10, v / 10)
        else:
            continue
        out[name] = HPRange(float(lo), float(hi))
    return out


def field_bounds(spec: AlgorithmSpec, name: str) -> tuple[float | None, bool, float | None, bool]:
    """``(low, low_inclusive, high, high_inclusive)`` from the spec field's ``ge/gt/le/lt``."""
    lo: float | None = None
    hi: float | None = None
    lo_inc = hi_inc = True
    field = type(spec).model_fields.get(name)
    for meta in field.metadata if field is not None else ():
        if isinstance(meta, Ge):
            lo, lo_inc = float(meta.ge), True  # type: ignore[arg-type]
        elif isinstance(meta, Gt):
            lo, lo_inc = float(meta.gt), False  # type: ignore[arg-type]
        elif isinstance(meta, Le):
            hi, hi_inc = float(meta.le), True  # type: ignore[arg-type]
        elif isinstance(meta, Lt):
            hi, hi_inc = float(meta.lt), False  # type: ignore[arg-type]
    return lo, lo_inc, hi, hi_inc


class Mutations:
    """Applies one sampled mutation operator to each agent and records it in ``agent.mut``."""

    def __init__(self, spec: MutationSpec, algo_spec: AlgorithmSpec, *, rng: random.Random | None = None) -> None:
        self.spec = spec
        self.algo_spec = algo_spec
        self.rng = rng or random.Random(spec.rand_seed)
        self.hp_ranges = resolve_hp_ranges(algo_spec, spec)
        weights = spec.probabilities.operator_weights()
        supported = type(algo_spec).supported_mutations
        refused = [op for op, w in weights.items() if w > 0 and op not in supported]
        if refused:
            message = unsupported_operators_message(
                algo_spec.name, refused, type(algo_spec).unsupported_mutation_reason
            )
            raise UnsupportedMutationError(f"mutation.probabilities: {message}")
        total = sum(weights.values())
        if total <= 0:
            weights, total = {"no_mut": 1.0}, 1.0
        self.operators = [k for k, w in weights.items() if w > 0]
        self.weights = [weights[k] / total for k in self.operators]

    def mutate(self, population: list[Any], *, skip: set[int] | None = None) -> list[Any]:
        """Mutate agents in place (those whose position is in ``skip`` are left as they are)."""
        for pos, agent in enumerate(population):
            if skip and pos in skip:
                agent.mut = "None"
                continue
            op = self.rng.choices(self.operators, weights=self.weights, k=1)[0]
            agent.mut = self.apply(agent, op)
        return population

    def apply(self, agent: Any, op: str) -> str:
        """Apply operator ``op`` to ``agent``; return the label stored in ``agent.mut``."""
        if op == "no_mut":
            return "None"
        if op == "rl_hp_mut":
            return self.mutate_hyperparameter(agent)
        if op == "arch_mut":
            fn = getattr(agent, "mutate_architecture", None)
            label = fn(self.rng, new_layer_prob=self.spec.probabilities.new_layer) if fn else None
            return label or ("None(arch unchanged)" if fn else "None(arch unsupported)")
        if op == "params_mut":
            fn = getattr(agent, "mutate_parameters", None)
            label = fn(self.rng, sd=self.spec.mutation_sd) if fn else None
            return label or ("None(params unchanged)" if fn else "None(params unsupported)")
        if op == "act_mut":
            fn = getattr(agent, "mutate_activation", None)
            label = fn(self.rng, choices=list(self.spec.activation_selection)) if fn else None
            return label or ("None(act unchanged)" if fn else "None(act unsupported)")
        raise ValueError(f"unknown mutation operator {op!r}")

    def new_value(self, agent: Any, name: str, *, grow: bool) -> float | int:
        """The value ``name`` takes when grown (or shrunk): the current value times the factor,
        clipped to the range and to the spec field's own bounds. Integers (batch sizes, learn
        steps, epochs) move by at least 1 so they can leave small values (``round(1 * 1.2) == 1``)
        and never drop below 1 unless the range allows it."""
        r = self.hp_ranges[name]
        current = agent.get_hyperparameter(name)
        factor = r.grow_factor if grow else r.shrink_factor
        f_lo, lo_inc, f_hi, hi_inc = field_bounds(self.algo_spec, name)
        integer = name in self.algo_spec.integer_fields()
        is_int = (isinstance(current, int) and not isinstance(current, bool)) or integer
        if is_int:
            cur = round(current)
            lo = math.ceil(r.min)
            hi = math.floor(r.max)
            if f_lo is not None:
                lo = max(lo, math.ceil(f_lo) if lo_inc else math.floor(f_lo) + 1)
            elif integer:
                lo = max(lo, 1)
            if f_hi is not None:
                hi = min(hi, math.floor(f_hi) if hi_inc else math.ceil(f_hi) - 1)
            value = round(cur * factor)
            if grow and value <= cur:
                value = cur + 1
            elif not grow and value >= cur:
                value = cur - 1
            return int(min(max(value, lo), max(hi, lo)))
        cur_f = float(current)
        value_f = min(max(cur_f * factor, r.min), r.max)
        # The range may be wider than the field allows (a discount factor up to 1.2, say): stay valid.
        if f_lo is not None and (value_f < f_lo or (not lo_inc and value_f <= f_lo)):
            value_f = f_lo if lo_inc else cur_f
        if f_hi is not None and (value_f > f_hi or (not hi_inc and value_f >= f_hi)):
            value_f = f_hi if hi_inc else cur_f
        return value_f

    def mutate_hyperparameter(self, agent: Any) -> str:
        """Grow or shrink one hyperparameter (chosen uniformly) with probability 1/2 each."""
        if not self.hp_ranges:
            return "None(no hyperparameters)"
        name = self.rng.choice(sorted(self.hp_ranges))
        grow = self.rng.random() < 0.5
        agent.set_hyperparameter(name, self.new_value(agent, name, grow=grow))
        return name
