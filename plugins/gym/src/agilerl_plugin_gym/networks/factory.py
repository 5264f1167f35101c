"""Encoders from the ``network`` section: the observation space picks the kind
(``encoder_rules.encoder_kind``), and the builder the encoder table names for that kind
(:data:`agilerl_plugin_gym.sections.encoders.ENCODERS`, one ``register_encoder`` line per kind,
torch-free so validation reads it too) makes it. The builders of the built-in kinds are here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gymnasium import spaces
from torch import nn

from agilerl.imports import import_object
from agilerl_plugin_gym.encoder_rules import EncoderSpaceError, check_network_for_space, encoder_kind
from agilerl_plugin_gym.networks.cnn import EvolvableCNN
from agilerl_plugin_gym.networks.layers import image_chw, obs_dim
from agilerl_plugin_gym.networks.lstm import EvolvableLSTM
from agilerl_plugin_gym.networks.mlp import EvolvableMLP
from agilerl_plugin_gym.networks.multi_input import EvolvableMultiInput
from agilerl_plugin_gym.networks.simba import EvolvableSimBa
from agilerl_plugin_gym.sections import CnnSpec, LstmSpec, MlpSpec, MultiInputSpec, NetworkSpec, SimbaSpec
from agilerl_plugin_gym.sections.encoders import ENCODERS

__all__ = [
    "LATENT_STEPS",
    "EncoderBuilder",
    "build_cnn",
    "build_encoder",
    "build_lstm",
    "build_mlp",
    "build_multi_input",
    "build_simba",
    "default_network_spec",
    "encoder_builder",
    "latent_range",
]

#: ``builder(encoder_config or None, observation_space, latent_dim, normalize_images) -> encoder``.
EncoderBuilder = Callable[[Any, spaces.Space[Any], int, bool], nn.Module]

#: ``"module:attr"`` -> the builder it names (imported once).
_builders: dict[str, EncoderBuilder] = {}


def encoder_builder(kind: str) -> EncoderBuilder | None:
    """The builder :data:`~agilerl_plugin_gym.sections.encoders.ENCODERS` names for ``kind`` (imported
    on first use), or None when the kind has no network here."""
    entry = ENCODERS.get(kind)
    if entry is None or entry.builder is None:
        return None
    builder = _builders.get(entry.builder)
    if builder is None:
        builder = _builders[entry.builder] = import_object(entry.builder, what=f"builder of encoder kind {kind!r}")
    return builder


#: Units a ``latent.add_node`` / ``latent.remove_node`` mutation moves the latent size by (AgileRL's).
LATENT_STEPS = (8, 16, 32)


def latent_range(spec: NetworkSpec) -> tuple[int, int] | None:
    """The ``(min, max)`` latent size mutation keeps to: None (fixed) unless the manifest gives
    ``min_latent_dim`` or ``max_latent_dim``; a missing bound is AgileRL's default (8, 128),
    widened to include ``latent_dim``."""
    lo, hi = spec.min_latent_dim, spec.max_latent_dim
    if lo is None and hi is None:
        return None
    return (min(8, spec.latent_dim) if lo is None else lo, max(128, spec.latent_dim) if hi is None else hi)


def default_network_spec(latent_dim: int = 64, hidden: Sequence[int] = (64,), head: Sequence[int] = ()) -> NetworkSpec:
    """A small MLP network: ``obs -> 64 -> latent 64 -> out`` unless told otherwise.

    Layer norm is off in the default: these nets are tiny and LayerNorm costs more than it gives.
    """
    return NetworkSpec(
        latent_dim=latent_dim,
        encoder_config=MlpSpec(hidden_size=list(hidden), layer_norm=False),
        head_config=MlpSpec(hidden_size=list(head), layer_norm=False, min_hidden_layers=1),
    )


def build_mlp(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    mlp = cfg if isinstance(cfg, MlpSpec) else MlpSpec(layer_norm=False)
    # The encoder's output is a hidden representation: activate it like a hidden layer.
    return EvolvableMLP.from_spec(mlp, obs_dim(space), latent, output_activation=mlp.activation, output_vanish=False)


def build_cnn(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    return EvolvableCNN.from_spec(cfg if isinstance(cfg, CnnSpec) else CnnSpec(), image_chw(space), latent)


def build_simba(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    return EvolvableSimBa.from_spec(cfg if isinstance(cfg, SimbaSpec) else SimbaSpec(), obs_dim(space), latent)


def build_lstm(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    # Recurrent policies (networks.lstm): an image space is refused before this (no CNN-LSTM yet).
    return EvolvableLSTM.from_spec(cfg if isinstance(cfg, LstmSpec) else LstmSpec(), obs_dim(space), latent)


def build_multi_input(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    assert isinstance(space, (spaces.Dict, spaces.Tuple))
    spec = cfg if isinstance(cfg, MultiInputSpec) else None
    return EvolvableMultiInput(space, latent, spec, normalize_images=normalize_images)


def build_encoder(
    spec: NetworkSpec | None, observation_space: spaces.Space[Any], *, normalize_images: bool = True
) -> tuple[str, nn.Module]:
    """``(kind, encoder)`` for ``observation_space`` from a ``network`` section (``None``: defaults).

    Raises :class:`~agilerl_plugin_gym.encoder_rules.EncoderSpaceError` when the section asks for
    an encoder the space cannot take.
    """
    check_network_for_space(spec, observation_space)
    kind = encoder_kind(spec, observation_space)
    builder = encoder_builder(kind)
    if builder is None:
        kinds = ", ".join(k for k, e in ENCODERS.items() if e.builder is not None)
        raise EncoderSpaceError(f"network.encoder_config: no {kind!r} encoder here ({kinds})")
    net = spec or default_network_spec()
    cfg = spec.encoder_config if spec is not None else net.encoder_config
    if cfg is None and kind == "simba" and spec is not None and spec.simba:
        cfg = SimbaSpec()
    return kind, builder(cfg, observation_space, net.latent_dim, normalize_images)
