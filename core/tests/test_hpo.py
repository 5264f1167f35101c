"""Tournament selection and mutation operators (unit level, through the protocol)."""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar

import pytest
from pydantic import Field

from agilerl.algorithm import AlgorithmBase
from agilerl.hpo import Mutations, TournamentSelection, resolve_hp_ranges
from agilerl.hpo.mutation import UnsupportedMutationError
from agilerl.models import AlgorithmSpec, Mutable, MutationSpec


class ToySpec(AlgorithmSpec):
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size")
    lr: Annotated[float, Field(gt=0), Mutable(1e-4, 1e-2)] = 1e-3
    batch_size: Annotated[int, Field(ge=1), Mutable(8, 64)] = 32
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.99
    update_epochs: int = 1


class Toy(AlgorithmBase[ToySpec]):
    def __init__(self, index: int, fitness: float) -> None:
        super().__init__(ToySpec(), index=index)
        self.fitness = [fitness]
        self.optimizer_rebuilds = 0

    def on_spec_change(self, old: ToySpec, changed: frozenset[str]) -> None:
        if "lr" in changed:
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
        assert 5e-4 <= agent.spec.lr <= 2e-3
        assert isinstance(agent.spec.batch_size, int) and 16 <= agent.spec.batch_size <= 48
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


def hp_only(selection: dict[str, Any]) -> MutationSpec:
    return MutationSpec.model_validate(
        {"probabilities": {"no_mut": 0, "arch_mut": 0, "params_mut": 0, "rl_hp_mut": 1}, "rl_hp_selection": selection}
    )


def test_integer_hyperparameters_grow_and_shrink_by_at_least_one() -> None:
    # round(1 * 1.2) == 1: a plain multiply would never let update_epochs leave 1.
    muts = Mutations(hp_only({"update_epochs": {"min": 1, "max": 4}}), ToySpec(), rng=random.Random(0))
    agent = Toy(0, 1.0)
    seen = []
    for _ in range(100):
        muts.mutate([agent])
        assert agent.mut == "update_epochs"
        assert isinstance(agent.spec.update_epochs, int) and 1 <= agent.spec.update_epochs <= 4
        seen.append(agent.spec.update_epochs)
    assert set(seen) == {1, 2, 3, 4}
    assert muts.new_value(Toy(0, 1.0), "update_epochs", grow=True) == 2
    assert muts.new_value(Toy(0, 1.0), "update_epochs", grow=False) == 1  # never below the range


def test_batch_sizes_stay_valid_integers_even_when_the_range_reaches_zero() -> None:
    # batch_size's field says >= 1: a range going lower must not produce a 0 batch.
    muts = Mutations(hp_only({"batch_size": {"min": 0, "max": 3, "shrink_factor": 0.1}}), ToySpec())
    agent = Toy(0, 1.0)
    agent.set_hyperparameter("batch_size", 2)
    assert muts.new_value(agent, "batch_size", grow=False) == 1
    agent.set_hyperparameter("batch_size", 1)
    assert muts.new_value(agent, "batch_size", grow=False) == 1


def test_floats_stay_inside_the_field_bounds_when_the_range_is_wider() -> None:
    muts = Mutations(hp_only({"gamma": {"min": 0.5, "max": 1.5, "grow_factor": 1.3}}), ToySpec())
    agent = Toy(0, 1.0)
    assert muts.new_value(agent, "gamma", grow=True) == 1.0  # gamma: le=1
    assert muts.new_value(agent, "gamma", grow=False) == pytest.approx(0.99 * 0.8)


def test_mutate_elite_false_leaves_the_first_slot_alone() -> None:
    muts = Mutations(hp_only({"lr": {"min": 1e-5, "max": 1.0}}), ToySpec(), rng=random.Random(0))
    pop = population()
    muts.mutate(pop, skip={0})
    assert pop[0].spec.lr == 1e-3 and pop[0].mut == "None"
    assert all(a.mut == "lr" and a.spec.lr != 1e-3 for a in pop[1:])


def test_selection_records_parents_for_the_log() -> None:
    pop = population()
    sel = TournamentSelection(2, elitism=True, rng=random.Random(0))
    _, new = sel.select(pop)
    assert len(sel.parents) == len(new) and sel.parents[0] == 1
    by_index = {a.index: a for a in pop}
    # every offspring is a copy of the parent it is logged with
    assert all(by_index[p].fitness == child.fitness for p, child in zip(sel.parents, new, strict=True))


class HpOnlySpec(AlgorithmSpec):
    """A family that, like LLM fine-tuning, supports hyperparameter mutation only."""

    supported_mutations: ClassVar[frozenset[str]] = frozenset({"no_mut", "rl_hp_mut"})
    unsupported_mutation_reason: ClassVar[str] = "hyperparameter mutation only: the weights are pretrained"
    lr: float = 1e-5


