"""Multi-input encoders for ``Dict`` / ``Tuple`` observation spaces (AgileRL's ``arch: multiinput``).

One sub-encoder per part, as AgileRL builds them:

* an image part (rank-3 ``Box``, H x W x C or C x H x W; uint8 scaled to [0, 1] with
  ``normalize_images``) gets an :class:`~agilerl_plugin_gym.networks.EvolvableCNN` from
  ``cnn_config`` (default: two 3x3 stride-1 convs of 16 channels) with ``latent_dim`` outputs;
* a nested Dict/Tuple part gets a nested multi-input encoder with the same config;
* vector parts (``Box`` of rank 1-2, ``Discrete`` one-hot, ``MultiDiscrete``, ``MultiBinary``) are
  flattened and concatenated; with ``vector_space_mlp: true`` the concatenation goes through one
  :class:`~agilerl_plugin_gym.networks.EvolvableMLP` (``mlp_config``) to ``latent_dim`` features.

``init_dicts`` gives one part (by key; a Tuple's parts are ``"0"``, ``"1"``, ...; the vector MLP is
``"vector_mlp"``) a config of its own. Everything is concatenated and a linear layer maps it to the
network's latent size, followed by ``output_activation`` (default ReLU: the latent is a hidden
representation).

Architecture mutation, as AgileRL mutates it: the sub-encoders' own mutations (conv layers and
channels of the CNNs, layers and nodes of the vector MLP; each applies to one part, drawn from the
mutation's RNG), and ``add_latent_node`` / ``remove_latent_node``, which change the per-part
``latent_dim`` within ``min_latent_dim``/``max_latent_dim`` keeping the surviving weights. The
encoder's own output size never changes, so the heads stay valid.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from agilerl_plugin_gym.encoder_rules import part_specs
from agilerl_plugin_gym.networks.cnn import EvolvableCNN
from agilerl_plugin_gym.networks.layers import activation_layer, image_chw, load_overlapping, obs_dim
from agilerl_plugin_gym.networks.mlp import EvolvableMLP
from agilerl_plugin_gym.observations import subspaces
from agilerl_plugin_gym.sections import CnnSpec, MlpSpec, MultiInputSpec
from agilerl_plugin_gym.space_kinds import is_channels_last, is_image_space, is_structured_space

__all__ = ["EvolvableMultiInput"]

_LAYER = ("add_layer", "remove_layer")
_SUB_NODE = ("add_node", "remove_node", "add_channel", "remove_channel")
_LATENT = ("add_latent_node", "remove_latent_node")


class EvolvableMultiInput(nn.Module):
    """Dict/Tuple observation batch -> ``out_dim`` features (see the module docstring).

    :param observation_space: a ``Dict`` or ``Tuple`` space.
    :param out_dim: output features (the network's ``latent_dim``).
    :param spec: the ``encoder_config`` (default: AgileRL's defaults).
    :param normalize_images: scale image parts by 1/255.
    """

    layer_methods = _LAYER
    node_methods = (*_SUB_NODE, *_LATENT)

    def __init__(
        self,
        observation_space: spaces.Dict | spaces.Tuple,
        out_dim: int,
        spec: MultiInputSpec | None = None,
        *,
        normalize_images: bool = True,
    ) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.out_dim = int(out_dim)
        self.spec = spec or MultiInputSpec()
        self.normalize_images = normalize_images
        self.parts = subspaces(observation_space)
        self.part_configs = part_specs(self.spec, observation_space)
        self.latent_dim = self.spec.latent_dim
        self.min_latent_dim, self.max_latent_dim = self.spec.min_latent_dim, self.spec.max_latent_dim
        self.image_keys = [k for k, s in self.parts.items() if is_image_space(s)]
        self.nested_keys = [k for k, s in self.parts.items() if is_structured_space(s)]
        self.vector_keys = [k for k in self.parts if k not in self.image_keys and k not in self.nested_keys]
        self.vector_dim = sum(obs_dim(self.parts[k]) for k in self.vector_keys)
        self._channels_last = {k: is_channels_last(self.parts[k]) for k in self.image_keys}
        self._build()

    # --- structure -----------------------------------------------------------------------------
    def _build(self) -> None:
        self.extractors = nn.ModuleDict()
        for key in self.image_keys:
            cfg = self.part_configs[key]
            assert isinstance(cfg, CnnSpec)
            cnn = EvolvableCNN.from_spec(cfg, image_chw(self.parts[key]), self.latent_dim)
            self.extractors[key] = cnn
        for key in self.nested_keys:
            cfg = self.part_configs[key]
            sub = self.parts[key]
            assert isinstance(cfg, MultiInputSpec) and isinstance(sub, (spaces.Dict, spaces.Tuple))
            self.extractors[key] = EvolvableMultiInput(
                sub, self.latent_dim, cfg, normalize_images=self.normalize_images
            )
        self.vector_mlp: EvolvableMLP | None = None
        if self.spec.vector_space_mlp and self.vector_dim:
            mlp = self.part_configs["vector_mlp"]
            assert isinstance(mlp, MlpSpec)
            self.vector_mlp = EvolvableMLP.from_spec(
                mlp, self.vector_dim, self.latent_dim, output_activation=mlp.activation, output_vanish=False
            )
        vector_features = self.latent_dim if self.vector_mlp is not None else self.vector_dim
        features = self.latent_dim * len(self.extractors) + vector_features
        self.final = nn.Linear(features, self.out_dim)
        self.output_act = activation_layer(self.spec.output_activation or "ReLU")

    def _vector(self, key: str, x: torch.Tensor) -> torch.Tensor:
        space = self.parts[key]
        if isinstance(space, spaces.Discrete):
            return nn.functional.one_hot(x.long().reshape(-1) - int(space.start), int(space.n)).float()
        x = x.float()
        return x.reshape(x.shape[0], -1) if x.dim() != 1 else x.unsqueeze(1)

    def _image(self, key: str, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if self._channels_last[key]:
            x = x.permute(0, 3, 1, 2)
        return x / 255.0 if self.normalize_images else x

    def forward(self, obs: Any) -> torch.Tensor:
        if isinstance(obs, (tuple, list)):
            obs = {str(i): v for i, v in enumerate(obs)}
        feats = []
        for key in self.image_keys:
            feats.append(self.extractors[key](self._image(key, obs[key])))
        for key in self.nested_keys:
            feats.append(self.extractors[key](obs[key]))
        if self.vector_keys:
            vec = torch.cat([self._vector(k, obs[k]) for k in self.vector_keys], dim=1)
            feats.append(self.vector_mlp(vec) if self.vector_mlp is not None else vec)
        return self.output_act(self.final(torch.cat(feats, dim=1)))

    def arch(self) -> dict[str, Any]:
        return {
            "latent_dim": self.latent_dim,
            "parts": {k: _evolvable(m).arch() for k, m in self.extractors.items()},
            "vector_mlp": self.vector_mlp.arch() if self.vector_mlp is not None else None,
        }

    def set_arch(self, arch: dict[str, Any]) -> None:
        """Rebuild with the given shape (weights re-initialised; load them afterwards)."""
        device = self.final.weight.device
        self.latent_dim = int(arch["latent_dim"])
        self._build()
        for key, sub in arch["parts"].items():
            module = _evolvable(self.extractors[key])
            if module.arch() != sub:
                module.set_arch(sub)
        if self.vector_mlp is not None and arch.get("vector_mlp") is not None:
            if self.vector_mlp.arch() != arch["vector_mlp"]:
                self.vector_mlp.set_arch(arch["vector_mlp"])
        self.to(device)

    # --- mutations -----------------------------------------------------------------------------
    def _evolvable_parts(self) -> list[tuple[str, nn.Module]]:
        parts: list[tuple[str, nn.Module]] = list(self.extractors.items())
        if self.vector_mlp is not None:
            parts.append(("vector_mlp", self.vector_mlp))
        return parts

    def mutation_names(self) -> list[str]:
        """The mutations this encoder can apply (its parts' and the latent-size ones)."""
        names: set[str] = set()
        for _, module in self._evolvable_parts():
            sub = module.mutation_names() if isinstance(module, EvolvableMultiInput) else _module_methods(module)
            names.update(sub)
        return [m for m in (*_LAYER, *_SUB_NODE) if m in names] + list(_LATENT)

    def _apply_to_part(self, method: str, rng: random.Random | None) -> bool:
        rng = rng or random.Random()
        able = [
            m
            for _, m in self._evolvable_parts()
            if method in (m.mutation_names() if isinstance(m, EvolvableMultiInput) else _module_methods(m))
        ]
        if not able:
            return False
        module = rng.choice(able)
        fn = getattr(module, method)
        if isinstance(module, EvolvableMultiInput) or method not in _LAYER:
            return bool(fn(rng=rng))
        return bool(fn())

    def add_layer(self, *, rng: random.Random | None = None) -> bool:
        return self._apply_to_part("add_layer", rng)

    def remove_layer(self, *, rng: random.Random | None = None) -> bool:
        return self._apply_to_part("remove_layer", rng)

    def add_node(self, *, rng: random.Random | None = None) -> bool:
        return self._apply_to_part("add_node", rng)

    def remove_node(self, *, rng: random.Random | None = None) -> bool:
        return self._apply_to_part("remove_node", rng)

    def add_channel(self, *, rng: random.Random | None = None) -> bool:
        return self._apply_to_part("add_channel", rng)

    def remove_channel(self, *, rng: random.Random | None = None) -> bool:
        return self._apply_to_part("remove_channel", rng)

    def _final_columns(self, latent: int) -> list[tuple[int, int]]:
        """``(start, width)`` of each part's features in ``final``'s input, in ``forward``'s order."""
        widths = [latent] * len(self.extractors)
        if self.vector_keys:
            widths.append(latent if self.vector_mlp is not None else self.vector_dim)
        return list(zip(itertools.accumulate([0, *widths[:-1]]), widths, strict=True))

    def _resize_latent(self, new: int) -> None:
        old_state = {k: v.detach().clone() for k, v in self.state_dict().items()}
        old_columns = self._final_columns(self.latent_dim)
        device = self.final.weight.device
        arch = self.arch()
        arch["latent_dim"] = new
        # The parts' saved shapes name their output size (the per-part latent): give them the new one.
        for sub in [*arch["parts"].values(), arch["vector_mlp"]]:
            if sub is not None and "out_dim" in sub:
                sub["out_dim"] = new
        self.set_arch(arch)
        load_overlapping(self, old_state)
        # ``final`` reads the parts one after another: each part's surviving columns move to its new
        # offset, and new features start at zero weight (a wider latent keeps the output).
        with torch.no_grad():
            weight, old_weight = self.final.weight, old_state["final.weight"].to(device)
            weight.zero_()
            for (a, n_a), (b, n_b) in zip(old_columns, self._final_columns(new), strict=True):
                k = min(n_a, n_b)
                weight[:, b : b + k] = old_weight[:, a : a + k]
        self.to(device)

    def add_latent_node(self, numb_new_nodes: int | None = None, *, rng: random.Random | None = None) -> bool:
        """Widen every part's output by 8, 16 or 32 features (below ``max_latent_dim``)."""
        n = numb_new_nodes if numb_new_nodes is not None else (rng or random.Random()).choice([8, 16, 32])
        if not self.extractors and self.vector_mlp is None:
            return False
        if self.latent_dim + n > self.max_latent_dim:
            return False
        self._resize_latent(self.latent_dim + n)
        return True

    def remove_latent_node(self, numb_new_nodes: int | None = None, *, rng: random.Random | None = None) -> bool:
        """Narrow every part's output by 8, 16 or 32 features (above ``min_latent_dim``)."""
        n = numb_new_nodes if numb_new_nodes is not None else (rng or random.Random()).choice([8, 16, 32])
        if not self.extractors and self.vector_mlp is None:
            return False
        if self.latent_dim - n < self.min_latent_dim:
            return False
        self._resize_latent(self.latent_dim - n)
        return True


def _evolvable(module: nn.Module) -> Any:
    """A part's encoder (a CNN or a nested multi-input encoder: both have arch() / set_arch())."""
    return module


def _module_methods(module: nn.Module) -> tuple[str, ...]:
    if isinstance(module, EvolvableCNN):
        return ("add_layer", "remove_layer", "add_channel", "remove_channel")
    return ("add_layer", "remove_layer", "add_node", "remove_node")
