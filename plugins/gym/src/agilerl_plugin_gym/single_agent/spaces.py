"""Which observation and action spaces each single-agent algorithm handles (gymnasium only, no torch).

The algorithms check their spaces when they are built, and the specs run the same check at
validation time (``agilerl validate``) on one env made from the manifest, so a wrong combination
(continuous actions for DQN, discrete ones for DDPG) fails before anything trains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gymnasium import spaces

from agilerl.errors import AgileRLError
from agilerl_plugin_gym.space_kinds import is_image_space

if TYPE_CHECKING:
    from agilerl_plugin_gym.spec_base import SpaceRules

__all__ = [
    "UnsupportedSpaceError",
    "check_observation_space",
    "check_recurrent_observation_space",
    "check_spaces",
]


class UnsupportedSpaceError(AgileRLError):
    """The env's observation or action space is not one the algorithm handles."""


def _supported_observation(space: spaces.Space[Any], images: bool) -> bool:
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        parts = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return all(_supported_observation(s, images) for s in parts)
    if isinstance(space, (spaces.Discrete, spaces.MultiBinary, spaces.MultiDiscrete)):
        return True
    return isinstance(space, spaces.Box) and (len(space.shape) <= 2 or (images and is_image_space(space)))


def check_observation_space(algo: str, space: spaces.Space[Any], *, images: bool = True) -> None:
    """Box vectors (rank <= 2, flattened), Discrete, MultiDiscrete, MultiBinary, H x W x C or C x H x W
    images where ``images``, and Dict/Tuple spaces of these (multi-input encoders)."""
    if not _supported_observation(space, images):
        what = "image (H x W x C Box) observations" if is_image_space(space) else f"observation space {space}"
        raise UnsupportedSpaceError(
            f"environment: {algo} does not support {what}. Supported: Box vectors, Discrete, MultiDiscrete, "
            "MultiBinary"
            + (", images (H x W x C or C x H x W)" if images else "")
            + " and Dict/Tuple spaces of these. Wrap the env (environment.env_wrappers) to flatten or convert it."
        )


def check_recurrent_observation_space(space: spaces.Space[Any]) -> None:
    """Recurrent PPO's LSTM encoder reads vector observations: refuse images and Dict/Tuple spaces."""
    if is_image_space(space):
        raise UnsupportedSpaceError(
            "environment: recurrent PPO takes vector observations; image observations would need a "
            "CNN-LSTM encoder (arch: cnn_lstm), which is not supported yet"
        )
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        raise UnsupportedSpaceError(
            "environment: recurrent PPO takes vector observations; Dict/Tuple observations would need a "
            "multi-input LSTM encoder, which is not supported yet. Flatten them with an env wrapper "
            "(gymnasium.wrappers.FlattenObservation) or set recurrent: false"
        )


def check_spaces(
    rules: SpaceRules, algo: str, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]
) -> None:
    """Raise :class:`UnsupportedSpaceError` naming ``algo`` unless ``rules`` take these spaces
    (:class:`~agilerl_plugin_gym.spec_base.SpaceRules`; ``rules.check`` calls this)."""
    if rules.actions == "discrete":
        if not isinstance(action_space, spaces.Discrete):
            raise UnsupportedSpaceError(
                f"environment: {algo} needs a Discrete action space, but this env's actions are {action_space}. "
                "Use DDPG or TD3 for continuous (Box) actions, or PPO."
            )
        check_observation_space(algo, observation_space)
    elif rules.actions == "continuous":
        if not (isinstance(action_space, spaces.Box) and len(action_space.shape) == 1):
            raise UnsupportedSpaceError(
                f"environment: {algo} needs continuous actions (a 1-D Box), but this env's actions are "
                f"{action_space}. Use DQN or PPO for discrete actions."
            )
        check_observation_space(algo, observation_space)
    else:
        check_observation_space(algo, observation_space)
        discrete = isinstance(action_space, spaces.Discrete) or (
            isinstance(action_space, spaces.MultiDiscrete) and action_space.nvec.ndim == 1
        )
        if not (discrete or (isinstance(action_space, spaces.Box) and len(action_space.shape) == 1)):
            raise UnsupportedSpaceError(
                f"environment: {algo} supports Discrete, MultiDiscrete and 1-D Box actions, not {action_space}"
            )
