"""Mutation operators, chosen per agent from the normalised ``mutation.probabilities``.

Hyperparameter mutation is done here, generically, through ``get_hyperparameter`` /
``set_hyperparameter``. Architecture, parameter and activation mutation are the algorithm's own
(``mutate_architecture``, ``mutate_parameters``, ``mutate_activation``); an algorithm without one
gets no mutation for that draw, labelled so in the log.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from agilerl.models.base import AlgorithmSpec
from agilerl.models.sections import MutationSpec


@dataclass(frozen=True)
class HPRange:
    min: float
    max: float
    grow_factor: float = 1.2
    shrink_factor: float = 0.8


def resolve_hp_ranges(spec: AlgorithmSpec, mutation: MutationSpec) -> dict[str, HPRange]:
    """Mutable hyperparameters and their ranges: the manifest's ``rl_hp_selection`` if given,
    else the spec's ``default_mutable`` with ranges from ``hpo_ranges``."""
    if mutation.rl_hp_selection:
        return {k: HPRange(v.min, v.max, v.grow_factor, v.shrink_factor) for k, v in mutation.rl_hp_selection.items()}
    ranges = type(spec).hpo_ranges
    values = spec.hyperparameters()
    out: dict[str, HPRange] = {}
    for name in type(spec).default_mutable:
        if name in ranges:
            lo, hi = ranges[name]
        elif name in values:
            v = float(values[name])
            lo, hi = (v / 10, v * 10) if v > 0 else (v * 10, v / 10)
        else:
            continue
        out[name] = HPRange(float(lo), float(hi))
    return out


class Mutations:
    """Applies one sampled mutation operator to each agent."""

    def __init__(self, spec: MutationSpec, algo_spec: AlgorithmSpec, *, rng: random.Random | None = None) -> None:
        self.spec = spec
        self.rng = rng or random.Random(spec.rand_seed)
        self.hp_ranges = resolve_hp_ranges(algo_spec, spec)
        weights = spec.probabilities.operator_weights()
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
        if op == "no_mut":
            return "None"
        if op == "rl_hp_mut":
            return self.mutate_hyperparameter(agent)
        if op == "arch_mut":
            fn = getattr(agent, "mutate_architecture", None)
            label = fn(self.rng, new_layer_prob=self.spec.probabilities.new_layer) if fn else None
            return label or "None(arch unsupported)"
        if op == "params_mut":
            fn = getattr(agent, "mutate_parameters", None)
            label = fn(self.rng, sd=self.spec.mutation_sd) if fn else None
            return label or "None(params unsupported)"
        if op == "act_mut":
            fn = getattr(agent, "mutate_activation", None)
            label = fn(self.rng, choices=list(self.spec.activation_selection)) if fn else None
            return label or "None(act unsupported)"
        raise ValueError(f"unknown mutation operator {op!r}")

    def mutate_hyperparameter(self, agent: Any) -> str:
        if not self.hp_ranges:
            return "None(no hyperparameters)"
        name = self.rng.choice(sorted(self.hp_ranges))
        r = self.hp_ranges[name]
        current = float(agent.get_hyperparameter(name))
        factor = r.grow_factor if self.rng.random() < 0.5 else r.shrink_factor
        value = min(max(current * factor, r.min), r.max)
        if isinstance(agent.get_hyperparameter(name), int) and not isinstance(agent.get_hyperparameter(name), bool):
            value = round(value)
            value = int(min(max(value, int(r.min) if r.min >= 1 else 1), r.max))
        agent.set_hyperparameter(name, value)
        return name
