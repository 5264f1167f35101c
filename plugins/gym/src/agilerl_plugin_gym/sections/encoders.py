"""Encoder kinds of the ``network`` section's ``encoder_config`` (pydantic only: no torch).

AgileRL's keys, one spec class per kind, and the table :data:`ENCODERS` that ties each kind to its
spec class, the keys that identify it in a config without ``arch``, its network builder (a
``"module:attr"`` string, imported only when a network is built), the architecture mutations its
encoder takes and the facts the rest of the plugin asks about a kind (which observations it reads,
whether the multi-agent algorithms take it, ...). The ``network`` section's ``encoder_config``
union is rebuilt from the table on every registration, so a kind may live in any module: adding one
is its spec class, its network builder and one :func:`register_encoder` line (docs/gym.md,
"Adding an encoder kind").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from agilerl.models.base import Spec

__all__ = [
    "ENCODERS",
    "Activation",
    "CnnLstmSpec",
    "CnnSpec",
    "EncoderKind",
    "LstmSpec",
    "MlpSpec",
    "MultiInputSpec",
    "Reads",
    "SimbaSpec",
    "default_kind",
    "infer_encoder_arch",
    "on_encoders_changed",
    "register_encoder",
    "unregister_encoder",
]

Activation = Literal[
    "Tanh", "GELU", "ReLU", "ELU", "LeakyReLU", "Sigmoid", "Softplus", "Softmax",
    "GumbelSoftmax", "PReLU", "Identity",
]  # fmt: skip


def _check_range(spec: Spec, name: str, value: int | None, what: str | None = None) -> None:
    """``min_<name> <= max_<name>``, and ``value`` (when given) inside them: a ValueError naming both."""
    lo, hi = getattr(spec, f"min_{name}"), getattr(spec, f"max_{name}")
    if lo > hi:
        raise ValueError(f"min_{name} ({lo}) must be <= max_{name} ({hi})")
    if value is not None and not lo <= value <= hi:
        raise ValueError(f"{what or name} ({value}) must lie in [min_{name}, max_{name}] = [{lo}, {hi}]")


class MlpSpec(Spec):
    """A multi-layer perceptron (an encoder with ``arch: mlp``, or a head)."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "arch": "Written by our dump even at its default, so a stored manifest re-validates to the same encoder.",
    }

    arch: Literal["mlp"] = "mlp"
    hidden_size: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [64])
    activation: Activation = "ReLU"
    output_activation: Activation | None = None
    layer_norm: bool = True
    init_layers: bool = True
    output_vanish: bool = True
    output_gain: Annotated[
        float | None,
        Field(
            gt=0,
            description="Orthogonal gain of the output layer's initial weights (with init_layers). Unset: 1, or "
            ".01 with output_vanish; A2C's encoder sets sqrt(2), as SB3's second hidden layer "
            "(an encoder's output is a hidden representation). Not an AgileRL key.",
        ),
    ] = None
    min_hidden_layers: Annotated[int, Field(ge=1)] = 1
    max_hidden_layers: Annotated[int, Field(ge=1)] = 6
    min_mlp_nodes: Annotated[int, Field(ge=1)] = 8
    max_mlp_nodes: Annotated[int, Field(ge=1)] = 256

    @model_validator(mode="after")
    def _ranges(self) -> MlpSpec:
        if self.min_hidden_layers > self.max_hidden_layers:
            raise ValueError("min_hidden_layers must be <= max_hidden_layers")
        if self.min_mlp_nodes > self.max_mlp_nodes:
            raise ValueError("min_mlp_nodes must be <= max_mlp_nodes")
        if self.output_gain is not None and not self.init_layers:
            raise ValueError("output_gain is the orthogonal init's gain: set init_layers: true or drop output_gain")
        return self


class CnnSpec(Spec):
    """A convolutional encoder for image (H x W x C) observations."""

    arch: Literal["cnn"] = "cnn"
    channel_size: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [16, 32])
    kernel_size: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [8, 4])
    stride_size: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [4, 2])
    activation: Activation = "ReLU"
    layer_norm: bool = False
    init_layers: bool = True
    min_hidden_layers: Annotated[int, Field(ge=1)] = 1
    max_hidden_layers: Annotated[int, Field(ge=1)] = 6
    min_channel_size: Annotated[int, Field(ge=1)] = 8
    max_channel_size: Annotated[int, Field(ge=1)] = 256

    @model_validator(mode="after")
    def _lengths(self) -> CnnSpec:
        n = {len(self.channel_size), len(self.kernel_size), len(self.stride_size)}
        if len(n) != 1:
            raise ValueError("channel_size, kernel_size and stride_size must have the same length")
        _check_range(self, "hidden_layers", None)
        _check_range(self, "channel_size", None)
        return self


