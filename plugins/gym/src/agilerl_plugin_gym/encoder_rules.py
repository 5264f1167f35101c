"""Which encoder an observation space gets from the ``network`` section (gymnasium + pydantic, no torch).

As in AgileRL, the observation space decides the kind and ``encoder_config`` configures it:

* ``Dict`` / ``Tuple`` spaces: a multi-input encoder (``arch: multiinput``; its keys ``latent_dim``,
  ``vector_space_mlp``, ``cnn_config``, ``mlp_config``, ``init_dicts``, ...);
* images (a rank-3 ``Box``, H x W x C or C x H x W): a CNN (``arch: cnn``);
* vectors (``Box`` of rank <= 2, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``): an MLP, or a
  SimBa residual MLP with ``arch: simba`` / ``network.simba: true``.

Which kind reads which observations is the kind's registration (``EncoderKind.reads``, ``default``),
so a kind registered from elsewhere takes part in the same rule.

:func:`encoder_kind` answers with the kind (or raises :class:`EncoderSpaceError` naming the
mismatch); the validation step (``agilerl validate``) and the network builder both use it, so a
wrong combination is refused before anything trains. :func:`part_specs` resolves a multi-input
encoder's per-part configs (``init_dicts``), also shared by validation and the builder.
"""

from __future__ import annotations

from typing import Any

from gymnasium import spaces
from pydantic import ValidationError

from agilerl.errors import AgileRLError
from agilerl_plugin_gym.sections import CnnSpec, MlpSpec, MultiInputSpec, NetworkSpec
from agilerl_plugin_gym.sections.encoders import ENCODERS, Reads, default_kind
from agilerl_plugin_gym.space_kinds import is_channels_last, is_image_space, is_structured_space

__all__ = [
    "DEFAULT_PART_CNN",
    "DEFAULT_PART_MLP",
    "EncoderSpaceError",
    "check_cnn_fits",
    "check_network_for_space",
    "encoder_kind",
    "observation_reads",
    "part_specs",
]

#: A multi-input encoder's CNN for image parts when ``cnn_config`` is not given (AgileRL's default).
DEFAULT_PART_CNN = CnnSpec(channel_size=[16, 16], kernel_size=[3, 3], stride_size=[1, 1], min_hidden_layers=1)
#: Its vector MLP (``vector_space_mlp: true``) when ``mlp_config`` is not given (AgileRL's default).
DEFAULT_PART_MLP = MlpSpec(hidden_size=[64, 64])
#: Keys of AgileRL's init dicts that our builder sets itself (the latent size, the device, a name).
_BOOKKEEPING = {"name", "num_outputs", "device"}


class EncoderSpaceError(AgileRLError):
    """The ``network`` section asks for an encoder the observation space cannot take."""


def observation_reads(space: spaces.Space[Any]) -> Reads:
    """What an encoder of ``space`` must read: ``"structured"`` (Dict/Tuple), ``"image"`` or ``"vector"``."""
    return "structured" if is_structured_space(space) else "image" if is_image_space(space) else "vector"


def encoder_kind(net: NetworkSpec | None, space: spaces.Space[Any]) -> str:
    """The registered kind (:data:`~agilerl_plugin_gym.sections.encoders.ENCODERS`) that encodes
    ``space``: the ``arch`` the section names when it reads such observations, else the default kind
    for them (an MLP config on an image space gets a CNN, as in AgileRL). A recurrent kind, or one
    without a network here, comes back as given: who takes it decides."""
    enc = net.encoder_config if net is not None else None
    simba = net is not None and net.simba
    arch = enc.arch if enc is not None else None
    if simba and arch not in (None, "simba"):
        raise EncoderSpaceError(
            f"network.simba: true needs a SimBa encoder_config (hidden_size: int, num_blocks), not arch: {arch}"
        )
    if simba:
        arch = "simba"
    kind = ENCODERS.get(arch) if arch is not None else None
    reads = observation_reads(space)
    if reads == "structured":
        if kind is None or kind.reads == "structured":
            return arch or default_kind("structured")
        multi = ENCODERS[default_kind("structured")]
        keys = [f for f in multi.spec.model_fields if f != "arch" and not f.startswith(("min_", "max_"))]
        raise EncoderSpaceError(
            f"network.encoder_config: {type(space).__name__} observations are read by a {multi.label} encoder "
            f"(arch: {multi.arch}: {', '.join(keys)}), not arch: {arch}"
        )
    if kind is None:
        return default_kind(reads)
    if kind.reads == "structured":
        raise EncoderSpaceError(
            f"network.encoder_config: arch: {arch} needs Dict or Tuple observations; {space} is not one"
        )
    if kind.reads == reads or kind.recurrent or kind.builder is None:
        return kind.arch
    if kind.default and kind.reads == "vector":  # an MLP config on an image: the space decides (AgileRL)
        return default_kind(reads)
    if reads == "image":
        raise EncoderSpaceError(
            f"network.encoder_config: {kind.label} encoders read vector observations; {space} is an image: "
            f"use arch: {default_kind('image')}"
        )
    raise EncoderSpaceError(
        f"network.encoder_config.arch {arch!r} needs image observations; {space} is a vector space: use arch: "
        f"{default_kind('vector')}"
    )


