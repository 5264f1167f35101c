"""What kind of observation a gymnasium space holds (gymnasium only: no torch, no pydantic).

A leaf module: the networks, the encoder rules (validation) and the algorithms' space checks all
ask these questions, so it sits below all of them and imports nothing of the plugin.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from gymnasium import spaces

__all__ = ["is_channels_last", "is_image_space", "is_structured_space"]


def is_image_space(space: spaces.Space[Any]) -> TypeGuard[spaces.Box]:
    """A Box of rank 3 (H x W x C, or C x H x W) is treated as an image."""
    return isinstance(space, spaces.Box) and len(space.shape) == 3


def is_channels_last(space: spaces.Space[Any]) -> bool:
    """An image given as H x W x C: its last axis is smaller than its first (else C x H x W)."""
    shape = space.shape or ()
    return len(shape) == 3 and shape[-1] < shape[0]


def is_structured_space(space: spaces.Space[Any]) -> bool:
    """A Dict or Tuple space (read by a multi-input encoder)."""
    return isinstance(space, (spaces.Dict, spaces.Tuple))