class LstmSpec(Spec):
    """An LSTM encoder, as AgileRL's ``arch: lstm``."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "arch": "Which algorithms take it is up to each plugin (policies with memory); the others refuse it."
    }

    arch: Literal["lstm"] = "lstm"
    hidden_state_size: Annotated[int, Field(ge=1)] = 64
    num_layers: Annotated[int, Field(ge=1)] = 1
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    min_hidden_state_size: Annotated[int, Field(ge=1)] = 8
    max_hidden_state_size: Annotated[int, Field(ge=1)] = 256
    min_layers: Annotated[int, Field(ge=1)] = 1
    max_layers: Annotated[int, Field(ge=1)] = 6

    @model_validator(mode="after")
    def _ranges(self) -> LstmSpec:
        _check_range(self, "hidden_state_size", None)
        _check_range(self, "layers", self.num_layers, "num_layers")
        return self


class CnnLstmSpec(Spec):
    """A CNN followed by an LSTM, as AgileRL's ``arch: cnn_lstm``."""

    model_config = ConfigDict(extra="allow")

    arch: Literal["cnn_lstm"] = "cnn_lstm"


class SimbaSpec(Spec):
    """A SimBa residual MLP encoder, as AgileRL's ``arch: simba``."""

    upstream_notes: ClassVar[dict[str, str]] = {"arch": "Each plugin documents where its networks take it."}

    arch: Literal["simba"] = "simba"
    hidden_size: Annotated[int, Field(ge=1)] = 128
    num_blocks: Annotated[int, Field(ge=1)] = 1
    scale_factor: Annotated[int, Field(ge=1)] = 4
    min_blocks: Annotated[int, Field(ge=1)] = 1
    max_blocks: Annotated[int, Field(ge=1)] = 4
    min_mlp_nodes: Annotated[int, Field(ge=1)] = 16
    max_mlp_nodes: Annotated[int, Field(ge=1)] = 500

    @model_validator(mode="after")
    def _ranges(self) -> SimbaSpec:
        if not self.min_blocks <= self.num_blocks <= self.max_blocks:
            raise ValueError(f"num_blocks ({self.num_blocks}) must lie in [min_blocks, max_blocks]")
        if not self.min_mlp_nodes <= self.hidden_size <= self.max_mlp_nodes:
            raise ValueError(f"hidden_size ({self.hidden_size}) must lie in [min_mlp_nodes, max_mlp_nodes]")
        return self


class MultiInputSpec(Spec):
    """One encoder per part of a Dict/Tuple observation, as AgileRL's ``arch: multiinput``."""

    upstream_notes: ClassVar[dict[str, str]] = {"arch": "Each plugin documents where its networks take it."}

    arch: Literal["multiinput"] = "multiinput"
    latent_dim: Annotated[int, Field(ge=1, description="Features each encoded part yields.")] = 16
    vector_space_mlp: bool = False
    mlp_config: MlpSpec | None = None
    cnn_config: CnnSpec | None = None
    lstm_config: LstmSpec | None = None
    init_dicts: dict[str, Any] | None = None
    output_activation: Activation | None = None
    min_latent_dim: Annotated[int, Field(ge=1)] = 8
    max_latent_dim: Annotated[int, Field(ge=1)] = 128

    @model_validator(mode="after")
    def _latent_range(self) -> MultiInputSpec:
        if not self.min_latent_dim <= self.latent_dim <= self.max_latent_dim:
            raise ValueError(f"latent_dim ({self.latent_dim}) must lie in [min_latent_dim, max_latent_dim]")
        return self


_CNN_KEYS = frozenset({"channel_size", "kernel_size", "stride_size", "min_channel_size", "max_channel_size"})
_LSTM_KEYS = frozenset({"hidden_state_size", "num_layers", "min_hidden_state_size", "max_hidden_state_size",
                        "min_layers", "max_layers", "dropout"})  # fmt: skip


#: The observations an encoder kind reads (and how :class:`~agilerl_plugin_gym.networks.EvolvableNetwork`
#: hands them over): ``"vector"`` (Box of rank <= 2, Discrete, MultiDiscrete, MultiBinary: flattened
#: floats), ``"image"`` (a rank-3 Box: channels-first floats, scaled to [0, 1] with
#: ``normalize_images``), ``"structured"`` (Dict/Tuple: passed as they are; the encoder splits them).
Reads = Literal["vector", "image", "structured"]


@dataclass(frozen=True)
class EncoderKind:
    """One ``encoder_config.arch`` and what the plugin needs to know about it.

    :param arch: the ``arch`` value (the spec class's ``arch: Literal[...]`` default).
    :param spec: the pydantic class ``encoder_config`` validates into (a :class:`Spec` with ``arch``).
    :param matches: whether a config without ``arch`` describes this kind (its keys); the default
        vector kind is the fallback, tried last.
    :param builder: ``"module:attr"`` of ``builder(config, observation_space, latent_dim,
        normalize_images) -> nn.Module``; None: no network here, the kind is refused where it would be
        built (``refusal``).
    :param mutations: the architecture mutations its encoder module implements.
    :param reads: the observations it takes (:data:`Reads`).
    :param default: the kind a space of its ``reads`` gets when the section names none (one per ``reads``).
    :param multi_agent: whether the multi-agent algorithms take it.
    :param recurrent: only policies with memory take it (PPO with ``recurrent: true``).
    :param title: how messages name it (``"SimBa"``); default: the ``arch``.
    """

    arch: str
    spec: type[Spec]
    matches: Callable[[Mapping[str, Any]], bool]
    builder: str | None = None
    mutations: tuple[str, ...] = ()
    reads: Reads = "vector"
    default: bool = False
    multi_agent: bool = True
    recurrent: bool = False
    title: str = ""

    @property
    def label(self) -> str:
        return self.title or self.arch


