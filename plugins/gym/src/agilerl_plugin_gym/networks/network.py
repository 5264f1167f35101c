"""An evolvable network: an encoder (observation -> latent) and an MLP head (latent -> outputs)."""

from __future__ import annotations

import inspect
import random
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from agilerl_plugin_gym.encoder_rules import encoder_kind
from agilerl_plugin_gym.networks.cnn import EvolvableCNN
from agilerl_plugin_gym.networks.factory import (
    LATENT_STEPS,
    build_encoder,
    default_network_spec,
    latent_range,
)
from agilerl_plugin_gym.networks.mlp import EvolvableMLP
from agilerl_plugin_gym.networks.simba import EvolvableSimBa
from agilerl_plugin_gym.sections import MlpSpec, NetworkSpec
from agilerl_plugin_gym.sections.encoders import ENCODERS
from agilerl_plugin_gym.space_kinds import is_channels_last, is_image_space

__all__ = ["EvolvableNetwork"]


def _encoder_mutations(kind: str) -> tuple[str, ...]:
    entry = ENCODERS.get(kind)
    return entry.mutations if entry is not None else ()


_HEAD_METHODS = ("add_layer", "remove_layer", "add_node", "remove_node")
_LAYER_METHODS = {"add_layer", "remove_layer", "add_block", "remove_block"}