def test_hp_only_algorithms_refuse_architecture_and_parameter_mutation_clearly() -> None:
    spec = MutationSpec.model_validate({"probabilities": {"no_mut": 0.5, "arch_mut": 0.2, "params_mut": 0.3}})
    with pytest.raises(UnsupportedMutationError) as info:
        Mutations(spec, HpOnlySpec())
    msg = str(info.value)
    assert "architecture mutation (arch_mut)" in msg and "parameter mutation (params_mut)" in msg
    assert "hyperparameter mutation only" in msg and "set arch_mut: 0, params_mut: 0" in msg
    ok = MutationSpec.model_validate(
        {"probabilities": {"no_mut": 0, "arch_mut": 0, "params_mut": 0, "rl_hp_mut": 1},
         "rl_hp_selection": {"lr": {"min": 1e-6, "max": 1e-4}}}
    )  # fmt: skip
    assert Mutations(ok, HpOnlySpec()).operators == ["rl_hp_mut"]


class Recorder(Toy):
    """A toy agent with every optional operator; it records what the core passed to each."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(index, 1.0)
        self.calls: list[tuple[str, Any]] = []

    def mutate_architecture(self, rng: random.Random, *, new_layer_prob: float) -> str | None:
        self.calls.append(("arch_mut", new_layer_prob))
        return "arch:x"

    def mutate_parameters(self, rng: random.Random, *, sd: float) -> str | None:
        self.calls.append(("params_mut", sd))
        return "param"

    def mutate_activation(self, rng: random.Random, *, choices: list[str]) -> str | None:
        self.calls.append(("act_mut", tuple(choices)))
        return f"act:{choices[0]}"


OPERATORS = ("no_mut", "arch_mut", "params_mut", "act_mut", "rl_hp_mut")


def _drawn(probabilities: dict[str, float], n: int = 400, **fields: Any) -> list[str]:
    spec = MutationSpec.model_validate({"probabilities": probabilities, **fields})
    muts = Mutations(spec, ToySpec(), rng=random.Random(0))
    agent = Recorder()
    out = []
    for _ in range(n):
        agent.calls.clear()
        muts.mutate([agent])
        out.append(
            agent.calls[0][0] if agent.calls else ("rl_hp_mut" if agent.mut in ("lr", "batch_size") else "no_mut")
        )
    return out


@pytest.mark.parametrize("off", OPERATORS)
def test_an_operator_with_probability_zero_is_never_drawn(off: str) -> None:
    drawn = _drawn({op: (0.0 if op == off else 1.0) for op in OPERATORS})
    assert off not in drawn
    assert set(drawn) == set(OPERATORS) - {off}


def test_operators_are_drawn_in_proportion_to_their_weights() -> None:
    drawn = _drawn({"no_mut": 0, "arch_mut": 3, "params_mut": 0, "act_mut": 1, "rl_hp_mut": 0}, n=2000)
    assert set(drawn) == {"arch_mut", "act_mut"}
    assert 0.70 < drawn.count("arch_mut") / len(drawn) < 0.80


def test_new_layer_mutation_sd_and_activation_selection_reach_the_operators() -> None:
    spec = MutationSpec.model_validate({
        "probabilities": {"no_mut": 0, "arch_mut": 1, "new_layer": 0.7, "params_mut": 1, "act_mut": 1, "rl_hp_mut": 0},
        "mutation_sd": 0.25, "activation_selection": ["Tanh", "ELU"],
    })  # fmt: skip
    muts = Mutations(spec, ToySpec(), rng=random.Random(0))
    agent = Recorder()
    for _ in range(30):
        muts.mutate([agent])
    assert set(agent.calls) == {("arch_mut", 0.7), ("params_mut", 0.25), ("act_mut", ("Tanh", "ELU"))}


def test_rand_seed_makes_the_draws_repeatable_and_different_seeds_differ() -> None:
    probabilities = {"no_mut": 1, "arch_mut": 1, "params_mut": 1, "act_mut": 1, "rl_hp_mut": 1}

    def labels(seed: int) -> list[str]:
        spec = MutationSpec.model_validate({"probabilities": probabilities, "rand_seed": seed})
        muts = Mutations(spec, ToySpec())  # no rng given: the spec's rand_seed seeds it
        pop = [Recorder(i) for i in range(4)]
        out = []
        for _ in range(10):
            muts.mutate(pop)
            out += [a.mut for a in pop]
        return out

    assert labels(1) == labels(1)
    assert labels(1) != labels(2)
