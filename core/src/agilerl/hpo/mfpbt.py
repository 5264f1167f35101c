"""MF-PBT: multiple-frequencies population-based training (``selection_strategy.strategy:
multi_frequency``), after Doulazmi et al., "Multiple-Frequencies Population-Based Training" (2025).

The population is cut, in order, into ``n_subpopulations`` equal sub-populations; slot ``p``
belongs to sub-population ``p // size`` for the whole run (every replacement happens in place).
All members train every generation; sub-population ``i`` *evolves* only every
``evolution_frequency_ratios[i]`` generations, so fast sub-populations exploit greedily while slow
ones keep long-horizon candidates alive. When sub-population ``i`` evolves, its members, ranked by
their latest fitness, fall into four brackets:

* winners (``n_winners``): kept;
* survivors (``n_survivors``): kept;
* open for migration (``n_open_for_migration``): best first, each is replaced by the next best
  agent of the *other* sub-populations (ranked from a snapshot taken before this generation's
  evolution) when that agent is strictly fitter. A migrant from a faster sub-population brings its
  networks but takes the destination elite's mutable hyperparameters; one from a slower (or equal)
  sub-population comes whole;
* losers (``n_losers``): each replaced by a clone of a winner drawn uniformly.

Only the winner clones are mutated afterwards (:meth:`MultiFrequencySelection.mutation_skip`).
Counters, the draw stream and the next fresh index are in :meth:`state_dict`, so a resumed run
evolves as the uninterrupted one would.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from agilerl.hpo.selection import last_fitness

if TYPE_CHECKING:
    from agilerl.models.sections import MultiFrequencySelectionSpec


class MultiFrequencySelection:
    """The MF-PBT selection operator; drop-in for :class:`~agilerl.hpo.selection.TournamentSelection`
    in the evolutionary loop (``select``, ``parents``, plus ``mutation_skip`` and state)."""

    #: The loop's tournament elitism does not apply: brackets decide what is kept.
    elitism = False

    def __init__(
        self,
        pop_size: int,
        *,
        n_subpopulations: int,
        evolution_frequency_ratios: list[int],
        brackets: tuple[int, int, int, int],
        hp_names: list[str] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if pop_size % n_subpopulations:
            raise ValueError(f"pop_size {pop_size} is not a multiple of n_subpopulations {n_subpopulations}")
        if len(evolution_frequency_ratios) != n_subpopulations:
            raise ValueError("evolution_frequency_ratios needs one entry per sub-population")
        self.pop_size = pop_size
        self.n_subpopulations = n_subpopulations
        self.size = pop_size // n_subpopulations
        if sum(brackets) != self.size:
            raise ValueError(f"brackets {brackets} do not add up to the sub-population size {self.size}")
        self.deltas = list(evolution_frequency_ratios)
        self.n_winners, self.n_survivors, self.n_open, self.n_losers = brackets
        self.hp_names = list(hp_names or [])
        self.rng = rng or random.Random()
        self.counters = [0] * n_subpopulations
        self.next_index: int | None = None
        #: index of the parent of each slot of the last :meth:`select` (its own index when kept).
        self.parents: list[int] = []
        #: per slot: "keep", "clone", "migrate_full" or "migrate_weights" (last :meth:`select`).
        self.ops: list[str] = []
        #: sub-populations that evolved in the last :meth:`select`.
        self.evolved: list[int] = []

    @classmethod
    def from_spec(
        cls,
        spec: MultiFrequencySelectionSpec,
        pop_size: int,
        *,
        hp_names: list[str] | None = None,
        rng: random.Random | None = None,
    ) -> MultiFrequencySelection:
        return cls(
            pop_size,
            n_subpopulations=spec.n_subpopulations,
            evolution_frequency_ratios=list(spec.evolution_frequency_ratios or []),
            brackets=spec.brackets(pop_size),
            hp_names=hp_names,
            rng=rng,
        )

    def subpopulation(self, position: int) -> int:
        """The sub-population of population slot ``position``."""
        return position // self.size

    # --- one evolution cycle ---------------------------------------------------------------------
    def select(self, population: list[Any]) -> tuple[Any, list[Any]]:
        """Return ``(elite, new_population)``; slots keep their sub-population and order."""
        if len(population) != self.pop_size:
            raise ValueError(f"MF-PBT was set up for {self.pop_size} agents, got {len(population)}")
        fitness = [last_fitness(a) for a in population]
        if self.next_index is None:
            self.next_index = max(a.index for a in population) + 1
        elite = population[max(range(len(population)), key=lambda i: (fitness[i], -i))]
        frozen = list(population)  # migrants come from the population as evaluated
        new = list(population)
        self.parents = [a.index for a in population]
        self.ops = ["keep"] * len(population)
        self.evolved = []
        for sub in range(self.n_subpopulations):
            self.counters[sub] += 1
            if self.counters[sub] < self.deltas[sub]:
                continue
            self.counters[sub] = 0
            self.evolved.append(sub)
            slots = sorted(range(sub * self.size, (sub + 1) * self.size), key=lambda p: (-fitness[p], p))
            w, s, o = self.n_winners, self.n_survivors, self.n_open
            winners, open_slots, loser_slots = slots[:w], slots[w + s : w + s + o], slots[w + s + o :]
            for slot in loser_slots:
                source = frozen[winners[self.rng.randrange(len(winners))]]
                new[slot] = self._clone(source)
                self.parents[slot], self.ops[slot] = source.index, "clone"
            self._migrate(sub, frozen, fitness, winners[0], open_slots, new)
        return elite, new

    def _migrate(
        self, sub: int, frozen: list[Any], fitness: list[float], elite_slot: int, open_slots: list[int], new: list[Any]
    ) -> None:
        outsiders = sorted(
            (p for p in range(len(frozen)) if self.subpopulation(p) != sub), key=lambda p: (-fitness[p], p)
        )
        taken = 0
        for slot in open_slots:
            if taken >= len(outsiders):
                break
            ext = outsiders[taken]
            if not fitness[ext] > fitness[slot] or not math.isfinite(fitness[ext]):
                continue
            taken += 1
            migrant = self._clone(frozen[ext])
            if self.deltas[self.subpopulation(ext)] < self.deltas[sub]:
                # From a faster sub-population: its networks, the destination elite's hyperparameters.
                for name in self.hp_names:
                    migrant.set_hyperparameter(name, frozen[elite_slot].get_hyperparameter(name))
                self.ops[slot] = "migrate_weights"
            else:
                self.ops[slot] = "migrate_full"
            new[slot] = migrant
            self.parents[slot] = frozen[ext].index

    def _clone(self, agent: Any) -> Any:
        assert self.next_index is not None
        twin = agent.clone(index=self.next_index)
        self.next_index += 1
        return twin

    def mutation_skip(self) -> set[int]:
        """Positions the mutation step leaves alone: all but this cycle's winner clones."""
        return {p for p, op in enumerate(self.ops) if op != "clone"}

    # --- checkpoints -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"counters": list(self.counters), "next_index": self.next_index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counters = [int(c) for c in state.get("counters", self.counters)]
        nxt = state.get("next_index")
        self.next_index = None if nxt is None else int(nxt)


__all__ = ["MultiFrequencySelection"]
