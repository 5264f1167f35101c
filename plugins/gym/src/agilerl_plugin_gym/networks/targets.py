"""Target networks that track online ones: Polyak averaging (:meth:`TargetSync.soft`, one fused
``lerp`` over all parameters) or copying (:meth:`TargetSync.hard`). Used by the algorithms' base
classes; the off-policy engine re-exports them."""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch

__all__ = ["TargetSync", "lerp_params"]


@torch.no_grad()
def lerp_params(target: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    """``target <- target + tau * (online - target)`` for every pair, in one fused kernel call."""
    torch._foreach_lerp_(target, online, tau)


class TargetSync:
    """Target copies of online networks, held in a ``{name: module}`` mapping.

    :param nets: the mapping that holds online and target networks (e.g. ``algorithm.nets``).
    :param target_of: target name -> online name.

    Parameter lists are gathered once (call :meth:`rebuild` after an architecture change), so a
    soft update is a single ``torch._foreach_lerp_`` call however many networks there are.
    """

    def __init__(self, nets: MutableMapping[str, Any], target_of: Mapping[str, str]) -> None:
        self.nets = nets
        self.target_of = dict(target_of)
        self.target: list[torch.Tensor] = []
        self.online: list[torch.Tensor] = []
        if all(t in nets for t in self.target_of):
            self.rebuild()

    def rebuild(self) -> None:
        """Re-gather the parameter lists (after networks were replaced or reshaped)."""
        self.target, self.online = [], []
        for target, source in self.target_of.items():
            # (before copy_online the two may differ in shape: the lists are gathered again after it)
            for t, o in zip(self.nets[target].parameters(), self.nets[source].parameters(), strict=False):
                if t is not o:  # a module both read (a shared encoder) needs no averaging
                    self.target.append(t)
                    self.online.append(o)

    def copy_online(self) -> None:
        """(Re)create every target as a frozen deep copy of its online network, then rebuild."""
        for target, source in self.target_of.items():
            self.nets[target] = copy.deepcopy(self.nets[source])
            self.nets[target].requires_grad_(False)
        self.rebuild()

    def soft(self, tau: float) -> None:
        """Polyak averaging of every target towards its online network."""
        if self.target:
            lerp_params(self.target, self.online, tau)

    @torch.no_grad()
    def hard(self) -> None:
        """Copy the online weights into the targets (same architectures)."""
        torch._foreach_copy_(self.target, self.online)
