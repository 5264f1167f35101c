"""Tournament selection."""

from __future__ import annotations

import math
import random
from typing import Any


def last_fitness(agent: Any) -> float:
    """The agent's latest fitness; agents never evaluated (or NaN) rank last."""
    if not agent.fitness:
        return -math.inf
    value = float(agent.fitness[-1])
    return value if math.isfinite(value) else -math.inf


class TournamentSelection:
    """Keep the elite (a clone of the best agent, same index) when ``elitism``; fill every other
    slot with the best of ``tournament_size`` agents drawn uniformly with replacement, cloned with a
    fresh index. Seeded through ``rng``."""

    def __init__(self, tournament_size: int = 2, elitism: bool = True, *, rng: random.Random | None = None) -> None:
        if tournament_size < 1:
            raise ValueError("tournament_size must be >= 1")
        self.tournament_size = tournament_size
        self.elitism = elitism
        self.rng = rng or random.Random()
        #: index of the parent of each slot of the last :meth:`select` (for the run log).
        self.parents: list[int] = []

    def select(self, population: list[Any]) -> tuple[Any, list[Any]]:
        """Return ``(elite, new_population)``; the population's size is kept."""
        if not population:
            raise ValueError("cannot select from an empty population")
        fitness = [last_fitness(a) for a in population]
        best = max(range(len(population)), key=lambda i: (fitness[i], -i))
        elite = population[best]
        next_index = max(a.index for a in population) + 1
        new_population: list[Any] = []
        self.parents = []
        if self.elitism:
            new_population.append(elite.clone(index=elite.index))
            self.parents.append(elite.index)
        while len(new_population) < len(population):
            entrants = [self.rng.randrange(len(population)) for _ in range(self.tournament_size)]
            winner = max(entrants, key=lambda i: (fitness[i], -i))
            new_population.append(population[winner].clone(index=next_index))
            self.parents.append(population[winner].index)
            next_index += 1
        return elite, new_population
