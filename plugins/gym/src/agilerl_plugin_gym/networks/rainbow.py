"""RainbowDQN's network: noisy linear layers, a dueling head and a C51 value distribution.

* :class:`NoisyLinear` — factorised-Gaussian NoisyNet layer (Fortunato et al. 2018):
  ``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b`` with ``eps_w = f(eps_out) f(eps_in)^T``
  and ``f(x) = sign(x) sqrt(|x|)``; ``sigma`` starts at ``noise_std / sqrt(fan_in)``. In eval mode
  (greedy evaluation), or with ``forward(x, noisy=False)``, the noise is off. ``weight``/``bias`` are the means, so the evolvable MLP's
  mutations (which copy ``weight`` and ``bias``) keep them; a rebuilt layer's sigmas start afresh.
* :class:`NoisyMLP` — :class:`~agilerl_plugin_gym.networks.EvolvableMLP` with noisy layers.
* :class:`RainbowNetwork` — MLP/CNN encoder, then two noisy streams (Wang et al. 2016): value
  ``V`` (``num_atoms`` outputs) and advantage ``A`` (``actions x num_atoms``), combined as
  ``V + A - mean_a A`` per atom, soft-maxed over atoms into a distribution on a fixed support
  ``linspace(v_min, v_max, num_atoms)`` (Bellemare et al. 2017). ``forward`` gives Q-values
  (expectations); :meth:`RainbowNetwork.dist` the distributions. Architecture mutation of the head
  changes both streams alike, as do activation mutation and a latent resize.
* :func:`project_distribution` — C51's projection of ``r + discount * z`` back onto the support.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from agilerl_plugin_gym.networks.mlp import EvolvableMLP
from agilerl_plugin_gym.networks.network import EvolvableNetwork
from agilerl_plugin_gym.sections import NetworkSpec

__all__ = ["NoisyLinear", "NoisyMLP", "RainbowNetwork", "project_distribution"]


class NoisyLinear(nn.Linear):
    """A linear layer with learned factorised Gaussian noise on its weights and bias."""

    weight_eps: torch.Tensor
    bias_eps: torch.Tensor

    def __init__(self, in_features: int, out_features: int, noise_std: float = 0.5) -> None:
        self.noise_std = float(noise_std)
        super().__init__(in_features, out_features)
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("weight_eps", torch.zeros(out_features, in_features))
        self.register_buffer("bias_eps", torch.zeros(out_features))
        self.reset_sigma()
        self.reset_noise()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def reset_sigma(self) -> None:
        with torch.no_grad():
            self.weight_sigma.fill_(self.noise_std / math.sqrt(self.in_features))
            self.bias_sigma.fill_(self.noise_std / math.sqrt(self.out_features))

    def reset_noise(self) -> None:
        """Draw fresh noise (torch's global generator: checkpointed with the run)."""
        with torch.no_grad():
            eps = _scaled_noise(self.in_features + self.out_features, self.weight.device)
            eps_in, eps_out = eps[: self.in_features], eps[self.in_features :]
            torch.outer(eps_out, eps_in, out=self.weight_eps)
            self.bias_eps.copy_(eps_out)

    def weights(self, noisy: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The weight and bias this layer applies: the means, or with noise the noisy ones."""
        # The tensors from Module's own dicts: each ``self.weight`` is a __getattr__ fallback, and
        # six of them cost about as much as this layer's matmul.
        p, b = self._parameters, self._buffers
        if not (self.training if noisy is None else noisy):
            return p["weight"], p["bias"]  # type: ignore[return-value]
        weight = torch.addcmul(p["weight"], p["weight_sigma"], b["weight_eps"])  # type: ignore[arg-type]
        return weight, torch.addcmul(p["bias"], p["bias_sigma"], b["bias_eps"])  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor, noisy: bool | None = None) -> torch.Tensor:
        return nn.functional.linear(x, *self.weights(noisy))


def _scaled_noise(size: int, device: torch.device) -> torch.Tensor:
    """``f(x) = sign(x) sqrt(|x|)`` of ``size`` standard normals (torch's global generator)."""
    x = torch.randn(size).to(device)
    return x.abs().sqrt_().copysign_(x)


class NoisyMLP(EvolvableMLP):
    """An evolvable MLP whose linear layers (hidden and output) are :class:`NoisyLinear`."""

    def __init__(self, *args: Any, noise_std: float = 0.5, **kwargs: Any) -> None:
        self.noise_std = float(noise_std)
        super().__init__(*args, **kwargs)

    @classmethod
    def like(cls, mlp: EvolvableMLP, noise_std: float) -> NoisyMLP:
        """A noisy MLP with ``mlp``'s shape, activations and mutation bounds (fresh weights)."""
        return cls(
            mlp.in_dim, mlp.out_dim, mlp.hidden_size, activation=mlp.activation,
            output_activation=mlp.output_activation, layer_norm=mlp.layer_norm, init_layers=False,
            min_hidden_layers=mlp.min_hidden_layers, max_hidden_layers=mlp.max_hidden_layers,
            min_mlp_nodes=mlp.min_mlp_nodes, max_mlp_nodes=mlp.max_mlp_nodes, noise_std=noise_std,
        )  # fmt: skip

    def _build(self) -> None:
        super()._build()
        std = self.noise_std
        self.linears = nn.ModuleList(NoisyLinear(lin.in_features, lin.out_features, std) for lin in self._layers()[:-1])
        self.output = NoisyLinear(self.output.in_features, self.output.out_features, std)
        self._refresh_forward()

    def forward(self, x: torch.Tensor, noisy: bool | None = None) -> torch.Tensor:
        """As the plain MLP; ``noisy`` (default: train mode) switches the layers' noise on or off."""
        noisy = self.training if noisy is None else noisy
        for module in self.layer_chain:
            x = module.forward(x, noisy) if module.__class__ is NoisyLinear else module.forward(x)
        return x

    def forward_pair(
        self, x: torch.Tensor, x2: torch.Tensor, noisy: bool | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward`` of two batches under the same (noisy) weights, built once; the second
        output carries no gradient (``x2`` must not need one)."""
        noisy = self.training if noisy is None else noisy
        linear = nn.functional.linear
        for module in self.layer_chain:
            if module.__class__ is NoisyLinear:
                weight, bias = module.weights(noisy)  # type: ignore[operator]
                x, x2 = linear(x, weight, bias), linear(x2, weight.detach(), bias.detach())
            else:
                x, x2 = module.forward(x), module.forward(x2)
        return x, x2


class RainbowNetwork(EvolvableNetwork):
    """Encoder + dueling noisy distributional head (see module docstring).

    :param support: the atoms' values, shape ``(num_atoms,)``.
    """

    head: NoisyMLP
    value_head: NoisyMLP
    support: torch.Tensor

    def __init__(
        self,
        encoder: Any,
        head: NoisyMLP,
        value_head: NoisyMLP,
        observation_space: spaces.Space[Any],
        *,
        n_actions: int,
        support: torch.Tensor,
        normalize_images: bool = True,
        latent_range: tuple[int, int] | None = None,
        encoder_arch: str | None = None,
    ) -> None:
        super().__init__(encoder, head, observation_space, normalize_images=normalize_images,
                         latent_range=latent_range, encoder_arch=encoder_arch)  # fmt: skip
        self.value_head = value_head
        self.n_actions = int(n_actions)
        self.num_atoms = int(support.numel())
        self.register_buffer("support", support.clone())
        #: Noisy layers on (acting, learning) or off (greedy evaluation); ``train``/``eval`` set it too.
        self.noisy = True
        self._noise_plan: tuple[list[NoisyLinear], torch.Tensor, list[Any]] | None = None

    def train(self, mode: bool = True) -> RainbowNetwork:
        super().train(mode)
        self.noisy = mode
        return self

    @classmethod
    def build(
        cls,
        spec: NetworkSpec | None,
        observation_space: spaces.Space[Any],
        n_actions: int,
        *,
        support: torch.Tensor,
        noise_std: float,
        normalize_images: bool = True,
    ) -> RainbowNetwork:
        atoms = int(support.numel())
        base = EvolvableNetwork.from_spec(spec, observation_space, n_actions * atoms, normalize_images=normalize_images)
        advantage = NoisyMLP.like(base.head, noise_std)
        value = NoisyMLP.like(base.head, noise_std)
        value.out_dim = atoms
        value._build()
        return cls(base.encoder, advantage, value, observation_space, n_actions=n_actions, support=support,
                   normalize_images=normalize_images, latent_range=base.latent_range,
                   encoder_arch=base.encoder_arch)  # fmt: skip

    def logits(self, obs: Any) -> torch.Tensor:
        """Per-action, per-atom logits ``(batch, actions, atoms)`` (dueling combination)."""
        z = self.encoder(self.preprocess(obs))
        return self.dueling(self.head(z, self.noisy), self.value_head(z, self.noisy))

    def logits_pair(self, obs: Any, other: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`logits` of ``obs`` and, without gradient, of ``other`` under the same noise.

        The noisy weights are built once for both (a learn step's online pass over the batch's
        observations and its next observations).
        """
        z = self.encoder(self.preprocess(obs))
        with torch.no_grad():
            z2 = self.encoder(self.preprocess(other))
        adv, adv2 = self.head.forward_pair(z, z2, self.noisy)
        value, value2 = self.value_head.forward_pair(z, z2, self.noisy)
        return self.dueling(adv, value), self.dueling(adv2, value2)

    def dueling(self, adv: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        adv = adv.view(-1, self.n_actions, self.num_atoms)
        return value.view(-1, 1, self.num_atoms) + adv - adv.mean(1, keepdim=True)

    def dist(self, obs: Any, *, log: bool = False) -> torch.Tensor:
        """Return distributions ``(batch, actions, atoms)`` (log-probabilities with ``log``)."""
        logits = self.logits(obs)
        return logits.log_softmax(-1) if log else logits.softmax(-1)

    def forward(self, obs: Any, extra: torch.Tensor | None = None) -> torch.Tensor:
        """Q-values ``(batch, actions)``: the expectations of the distributions (no ``extra`` inputs)."""
        if extra is not None:
            raise ValueError("RainbowNetwork reads observations only (no extra head inputs)")
        return self.q_values(self.logits(obs))

    def q_values(self, logits: torch.Tensor) -> torch.Tensor:
        """Q-values ``(batch, actions)`` from :meth:`logits`."""
        return torch.matmul(logits.softmax(-1), self.support)

    def noisy_layers(self) -> list[NoisyLinear]:
        """Every noisy layer, advantage stream first (the order :meth:`reset_noise` fills them in)."""
        layers = [*self.head.linears, self.head.output, *self.value_head.linears, self.value_head.output]
        return layers  # type: ignore[return-value]

    def reset_noise(self) -> None:
        """Fresh noise for every noisy layer of both streams, from one draw.

        The draw fills one vector whose slices are the layers' ``eps_in``/``eps_out`` (each
        layer's ``bias_eps`` is its ``eps_out`` slice), so a reset is the draw plus one outer
        product per layer. The layout is rebuilt whenever the layers or their buffers changed
        (mutation, ``.to()``, a copy), checked on every call.
        """
        layers = self.noisy_layers()
        plan = self._noise_plan
        if (
            plan is None
            or plan[0] != layers
            or any(
                lin.weight_eps is not w or lin.bias_eps is not o for lin, (w, o, _) in zip(layers, plan[2], strict=True)
            )
        ):
            plan = self._noise_plan = self._plan_noise(layers)
        _, eps, outers = plan
        eps.copy_(_scaled_noise(eps.numel(), eps.device))
        for weight_eps, eps_out, eps_in in outers:
            torch.outer(eps_out, eps_in, out=weight_eps)

    def _plan_noise(self, layers: list[NoisyLinear]) -> tuple[list[NoisyLinear], torch.Tensor, list[Any]]:
        eps = torch.zeros(sum(lin.in_features + lin.out_features for lin in layers), device=self.support.device)
        outers, start = [], 0
        for lin in layers:
            mid, end = start + lin.in_features, start + lin.in_features + lin.out_features
            eps[mid:end].copy_(lin.bias_eps)
            lin.bias_eps = eps[mid:end]  # the registered buffer, now a view of the draw
            outers.append((lin.weight_eps, lin.bias_eps, eps[start:mid]))
            start = end
        return layers, eps, outers

    # --- evolution: the value stream follows every head mutation --------------------------------
    def apply_mutation(self, method: str, rng: random.Random | None = None) -> bool:
        part = method.partition(".")[0]
        if part != "head":
            return super().apply_mutation(method, rng)
        seed = (rng or random.Random()).getrandbits(32)
        changed = super().apply_mutation(method, random.Random(seed))
        name = method.partition(".")[2]
        fn = getattr(self.value_head, name)
        changed |= bool(fn() if name in ("add_layer", "remove_layer") else fn(rng=random.Random(seed)))
        return changed

    def set_activation(self, name: str) -> bool:
        changed = super().set_activation(name)
        return bool(self.value_head.set_activation(name)) or changed

    def set_latent_dim(self, latent_dim: int) -> bool:
        changed = super().set_latent_dim(latent_dim)
        return bool(self.value_head.resize_input(latent_dim)) or changed

    def arch(self) -> dict[str, Any]:
        return {**super().arch(), "value_head": self.value_head.arch()}

    def set_arch(self, arch: dict[str, Any]) -> None:
        super().set_arch(arch)
        if arch["value_head"] != self.value_head.arch():
            self.value_head.set_arch(arch["value_head"])


def project_distribution(
    next_dist: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """C51's target: the distribution of ``reward + discount * Z`` projected onto ``support``.

    ``next_dist`` is ``(batch, atoms)`` (the target distribution of the next state's chosen action),
    ``reward`` and ``discount`` are ``(batch,)`` (``discount`` is 0 after termination). Each shifted
    atom is clamped to ``[v_min, v_max]`` and its probability split between its two neighbouring
    atoms in proportion to closeness (all of it to one atom when it lands exactly on it).
    """
    n = support.numel()
    v_min, v_max = support[[0, -1]].tolist()
    if n == 1:
        return next_dist.clone()
    # The shifted atoms' positions in units of atoms: b in [0, n - 1]. Atom floor(b) gets
    # p * (1 - frac(b)) and the next one p * frac(b) (all of it to floor(b) on an exact landing;
    # b = n - 1 splits from n - 2 with weight 1 on the last atom). Two scatter-adds along the
    # atoms: O(batch x atoms), not the dense (batch, atoms, atoms) split.
    b = torch.addcmul(reward.unsqueeze(1), discount.unsqueeze(1), support.unsqueeze(0)).clamp_(v_min, v_max)
    b = b.sub_(v_min).mul_((n - 1) / (v_max - v_min))
    lower = b.floor().clamp_(max=n - 2)
    upper_p = next_dist * b.sub_(lower)
    index = lower.long()
    out = torch.zeros_like(next_dist)
    out.scatter_add_(1, index, next_dist - upper_p)
    return out.scatter_add_(1, index + 1, upper_p)
