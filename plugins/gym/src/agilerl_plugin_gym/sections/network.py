"""The ``network`` section (pydantic only: no torch): an encoder and a head.

Registered with core through ``agilerl_register_sections``: core knows that a manifest has a
``network`` section, this plugin what is in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from operator import or_
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator, model_validator

from agilerl.models.base import Spec
from agilerl_plugin_gym.sections.encoders import ENCODERS, MlpSpec, infer_encoder_arch, on_encoders_changed

__all__ = ["EncoderSpec", "NetworkSpec", "encoder_spec_type"]


def encoder_spec_type() -> Any:
    """``encoder_config``'s type: one of the kinds registered now, told apart by ``arch``."""
    return Annotated[reduce(or_, [k.spec for k in ENCODERS.values()]), Field(discriminator="arch")]


def _reference_parts() -> tuple[tuple[str, type[Spec]], ...]:
    return tuple(
        (f"network.encoder_config{' / head_config' if k.arch == 'mlp' else ''} (arch: {k.arch})", k.spec)
        for k in ENCODERS.values()
        if k.builder is not None
    )


#: ``encoder_config`` of the kinds registered when this module was imported (the built-in ones);
#: :class:`NetworkSpec` itself follows every later registration.
EncoderSpec = encoder_spec_type()


class NetworkSpec(Spec):
    """Network architecture: an encoder and a head.

    Fields an algorithm spec lists in ``lifted_network_fields`` may be written here too; they are
    moved onto the algorithm at validation and are not part of this section. An ``encoder_config``
    without ``arch`` gets the one its keys describe (:func:`infer_encoder_arch`); the dump always
    writes it, so a stored manifest re-validates to the same spec.
    """

    upstream_notes: ClassVar[dict[str, str]] = {
        "latent_dim": "Default 64 (AgileRL: 128). See each plugin for how its networks use it.",
        "min_latent_dim": "Default none: the latent size mutates only when a bound is given (AgileRL: 8, "
        "always on); plugins that cannot resize it refuse it.",
        "max_latent_dim": "As min_latent_dim (AgileRL's default 128).",
        "encoder_config": "Without arch: inferred from the keys (mlp, cnn, lstm, cnn_lstm, simba, multiinput); "
        "AgileRL infers it from the observation space. Plugins refuse kinds their networks lack.",
        "random_seed": "Refused by every plugin we ship (not supported yet): seed the run with training.seed.",
        "simba": "true: a SimBa encoder (as arch: simba); each plugin documents where its networks take it.",
        "has_evolvable_encoder": "Refused whenever set (not supported yet): AgileRL's flag has no counterpart here.",
    }

    #: The reference page's sub-sections (``agilerl schema --markdown``): one per encoder kind with a network.
    reference_parts: ClassVar[tuple[tuple[str, type[Spec]], ...]] = _reference_parts()

    latent_dim: Annotated[int, Field(ge=1)] = 64
    min_latent_dim: Annotated[int | None, Field(ge=1, description="Smallest latent_dim mutation may reach.")] = None
    max_latent_dim: Annotated[int | None, Field(ge=1, description="Largest latent_dim mutation may reach.")] = None
    encoder_config: EncoderSpec | None = None  # type: ignore[valid-type]
    head_config: MlpSpec | None = None
    random_seed: int | None = None
    simba: bool = False
    has_evolvable_encoder: Annotated[
        Any, Field(exclude=True, description="AgileRL's flag; not supported yet: refused whenever it is set.")
    ] = None

    @field_validator("has_evolvable_encoder")
    @classmethod
    def _no_evolvable_encoder_flag(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError(
                "not supported yet (AgileRL's has_evolvable_encoder flag has no counterpart here); remove it"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _top_level_arch(cls, data: Any) -> Any:
        # AgileRL accepts `arch` at the top of the section; it belongs to the encoder.
        if isinstance(data, dict) and "arch" in data:
            data = dict(data)
            arch = data.pop("arch")
            enc = dict(data.get("encoder_config") or {})
            enc.setdefault("arch", arch)
            data["encoder_config"] = enc
        if isinstance(data, dict) and isinstance(data.get("encoder_config"), Mapping):
            enc = dict(data["encoder_config"])
            if "arch" not in enc:
                enc["arch"] = "simba" if data.get("simba") is True else infer_encoder_arch(enc)
                data = {**data, "encoder_config": enc}
            elif enc["arch"] not in ENCODERS:
                raise ValueError(
                    f"encoder_config.arch {enc['arch']!r} is not an encoder kind; use one of {', '.join(ENCODERS)}"
                )
        return data

    @model_validator(mode="after")
    def _latent_range(self) -> NetworkSpec:
        lo, hi = self.min_latent_dim, self.max_latent_dim
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"min_latent_dim ({lo}) must be <= max_latent_dim ({hi})")
        if (lo is not None and self.latent_dim < lo) or (hi is not None and self.latent_dim > hi):
            raise ValueError(f"latent_dim ({self.latent_dim}) must lie in [min_latent_dim, max_latent_dim]")
        return self


def _rebuild() -> None:
    """Make ``encoder_config`` (and the reference page's parts) the union of the kinds registered now."""
    NetworkSpec.model_fields["encoder_config"].annotation = encoder_spec_type() | None
    NetworkSpec.reference_parts = _reference_parts()
    NetworkSpec.model_rebuild(force=True)


on_encoders_changed(_rebuild)
