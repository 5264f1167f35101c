"""What NeuralUCB and NeuralTS share: a reward network, a diagonal design matrix, a replay memory.

Both fit a network ``f(x; theta)`` to the rewards seen so far and measure how uncertain its
prediction for a new context is by ``sigma^2(x) = g^T U^-1 g / m`` with ``g = df/dtheta``,
``m`` the network width and ``U = lamb I + sum_t g_t g_t^T / m`` (Zhou et al., 2020). We keep only
the diagonal of ``U`` (``lamb + sum_t g_t**2 / m``, one number per parameter), so acting and
updating cost time and memory linear in the number of parameters instead of quadratic, and the
gradients of *every* layer count, not just the last one's.

They differ only in how ``mu(x)`` and ``sigma(x)`` make a score (:meth:`NeuralBandit.score`):
NeuralUCB adds ``gamma * sigma``, NeuralTS samples ``N(mu, (gamma * sigma)^2)``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from agilerl.algorithm import AlgorithmBase
from agilerl_plugin_bandit.env import BanditEnvProtocol
from agilerl_plugin_bandit.networks import BanditMemory, RewardNet, adam_state
from agilerl_plugin_bandit.specs import BanditSpec
from agilerl_plugin_gym.optim import FlatAdam

#: Hidden layers a network may grow to, and the widest a hidden layer may be (architecture mutation).
MAX_HIDDEN_LAYERS = 4
MAX_NODES = 256
#: Mixed into the agent's numpy seed so its draws never mirror an env seeded with the same number.
_STREAM = 0xBA2D17


class NeuralBandit(AlgorithmBase):
    """A neural contextual bandit implementing agilerl's algorithm protocol.

    :param spec: the validated algorithm section (hyperparameters are copied onto the agent).
    :param context_dim: size of one arm's context.
    :param arms: number of arms.
    :param hidden_size: hidden layer widths of the reward network.
    :param activation: hidden activation.
    :param memory_size: (context, reward) pairs kept for learning.
    :param index: identity in the population.
    :param device: torch device.
    :param seed: seeds the initial weights, minibatch sampling and (NeuralTS) posterior draws.
    """

    #: Rewards that make the fitness: the mean reward over the agent's most recent steps.
    fitness_window: ClassVar[int] = 500

    spec: BanditSpec

    def __init__(
        self,
        spec: BanditSpec,
        *,
        context_dim: int,
        arms: int,
        hidden_size: list[int] | tuple[int, ...] = (128,),
        activation: str = "ReLU",
        memory_size: int = 10_000,
        index: int = 0,
        device: str = "cpu",
        seed: int | None = None,
        node_limits: dict[int, int] | None = None,
    ) -> None:
        super().__init__(spec, index=index)
        #: Widest each hidden layer may grow to, by index, where it is not MAX_NODES (the latent
        #: layer's max_latent_dim).
        self.node_limits = dict(node_limits or {})
        self.context_dim = int(context_dim)
        self.arms = int(arms)
        self.device = torch.device(device)
        generator = torch.Generator()
        if seed is not None:
            generator.manual_seed(int(seed))
        else:
            generator.seed()
        self.net = RewardNet(self.context_dim, list(hidden_size), activation, generator=generator, device=self.device)
        self._reset_statistics()
        self.memory = BanditMemory(memory_size, self.context_dim, device=self.device)
        # Its own stream: seeded plainly it would replay the env's row draws (same seed, same bits).
        self.rng = np.random.default_rng(None if seed is None else [int(seed), _STREAM])
        # Online bookkeeping, reported as metrics and kept in checkpoints.
        self.cumulative_reward = 0.0
        self.cumulative_regret = 0.0
        self.regret_known = True
        self.recent_rewards: deque[float] = deque(maxlen=self.fitness_window)

    # --- set-up ------------------------------------------------------------------------------
    def _reset_statistics(self) -> None:
        """Anchor ``theta0`` at the current weights, clear the design matrix, restart Adam."""
        net = self.net
        #: Initial weights: the regression loss's L2 term pulls towards them (as in NeuralUCB).
        self.theta0 = net.flat.clone()
        #: Diagonal of U minus lamb: running sum of squared (width-scaled) gradients, per parameter.
        self.grad_sq = net.zeros()
        self.optimizer = FlatAdam(net.params, lr=self.spec.lr)
        self._bind()

    def _bind(self) -> None:
        """(Re)create the per-layer views and scratch tensors derived from the flat state."""
        net = self.net
        self._grad_sq_views = net.views(self.grad_sq)
        self._inv = net.zeros()
        self._inv_views = [(w.t(), b) for w, b in net.views(self._inv)]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_grad_sq_views", "_inv", "_inv_views"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()

    def on_spec_change(self, old: BanditSpec, changed: frozenset[str]) -> None:
        if "lr" in changed:
            # Keep Adam's moment estimates: only the step size changed.
            self.optimizer.param_groups[0]["lr"] = float(self.spec.lr)

    # --- acting ------------------------------------------------------------------------------
    def score(self, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """Per-arm score whose argmax is pulled (NeuralUCB and NeuralTS override)."""
        raise NotImplementedError

    def _sigma(self, squares: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """``sqrt(sum_p g_p**2 / (m * (lamb + G_p)))`` per row, from each layer's ``(a**2, delta**2)``."""
        torch.add(self.grad_sq, self.spec.lamb, out=self._inv).reciprocal_()
        var: torch.Tensor | None = None
        for (inv_w_t, inv_b), (a2, d2) in zip(self._inv_views, squares, strict=True):
            # sum_ij (d_i a_j)^2 / U_ij = sum_i d_i^2 * (sum_j a_j^2 / U_ij), plus the bias term.
            term = torch.linalg.vecdot(torch.addmm(inv_b, a2, inv_w_t), d2)
            var = term if var is None else var.add_(term)
        assert var is not None
        return var.div_(self.net.width).sqrt_()

    def _update_design(self, squares: list[tuple[torch.Tensor, torch.Tensor]], arm: int) -> None:
        """Add the pulled arm's squared (width-scaled) gradient to the diagonal design matrix."""
        scale = 1.0 / self.net.width
        for (gw, gb), (a2, d2) in zip(self._grad_sq_views, squares, strict=True):
            d2_arm = d2[arm]
            gw.addr_(d2_arm, a2[arm], alpha=scale)
            gb.add_(d2_arm, alpha=scale)

    def uncertainty(self, context: np.ndarray | torch.Tensor) -> torch.Tensor:
        """``sigma(x)`` of each row of ``context`` (no state changes)."""
        _, inputs, deltas = self.net.gradient_factors(torch.as_tensor(context, dtype=torch.float32, device=self.device))
        return self._sigma([(a * a, d * d) for a, d in zip(inputs, deltas, strict=True)])

    def get_action(self, context: np.ndarray | torch.Tensor, *, explore: bool = True) -> int:
        """The arm to pull for ``context`` (``(arms, context_dim)``).

        With ``explore`` the arm maximises :meth:`score` and the design matrix is updated with its
        gradient; without, it is the greedy ``argmax mu`` and nothing changes.
        """
        x = torch.as_tensor(context, dtype=torch.float32, device=self.device)
        if not explore:
            return int(torch.argmax(self.net(x)))
        mu, inputs, deltas = self.net.gradient_factors(x)
        squares = [(a * a, d * d) for a, d in zip(inputs, deltas, strict=True)]
        arm = int(torch.argmax(self.score(mu, self._sigma(squares))))
        self._update_design(squares, arm)
        return arm

    # --- learning ----------------------------------------------------------------------------
    def observe(self, context: np.ndarray, reward: float) -> None:
        """Remember the pulled arm's context (one row of the step's context array) and its reward."""
        self.memory.add(context, reward)

    def learn(self) -> torch.Tensor:
        """One Adam step on a minibatch from memory: MSE to the rewards + ``reg * ||theta - theta0||^2``.

        Returns the minibatch MSE as a 0-d tensor (not a float: no sync per step on accelerators).
        """
        if len(self.memory) == 0:
            return torch.zeros((), device=self.device)
        x, r = self.memory.sample(self.spec.batch_size, self.rng)
        net = self.net
        mse = net.mse_gradient(x, r)  # into the flat gradient buffer FlatAdam steps with
        if self.spec.reg > 0:
            net.grad.add_(net.flat - self.theta0, alpha=2.0 * self.spec.reg)
        self.optimizer.step()
        return mse

    def record(self, reward: float, regret: float | None) -> None:
        """Book one step's reward and regret (``None`` when the env cannot tell the best reward)."""
        self.cumulative_reward += reward
        self.recent_rewards.append(reward)
        if regret is None:
            self.regret_known = False
        else:
            self.cumulative_regret += regret

    def recent_mean_reward(self) -> float:
        """Mean reward over the last :attr:`fitness_window` steps (NaN before the first step)."""
        return float(np.mean(self.recent_rewards)) if self.recent_rewards else float("nan")

    # --- evaluation --------------------------------------------------------------------------
    def test(
        self, env: BanditEnvProtocol, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None
    ) -> float:
        """Mean reward per step of the greedy policy over ``loop`` runs of ``max_steps`` (500) steps."""
        steps = max_steps or self.fitness_window
        totals = []
        for _ in range(loop):
            context = env.reset()
            total = 0.0
            for _ in range(steps):
                context, reward = env.step(self.get_action(context, explore=False))
                total += float(reward)
            totals.append(total / steps)
        return float(np.mean(totals))

    # --- evolution ---------------------------------------------------------------------------
    def mutate_parameters(self, rng: random.Random, *, sd: float) -> str | None:
        """Gaussian noise on every weight, scaled by ``sd`` times its layer's own spread."""
        generator = torch.Generator().manual_seed(rng.getrandbits(63))
        for w, b in self.net.layers:
            for p in (w, b):
                scale = float(w.std()) if w.numel() > 1 else 1.0
                p.add_(torch.randn(p.shape, generator=generator).to(self.device) * sd * scale)
        return "params"

    def mutate_activation(self, rng: random.Random, *, choices: list[str]) -> str | None:
        """Activation mutation (AgileRL's): a hidden activation from ``choices`` other than the
        current one; weights, ``theta0`` and the design-matrix diagonal are kept, Adam starts afresh."""
        options = [c for c in choices if c != self.net.activation] or list(choices)
        name = rng.choice(options)
        if name == self.net.activation:
            return None
        self.net.set_activation(name)
        self.optimizer = FlatAdam(self.net.params, lr=self.spec.lr)
        return f"act:{name}"

    def mutate_architecture(self, rng: random.Random, *, new_layer_prob: float) -> str | None:
        """Add a hidden layer (identity-initialised) or nodes to one; the function is preserved
        exactly for ReLU (and for added nodes, whose outgoing weights start at zero)."""
        hidden = list(self.net.hidden_size)
        if rng.random() < new_layer_prob and 0 < len(hidden) < MAX_HIDDEN_LAYERS:
            self._rebuild([*hidden, hidden[-1]], insert_identity=True, rng=rng)
            return "arch:add_layer"
        limit = {i: min(MAX_NODES, self.node_limits.get(i, MAX_NODES)) for i in range(len(hidden))}
        growable = [i for i, h in enumerate(hidden) if h < limit[i]]
        if not growable:
            return None
        i = rng.choice(growable)
        hidden[i] = min(limit[i], hidden[i] + rng.choice([8, 16, 32]))
        self._rebuild(hidden, insert_identity=False, rng=rng)
        return f"arch:add_node(layer {i})"

    def _rebuild(self, hidden: list[int], *, insert_identity: bool, rng: random.Random) -> None:
        """Grow the network to ``hidden``, carrying weights, ``theta0`` and statistics over."""
        old = self.net
        generator = torch.Generator().manual_seed(rng.getrandbits(63))
        new = RewardNet(old.input_dim, hidden, old.activation, generator=generator, device=self.device)
        theta0, grad_sq = new.flat.clone(), new.zeros()
        n_old = len(old.layers)
        # Which old layer each new layer continues (None: the inserted identity layer).
        sources: list[int | None] = [*range(n_old - 1), *([None] if insert_identity else []), n_old - 1]
        pairs = [
            (new.layers, old.layers),
            (new.views(theta0), old.views(self.theta0)),
            (new.views(grad_sq), old.views(self.grad_sq)),
        ]
        for j, src in enumerate(sources):
            w, b = new.layers[j]
            if src is None:
                w.copy_(torch.eye(w.shape[0], device=self.device))
                b.zero_()
                new.views(theta0)[j][0].copy_(w)
                new.views(theta0)[j][1].zero_()
                continue
            o, i = old.shapes[src]
            # Inputs from units the previous layer just gained start at zero weight, so the
            # network computes the same function as before.
            w[:, i:] = 0.0
            new.views(theta0)[j][0][:, i:] = 0.0
            for new_views, old_views in pairs:
                new_views[j][0][:o, :i] = old_views[src][0]
                new_views[j][1][:o] = old_views[src][1]
        self.net = new
        self.theta0 = theta0
        self.grad_sq = grad_sq
        self.optimizer = FlatAdam(new.params, lr=self.spec.lr)
        self._bind()

    # --- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "arch": {
                "context_dim": self.context_dim,
                "arms": self.arms,
                "hidden_size": list(self.net.hidden_size),
                "activation": self.net.activation,
            },
            "params": self.net.flat.clone(),
            "theta0": self.theta0.clone(),
            "grad_sq": self.grad_sq.clone(),
            "optimizer": self.optimizer.state_dict(),
            "memory": self.memory.state_dict(),
            "rng": _plain_state(self.rng.bit_generator.state),
            "cumulative_reward": self.cumulative_reward,
            "cumulative_regret": self.cumulative_regret,
            "regret_known": self.regret_known,
            "recent_rewards": list(self.recent_rewards),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        arch = state["arch"]
        if int(arch["context_dim"]) != self.context_dim or int(arch["arms"]) != self.arms:
            raise ValueError(
                f"checkpoint is for {arch['arms']} arms x context {arch['context_dim']}, "
                f"this env has {self.arms} x {self.context_dim}"
            )
        super().load_state_dict(state)
        if list(arch["hidden_size"]) != self.net.hidden_size or arch["activation"] != self.net.activation:
            self.net = RewardNet(self.context_dim, list(arch["hidden_size"]), arch["activation"], device=self.device)
        self.net.load_flat(state["params"].to(self.device))
        self.theta0 = state["theta0"].to(self.device).clone()
        self.grad_sq = state["grad_sq"].to(self.device).clone()
        self.optimizer = FlatAdam(self.net.params, lr=self.spec.lr)
        self.optimizer.load_state_dict(adam_state(state["optimizer"], self.net))
        self.optimizer.param_groups[0]["lr"] = float(self.spec.lr)
        capacity = int(state["memory"]["capacity"])
        if capacity != self.memory.capacity:
            self.memory = BanditMemory(capacity, self.context_dim, device=self.device)
        self.memory.load_state_dict(state["memory"])
        self.rng.bit_generator.state = state["rng"]
        self.cumulative_reward = float(state["cumulative_reward"])
        self.cumulative_regret = float(state["cumulative_regret"])
        self.regret_known = bool(state["regret_known"])
        self.recent_rewards = deque((float(r) for r in state["recent_rewards"]), maxlen=self.fitness_window)
        self._bind()


def _plain_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """numpy's bit-generator state as plain python values (safe for ``weights_only`` loading)."""
    return {
        k: (_plain_state(v) if isinstance(v, Mapping) else (v.item() if hasattr(v, "item") else v))
        for k, v in state.items()
    }


__all__ = ["NeuralBandit"]
