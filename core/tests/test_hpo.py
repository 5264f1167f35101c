"""Tournament selection and mutation operators (unit level, through the protocol)."""

from __future__ import annotations

import random
from typing import Any, ClassVar

from agilerl.algorithm import AlgorithmBase
from agilerl.hpo import Mutations, TournamentSelection, resolve_hp_ranges
from agilerl.models import AlgorithmSpec, MutationSpec


class ToySpec(AlgorithmSpec):
    hpo_ranges: ClassVar[dict[str, tuple[float, float]]] = {"lr": (1e-4, 1e-2), "batch_size": (8, 64)}
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size")
    lr: float = 1e-3
    batch_size: int = 32


class Toy(AlgorithmBase):
    def __init__(self, index: int, fitness: float) -> None:
        super().__init__(ToySpec(), index=index)
        self.fitness = [fitness]
        self.optimizer_rebuilds = 0

    def _on_hyperparameter_change(self, name: str, old: Any, new: Any) -> None:
        if name == "lr":
            self.optimizer_rebuilds += 1


def population() -> list[Toy]:
    return [Toy(i, f) for i, f in enumerate([1.0, 5.0, 3.0, 2.0])]


def test_tournament_keeps_a_clone_of_the_elite_and_gives_offspring_fresh_indices() -> None:
    pop = population()
    elite, new = TournamentSelection(2, elitism=True, rng=random.Random(0)).select(pop)
    assert elite is pop[1]
    assert new[0].index == 1 and new[0] is not pop[1] and new[0].fitness == [5.0]
    assert [a.index for a in new[1:]] == [4, 5, 6]
    assert len(new) == len(pop)
    assert all(a not in pop for a in new)


def test_tournament_is_seeded_and_prefers_fitter_agents() -> None:
    def winners(seed: int) -> list[float]:
        _, new = TournamentSelection(3, elitism=False, rng=random.Random(seed)).select(population())
        return [a.fitness[-1] for a in new]

    assert winners(1) == winners(1)
    many = [f for s in range(50) for f in winners(s)]
    assert sum(many) / len(many) > sum(a.fitness[-1] for a in population()) / 4


def test_unevaluated_or_nan_agents_rank_last() -> None:
    pop = population()
    pop[1].fitness = [float("nan")]
    elite, _ = TournamentSelection(2, rng=random.Random(0)).select(pop)
    assert elite is pop[2]


def test_hyperparameter_mutation_respects_ranges_types_and_rebuilds_optimizers() -> None:
    spec = MutationSpec.model_validate(
        {"probabilities": {"no_mut": 0, "arch_mut": 0, "params_mut": 0, "rl_hp_mut": 1},
         "rl_hp_selection": {"lr": {"min": 5e-4, "max": 2e-3}, "batch_size": {"min": 16, "max": 48}}}
    )  # fmt: skip
    muts = Mutations(spec, ToySpec(), rng=random.Random(0))
    agent = Toy(0, 1.0)
    labels = set()
    for _ in range(200):
        muts.mutate([agent])
        labels.add(agent.mut)
        assert 5e-4 <= agent.lr <= 2e-3
        assert isinstance(agent.batch_size, int) and 16 <= agent.batch_size <= 48
    assert labels == {"lr", "batch_size"}
    assert agent.optimizer_rebuilds > 0


def test_default_ranges_come_from_the_spec() -> None:
    ranges = resolve_hp_ranges(ToySpec(), MutationSpec())
    assert (ranges["lr"].min, ranges["lr"].max) == (1e-4, 1e-2)
    assert set(ranges) == {"lr", "batch_size"}


def test_unsupported_operators_fall_back_to_no_mutation_with_a_label() -> None:
    spec = MutationSpec.model_validate({"probabilities": {"no_mut": 0, "arch_mut": 1, "params_mut": 0, "rl_hp_mut": 0}})
    agent = Toy(0, 1.0)
    Mutations(spec, ToySpec(), rng=random.Random(0)).mutate([agent])
    assert agent.mut == "None(arch unsupported)"