#: ``arch`` -> its :class:`EncoderKind`, in the order :func:`infer_encoder_arch` tries them.
ENCODERS: dict[str, EncoderKind] = {}
#: Called after every change of :data:`ENCODERS` (the ``network`` section rebuilds its union).
_LISTENERS: list[Callable[[], None]] = []


def register_encoder(kind: EncoderKind) -> None:
    """Add an encoder kind: ``network.encoder_config`` validates it from now on."""
    if kind.arch in ENCODERS:
        raise ValueError(f"encoder kind {kind.arch!r} is registered twice")
    arch_field = kind.spec.model_fields.get("arch")
    if arch_field is None or arch_field.default != kind.arch:
        raise ValueError(f"encoder kind {kind.arch!r}: its spec {kind.spec.__name__} needs the field "
                         f"arch: Literal[{kind.arch!r}] = {kind.arch!r}")  # fmt: skip
    if kind.default and any(k.default and k.reads == kind.reads for k in ENCODERS.values()):
        raise ValueError(f"encoder kind {kind.arch!r}: {default_kind(kind.reads)!r} is already the default for "
                         f"{kind.reads} observations")  # fmt: skip
    ENCODERS[kind.arch] = kind
    _changed()


def unregister_encoder(arch: str) -> None:
    """Remove an encoder kind (a test's, or a plugin unloaded)."""
    if ENCODERS.pop(arch, None) is not None:
        _changed()


def on_encoders_changed(listener: Callable[[], None]) -> None:
    """Call ``listener`` after every registration (``sections.network`` rebuilds ``encoder_config``)."""
    _LISTENERS.append(listener)


def _changed() -> None:
    for listener in _LISTENERS:
        listener()


def default_kind(reads: Reads) -> str:
    """The ``arch`` a space of ``reads`` observations gets when the section names none."""
    for kind in ENCODERS.values():
        if kind.default and kind.reads == reads:
            return kind.arch
    raise LookupError(f"no default encoder kind for {reads} observations is registered")


def infer_encoder_arch(config: Mapping[str, Any]) -> str:
    """The ``arch`` an encoder config without one describes, from its keys.

    Per-input configs (``mlp_config``, ``cnn_config``, ...) mean ``multiinput``; CNN keys with LSTM
    keys mean ``cnn_lstm``; then ``cnn``, ``lstm``, ``simba`` (its block keys, or an integer
    ``hidden_size``), then any other registered kind whose keys match; anything else is the default
    vector kind (``mlp``).
    """
    fallback = default_kind("vector")
    for kind in ENCODERS.values():
        if kind.arch != fallback and kind.matches(config):
            return kind.arch
    return fallback


_NETS = "agilerl_plugin_gym.networks.factory"
_MLP_MUTATIONS = ("add_layer", "remove_layer", "add_node", "remove_node")
register_encoder(EncoderKind(
    "multiinput", MultiInputSpec,
    lambda c: bool(set(c) & {"mlp_config", "cnn_config", "lstm_config", "vector_space_mlp", "init_dicts", "latent_dim"}),
    builder=f"{_NETS}:build_multi_input",  # EvolvableMultiInput.mutation_names() answers for its parts
    reads="structured", default=True, multi_agent=False, title="multi-input",
))  # fmt: skip
register_encoder(EncoderKind(
    "cnn_lstm", CnnLstmSpec, lambda c: bool(set(c) & _CNN_KEYS and set(c) & (_LSTM_KEYS - {"dropout"})),
    reads="image", multi_agent=False, recurrent=True, title="CNN-LSTM",
))  # fmt: skip
register_encoder(EncoderKind("cnn", CnnSpec, lambda c: bool(set(c) & _CNN_KEYS), builder=f"{_NETS}:build_cnn",
                             mutations=("add_layer", "remove_layer", "add_channel", "remove_channel"), reads="image",
                             default=True, title="CNN"))  # fmt: skip
register_encoder(EncoderKind("lstm", LstmSpec, lambda c: bool(set(c) & _LSTM_KEYS), builder=f"{_NETS}:build_lstm",
                             mutations=_MLP_MUTATIONS, multi_agent=False, recurrent=True, title="LSTM"))  # fmt: skip
register_encoder(EncoderKind(
    "simba", SimbaSpec,
    lambda c: bool(set(c) & {"num_blocks", "scale_factor", "min_blocks", "max_blocks"}) or isinstance(c.get("hidden_size"), int),
    builder=f"{_NETS}:build_simba", mutations=("add_block", "remove_block", "add_node", "remove_node"), title="SimBa",
))  # fmt: skip
register_encoder(EncoderKind("mlp", MlpSpec, lambda c: True, builder=f"{_NETS}:build_mlp", mutations=_MLP_MUTATIONS,
                             default=True, title="MLP"))  # fmt: skip
