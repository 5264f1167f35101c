"""Evolutionary hyperparameter optimisation: tournament selection and mutation, through the
algorithm protocol (:mod:`agilerl.protocols`), so every paradigm gets it."""

from agilerl.hpo.mfpbt import MultiFrequencySelection
from agilerl.hpo.mutation import Mutations, resolve_hp_ranges
from agilerl.hpo.selection import TournamentSelection

__all__ = ["MultiFrequencySelection", "Mutations", "TournamentSelection", "resolve_hp_ranges"]