class EvolvableNetwork(nn.Module):
    """Encoder (observation -> latent) + MLP head (latent -> ``out_dim``).

    :param encoder: the encoder (:class:`EvolvableMLP`, :class:`EvolvableCNN`, :class:`EvolvableSimBa`
        or a multi-input encoder) producing ``latent_dim`` features.
    :param head: an :class:`EvolvableMLP` from ``latent_dim`` (+ ``extra_in``) to the outputs.
    :param observation_space: the space observations come from; Discrete observations are one-hot
        encoded, images are moved to channels-first and (``normalize_images``) scaled to [0, 1];
        a multi-input encoder does this per part.
    :param extra_in: features the head reads after the latent (e.g. a critic's action):
        ``forward(obs, extra)``.
    :param detach_encoder: read the encoder without gradient (a critic reading an actor's encoder,
        AgileRL's ``share_encoders`` for DDPG/TD3).
    """

    def __init__(
        self,
        encoder: nn.Module,
        head: EvolvableMLP,
        observation_space: spaces.Space[Any],
        *,
        normalize_images: bool = True,
        latent_range: tuple[int, int] | None = None,
        encoder_arch: str | None = None,
        extra_in: int = 0,
        detach_encoder: bool = False,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.observation_space = observation_space
        self.normalize_images = normalize_images
        #: ``(min, max)`` latent size that ``latent.*`` mutations keep to (None: the latent size is fixed).
        self.latent_range = latent_range
        self.encoder_arch = (
            encoder_arch
            or getattr(encoder, "arch_name", None)
            or (
                "cnn"
                if isinstance(encoder, EvolvableCNN)
                else "simba"
                if isinstance(encoder, EvolvableSimBa)
                else "mlp"
            )
        )
        self.extra_in = int(extra_in)
        self.detach_encoder = detach_encoder
        self._one_hot = int(observation_space.n) if isinstance(observation_space, spaces.Discrete) else 0
        self._channels_last = is_image_space(observation_space) and is_channels_last(observation_space)
        #: What the encoder kind reads (its registration): how :meth:`preprocess` hands observations over.
        entry = ENCODERS.get(self.encoder_arch)
        self._reads = entry.reads if entry is not None else "vector"

    @classmethod
    def from_spec(
        cls,
        spec: NetworkSpec | None,
        observation_space: spaces.Space[Any],
        out_dim: int,
        *,
        encoder: nn.Module | None = None,
        normalize_images: bool = True,
        output_activation: str | None = None,
        output_vanish: bool | None = None,
        extra_in: int = 0,
        detach_encoder: bool = False,
    ) -> EvolvableNetwork:
        """Build from a manifest ``network`` section (``None``: :func:`default_network_spec`).

        Pass ``encoder`` to share an existing encoder (e.g. PPO's actor and critic).
        ``output_activation`` overrides the head's (e.g. ``Tanh`` for deterministic actors).
        ``extra_in`` widens the head's input (see the class).
        """
        arch: str | None = None
        if encoder is None:
            arch, encoder = build_encoder(spec, observation_space, normalize_images=normalize_images)
        elif spec is not None or not isinstance(encoder, (EvolvableMLP, EvolvableCNN, EvolvableSimBa)):
            arch = encoder_kind(spec, observation_space)
        net = spec or default_network_spec()
        head_cfg = net.head_config or MlpSpec(hidden_size=[], layer_norm=False)
        overrides: dict[str, Any] = {"min_hidden_layers": min(head_cfg.min_hidden_layers, len(head_cfg.hidden_size))}
        if output_activation is not None:
            overrides["output_activation"] = output_activation
        if output_vanish is not None:
            overrides["output_vanish"] = output_vanish
        # A shared encoder may have mutated its latent size: the head reads what it gives.
        latent = int(getattr(encoder, "out_dim", net.latent_dim))
        head = EvolvableMLP.from_spec(head_cfg, latent + int(extra_in), out_dim, **overrides)
        return cls(
            encoder,
            head,
            observation_space,
            normalize_images=normalize_images,
            latent_range=latent_range(net),
            encoder_arch=arch,
            extra_in=extra_in,
            detach_encoder=detach_encoder,
        )

    def preprocess(self, obs: Any) -> Any:
        """Observation batch as the encoder wants it (float, one-hot, channels-first)."""
        if self._one_hot:
            return nn.functional.one_hot(obs.long().flatten(), self._one_hot).float()
        if self._reads == "structured":  # per part, inside the encoder
            return obs
        if self._reads == "image":
            x = obs.float()
            if self._channels_last:
                x = x.permute(0, 3, 1, 2)
            return x / 255.0 if self.normalize_images else x
        return obs.float().flatten(1) if obs.dim() > 2 else obs.float()

    def forward(self, obs: Any, extra: torch.Tensor | None = None) -> torch.Tensor:
        z = self.latent(obs)
        if extra is not None:
            z = torch.cat([z, extra], dim=-1)
        return self.head(z)

    def latent(self, obs: Any) -> torch.Tensor:
        if self.detach_encoder:
            with torch.no_grad():
                return self.encoder(self.preprocess(obs))
        return self.encoder(self.preprocess(obs))

    # --- evolution -----------------------------------------------------------------------------
    def mutation_methods(self) -> list[str]:
        """Names accepted by :meth:`apply_mutation`, e.g. ``"encoder.add_node"``; ``"latent.add_node"``
        and ``"latent.remove_node"`` when a latent range is set and both parts can be resized."""
        own = getattr(self.encoder, "mutation_names", None)
        encoder = list(own()) if callable(own) else list(_encoder_mutations(self.encoder_arch))
        methods = [f"encoder.{m}" for m in encoder] + [f"head.{m}" for m in _HEAD_METHODS]
        resizable = hasattr(self.encoder, "resize_output") and hasattr(self.head, "resize_input")
        return methods + (["latent.add_node", "latent.remove_node"] if self.latent_range and resizable else [])

    @property
    def latent_dim(self) -> int:
        """Width of the encoder output the head reads."""
        encoder: Any = self.encoder  # every encoder kind has out_dim
        return int(encoder.out_dim)

    def set_latent_dim(self, latent_dim: int) -> bool:
        """Resize the encoder output and the head input to ``latent_dim`` (weights kept where the
        shapes overlap; new head inputs start at zero weight; the ``extra_in`` inputs after the latent,
        e.g. a critic's action, keep theirs). Returns whether anything changed."""
        encoder: Any = self.encoder  # only encoders with resize_output offer latent.* mutations
        changed = bool(encoder.resize_output(latent_dim)) if encoder.out_dim != latent_dim else False
        return bool(self.head.resize_input(latent_dim + self.extra_in, keep_tail=self.extra_in)) or changed

    @property
    def activation(self) -> str | None:
        """The hidden activation (the encoder's; the head's when the encoder has none)."""
        return getattr(self.encoder, "activation", None) or getattr(self.head, "activation", None)

    def set_activation(self, name: str) -> bool:
        """Activation mutation: ``name`` after every hidden layer of the encoder (its output too, which
        feeds the head like a hidden layer) and of the head (not the head's output). Weights are kept.
        Parts without ``set_activation`` keep theirs. Returns whether anything changed."""
        changed = False
        for part, output in ((self.encoder, True), (self.head, False)):
            setter = getattr(part, "set_activation", None)
            if setter is not None:
                changed |= bool(setter(name, output=output))
        return changed

    def apply_mutation(self, method: str, rng: random.Random | None = None) -> bool:
        """Apply ``"encoder.<m>"``, ``"head.<m>"`` or ``"latent.<m>"``; returns whether anything changed."""
        part, _, name = method.partition(".")
        if part == "latent":
            assert self.latent_range is not None
            step = (rng or random.Random()).choice(LATENT_STEPS)
            lo, hi = self.latent_range
            target = self.latent_dim + step if name == "add_node" else self.latent_dim - step
            return self.set_latent_dim(min(max(target, lo), hi))
        module = self.encoder if part == "encoder" else self.head
        fn = getattr(module, name)
        return bool(fn(rng=rng) if "rng" in inspect.signature(fn).parameters else fn())

    def sample_mutation(self, rng: random.Random, new_layer_prob: float) -> str:
        """Pick a method: layer-level with probability ``new_layer_prob``, else node-level."""
        methods = self.mutation_methods()
        layer = [m for m in methods if m.split(".")[1] in _LAYER_METHODS]
        node = [m for m in methods if m not in layer]
        return rng.choice(layer if rng.random() < new_layer_prob else node)

    def arch(self) -> dict[str, Any]:
        encoder: Any = self.encoder  # every encoder kind has arch() / set_arch()
        return {"encoder": encoder.arch(), "head": self.head.arch()}

    def set_arch(self, arch: dict[str, Any]) -> None:
        encoder: Any = self.encoder
        if arch["encoder"] != encoder.arch():
            encoder.set_arch(arch["encoder"])
        if arch["head"] != self.head.arch():
            self.head.set_arch(arch["head"])
