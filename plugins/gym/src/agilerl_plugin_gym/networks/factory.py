"""The encoder registry: the observation space picks the kind (``encoder_rules.encoder_kind``), the
builder registered for that kind makes it, and the mutations registered with it are the ones
:class:`~agilerl_plugin_gym.networks.network.EvolvableNetwork` offers.

Another kind is one module with its encoder class plus one :func:`register_encoder` call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gymnasium import spaces
from torch import nn

from agilerl.models import CnnSpec, LstmSpec, MlpSpec, NetworkSpec
from agilerl.models.sections import MultiInputSpec, SimbaSpec
from agilerl_plugin_gym.encoder_rules import EncoderSpaceError, check_network_for_space, encoder_kind
from agilerl_plugin_gym.networks.cnn import EvolvableCNN
from agilerl_plugin_gym.networks.layers import image_chw, obs_dim
from agilerl_plugin_gym.networks.lstm import EvolvableLSTM
from agilerl_plugin_gym.networks.mlp import EvolvableMLP
from agilerl_plugin_gym.networks.multi_input import EvolvableMultiInput
from agilerl_plugin_gym.networks.simba import EvolvableSimBa

__all__ = [
    "ENCODER_BUILDERS",
    "ENCODER_MUTATIONS",
    "LATENT_STEPS",
    "EncoderBuilder",
    "build_encoder",
    "default_network_spec",
    "latent_range",
    "register_encoder",
]

#: ``builder(encoder_config or None, observation_space, latent_dim, normalize_images) -> encoder``.
EncoderBuilder = Callable[[Any, spaces.Space[Any], int, bool], nn.Module]

#: Encoder kind (``encoder_config.arch``) -> its builder.
ENCODER_BUILDERS: dict[str, EncoderBuilder] = {}
#: Encoder kind -> the architecture mutations its encoder takes (``encoder.<name>``). An encoder with
#: a ``mutation_names()`` method (the multi-input one) answers for itself instead.
ENCODER_MUTATIONS: dict[str, tuple[str, ...]] = {}


def register_encoder(kind: str, builder: EncoderBuilder, *, mutations: Sequence[str] = ()) -> None:
    """Make ``builder`` the encoder for ``arch: kind``, mutated by ``mutations``."""
    if kind in ENCODER_BUILDERS:
        raise ValueError(f"encoder kind {kind!r} is registered twice")
    ENCODER_BUILDERS[kind] = builder
    ENCODER_MUTATIONS[kind] = tuple(mutations)


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


def _build_mlp(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    mlp = cfg if isinstance(cfg, MlpSpec) else MlpSpec(layer_norm=False)
    # The encoder's output is a hidden representation: activate it like a hidden layer.
    return EvolvableMLP.from_spec(mlp, obs_dim(space), latent, output_activation=mlp.activation, output_vanish=False)


def _build_cnn(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    return EvolvableCNN.from_spec(cfg if isinstance(cfg, CnnSpec) else CnnSpec(), image_chw(space), latent)


def _build_simba(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    return EvolvableSimBa.from_spec(cfg if isinstance(cfg, SimbaSpec) else SimbaSpec(), obs_dim(space), latent)


def _build_lstm(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    # Recurrent policies (networks.lstm): an image space is refused before this (no CNN-LSTM yet).
    return EvolvableLSTM.from_spec(cfg if isinstance(cfg, LstmSpec) else LstmSpec(), obs_dim(space), latent)


def _build_multi_input(cfg: Any, space: spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    assert isinstance(space, (spaces.Dict, spaces.Tuple))
    spec = cfg if isinstance(cfg, MultiInputSpec) else None
    return EvolvableMultiInput(space, latent, spec, normalize_images=normalize_images)


_MLP_MUTATIONS = ("add_layer", "remove_layer", "add_node", "remove_node")
register_encoder("mlp", _build_mlp, mutations=_MLP_MUTATIONS)
register_encoder("cnn", _build_cnn, mutations=("add_layer", "remove_layer", "add_channel", "remove_channel"))
register_encoder("simba", _build_simba, mutations=("add_block", "remove_block", "add_node", "remove_node"))
register_encoder("lstm", _build_lstm, mutations=("add_layer", "remove_layer", "add_node", "remove_node"))
register_encoder("multiinput", _build_multi_input)  # EvolvableMultiInput.mutation_names() answers


def build_encoder(
    spec: NetworkSpec | None, observation_space: spaces.Space[Any], *, normalize_images: bool = True
) -> tuple[str, nn.Module]:
    """``(kind, encoder)`` for ``observation_space`` from a ``network`` section (``None``: defaults).

    Raises :class:`~agilerl_plugin_gym.encoder_rules.EncoderSpaceError` when the section asks for
    an encoder the space cannot take.
    """
    check_network_for_space(spec, observation_space)
    kind = encoder_kind(spec, observation_space)
    builder = ENCODER_BUILDERS.get(kind)
    if builder is None:
        raise EncoderSpaceError(f"network.encoder_config: no {kind!r} encoder here ({', '.join(ENCODER_BUILDERS)})")
    net = spec or default_network_spec()
    cfg = spec.encoder_config if spec is not None else net.encoder_config
    if cfg is None and kind == "simba" and spec is not None and spec.simba:
        cfg = SimbaSpec()
    return kind, builder(cfg, observation_space, net.latent_dim, normalize_images)