def part_specs(spec: MultiInputSpec, space: spaces.Dict | spaces.Tuple) -> dict[str, Any]:
    """The config of each encoded part of a multi-input encoder: a :class:`CnnSpec` per image part,
    a :class:`MultiInputSpec` per nested Dict/Tuple part (the same config, without ``init_dicts``) and, with ``vector_space_mlp``, an
    :class:`MlpSpec` under ``"vector_mlp"``. ``init_dicts[key]`` overrides the shared config.

    Raises :class:`EncoderSpaceError` for an ``init_dicts`` key that names no encoded part or a
    config that does not validate (vector parts are concatenated, not encoded, unless
    ``vector_space_mlp``: an init dict for one would do nothing).
    """
    parts = {str(i): s for i, s in enumerate(space.spaces)} if isinstance(space, spaces.Tuple) else dict(space.spaces)
    init = dict(spec.init_dicts or {})
    out: dict[str, Any] = {}
    kinds: dict[str, type[Any]] = {}
    for key, sub in parts.items():
        if is_image_space(sub):
            out[key], kinds[key] = spec.cnn_config or DEFAULT_PART_CNN, CnnSpec
        elif is_structured_space(sub):  # the same config; init_dicts name this level's parts
            out[key], kinds[key] = spec.model_copy(update={"init_dicts": None}), MultiInputSpec
    if spec.vector_space_mlp:
        out["vector_mlp"], kinds["vector_mlp"] = spec.mlp_config or DEFAULT_PART_MLP, MlpSpec
    for key, cfg in init.items():
        if key not in kinds:
            encoded = ", ".join(sorted(kinds)) or "none"
            raise EncoderSpaceError(
                f"network.encoder_config.init_dicts.{key}: names no encoded part of the observation space "
                f"(encoded parts: {encoded}; vector parts are concatenated unless vector_space_mlp: true)"
            )
        if not isinstance(cfg, dict):
            raise EncoderSpaceError(f"network.encoder_config.init_dicts.{key}: must be a mapping, got {cfg!r}")
        given = {k: v for k, v in cfg.items() if k not in _BOOKKEEPING}
        try:
            out[key] = kinds[key].model_validate(given)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise EncoderSpaceError(
                f"network.encoder_config.init_dicts.{key}{'.' + loc if loc else ''}: {first['msg']}"
            ) from None
        if isinstance(out[key], CnnSpec) and out[key].layer_norm:
            raise EncoderSpaceError(
                f"network.encoder_config.init_dicts.{key}.layer_norm: true is not supported yet for CNN encoders; "
                "set layer_norm: false"
            )
    return out


def check_cnn_fits(cfg: CnnSpec, space: spaces.Space[Any], where: str = "network.encoder_config") -> None:
    """Raise :class:`EncoderSpaceError` when the convolutions shrink the image below one pixel
    (stride-1 layers pad to keep the size; the others do not pad)."""
    shape = space.shape or ()
    hw = [shape[0], shape[1]] if is_channels_last(space) else [shape[1], shape[2]]
    for i, (k, st) in enumerate(zip(cfg.kernel_size, cfg.stride_size, strict=True)):
        pad = k // 2 if st == 1 else 0
        hw = [(d + 2 * pad - k) // st + 1 for d in hw]
        if min(hw) < 1:
            raise EncoderSpaceError(
                f"{where}: the convolutions (kernel_size {cfg.kernel_size}, stride_size {cfg.stride_size}) "
                f"shrink the {shape} image below one pixel at layer {i}; use smaller kernels or strides"
            )


def check_network_for_space(net: NetworkSpec | None, space: spaces.Space[Any]) -> None:
    """Raise :class:`EncoderSpaceError` unless the network section fits ``space`` (nested parts included)."""
    kind = encoder_kind(net, space)
    enc = net.encoder_config if net is not None else None
    if kind == "cnn" and is_image_space(space):
        check_cnn_fits(enc if isinstance(enc, CnnSpec) else CnnSpec(), space)
    if kind == "multiinput" and isinstance(space, (spaces.Dict, spaces.Tuple)):
        spec = enc if isinstance(enc, MultiInputSpec) else MultiInputSpec()
        _check_parts(spec, space)


def _check_parts(spec: MultiInputSpec, space: spaces.Dict | spaces.Tuple) -> None:
    init = spec.init_dicts or {}
    for key, cfg in part_specs(spec, space).items():
        sub = space[int(key)] if isinstance(space, spaces.Tuple) and key.isdigit() else None
        if isinstance(space, spaces.Dict) and key in space.spaces:
            sub = space[key]
        if isinstance(cfg, MultiInputSpec) and isinstance(sub, (spaces.Dict, spaces.Tuple)):
            _check_parts(cfg, sub)
        elif isinstance(cfg, CnnSpec) and sub is not None:
            where = f"init_dicts.{key}" if key in init else "cnn_config"
            check_cnn_fits(cfg, sub, f"network.encoder_config.{where}")
