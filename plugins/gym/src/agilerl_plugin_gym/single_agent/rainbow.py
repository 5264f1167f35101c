"""Rainbow DQN (Hessel et al. 2018) with AgileRL's hyperparameter names.

Hyperparameters are documented where they are declared
(:class:`agilerl_plugin_gym.single_agent.specs.RainbowDQNSpec`). The parts:

* Prioritized replay and n-step returns come from the off-policy engine
  (:mod:`agilerl_plugin_gym.engine.replay_per`): the strategy stores n-step transitions in a
  sum-tree buffer, anneals ``beta`` to 1 over ``max_steps`` and writes back the priorities
  (the per-sample loss + ``prior_eps``) this ``learn`` returns.
* Exploration is NoisyNet's (no epsilon): noisy layers act with their current noise, which is
  redrawn after every gradient step; evaluation uses the mean weights.
* The network is dueling and distributional (C51):
  :class:`agilerl_plugin_gym.networks.rainbow.RainbowNetwork`. The target is double-DQN's (the online
  network picks the next action, the target network gives its distribution), projected onto the
  support; the loss is the cross-entropy to it, weighted by the importance weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agilerl_plugin_gym.fused import MLPChain, activation_kernels, write_linear_grads
from agilerl_plugin_gym.networks.rainbow import NoisyLinear, NoisyMLP, RainbowNetwork, project_distribution
from agilerl_plugin_gym.observations import batch_size
from agilerl_plugin_gym.optim import inference_mode, no_grad
from agilerl_plugin_gym.sections.training import RLTrainingFields
from agilerl_plugin_gym.single_agent.dqn import DQN
from agilerl_plugin_gym.single_agent.specs import RainbowDQNSpec

#: Global gradient-norm clip of each update (AgileRL's value).
MAX_GRAD_NORM = 10.0


class RainbowDQN(DQN):
    """Distributional dueling double DQN with noisy exploration, PER and n-step returns."""

    spec: RainbowDQNSpec

    def __init__(self, spec: RainbowDQNSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_space, action_space, **kwargs)
        self.epsilon = 0.0

    def build_network(self, out_dim: int, **kwargs: Any) -> RainbowNetwork:  # type: ignore[override]
        support = torch.linspace(self.spec.v_min, self.spec.v_max, self.spec.num_atoms)
        net = RainbowNetwork.build(
            self.net_spec, self.observation_space, out_dim, support=support, noise_std=self.spec.noise_std,
            normalize_images=bool(getattr(self.spec, "normalize_images", True)),
        )  # fmt: skip
        return net.to(self.device)

    def _noise(self, on: bool) -> None:
        """Noisy layers on (acting, learning) or off (greedy evaluation)."""
        self.nets["actor"].noisy = on

    # --- acting: noisy networks explore, no epsilon ----------------------------------------------
    def init_exploration(self, training: RLTrainingFields) -> None:
        """No epsilon schedule: NoisyNet layers explore."""

    def end_step(self, done: np.ndarray) -> None:
        """Nothing decays per step."""

    def exploration_stats(self) -> dict[str, float]:
        return {}

    @torch.inference_mode()
    def greedy_action(self, obs: np.ndarray) -> np.ndarray:
        self._noise(False)
        return self.nets["actor"](self.obs_tensor(obs)).argmax(-1).cpu().numpy()

    @inference_mode
    def explore(
        self, obs: np.ndarray, rng: np.random.Generator, *, warmup: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Random actions while warming up, then the greedy action of the noisy network."""
        if warmup:
            action = rng.integers(0, self.n_actions, size=batch_size(obs))
        else:
            self._noise(True)
            action = self.nets["actor"](self.obs_tensor(obs)).argmax(-1).cpu().numpy()
        return action, action

    # --- learning ---------------------------------------------------------------------------------
    def _elementwise_loss(
        self, log_p: torch.Tensor, reward: torch.Tensor, next_obs: Any, discount: torch.Tensor,
        next_a: torch.Tensor | None = None, rows: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """Cross-entropy of the taken actions' log-distributions ``log_p`` to the projected target.

        Double DQN: the online net picks ``next_a`` (given when the caller already has the online
        logits of ``next_obs``), the target net gives its distribution.
        """
        net, target = self.nets["actor"], self.nets["actor_target"]
        if rows is None:
            rows = torch.arange(log_p.shape[0], device=log_p.device)
        with torch.no_grad():
            if next_a is None:
                next_a = net(next_obs).argmax(1)
            next_dist = target.logits(next_obs)[rows, next_a].softmax(-1)
            proj = project_distribution(next_dist, reward, discount, net.support)
        return -(proj * log_p).sum(1)

    def learn(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient step on a (prioritized, n-step) batch; soft target update; fresh noise."""
        plan = self._by_hand()
        if plan is not None:  # MLP encoder, plain noisy streams: no autograd (bit-identical)
            return self._learn_by_hand(batch, plan)
        net, target = self.nets["actor"], self.nets["actor_target"]
        net.noisy = target.noisy = True
        action = batch["action"].long().view(-1)
        nsteps = batch.get("nsteps")
        gamma_n = self.spec.gamma if nsteps is None else torch.pow(self.spec.gamma, nsteps)
        rows = torch.arange(action.shape[0], device=action.device)
        # The online pass over obs (trained) and next_obs (double DQN's next action) under the same
        # noisy weights, built once. Soft-max over the taken action's atoms only: the others get no
        # gradient anyway.
        logits, next_logits = net.logits_pair(batch["obs"], batch["next_obs"])
        log_p = logits[rows, action].log_softmax(-1)
        next_a = net.q_values(next_logits).argmax(1)
        loss_i = self._elementwise_loss(
            log_p, batch["reward"], batch["next_obs"], gamma_n * (1.0 - batch["done"]), next_a, rows
        )
        if self.spec.combined_reward and "reward_1" in batch:  # the one-step loss on the same forward
            loss_i = loss_i + self._elementwise_loss(
                log_p, batch["reward_1"], batch["next_obs_1"], self.spec.gamma * (1.0 - batch["done_1"])
            )
        weights = batch.get("weights")
        loss = (loss_i * weights).mean() if weights is not None else loss_i.mean()
        self.optimize(loss, MAX_GRAD_NORM)
        net.reset_noise()
        target.reset_noise()
        out = {"loss": loss.detach()}
        if weights is not None:
            out["priorities"] = loss_i.detach() + self.spec.prior_eps
        return out

    # --- the same step without autograd ------------------------------------------------------------
    def _by_hand(self) -> _Plan | None:
        """What :meth:`_learn_by_hand` runs the online network as (kept until the network's parts
        change), or None where autograd runs: a non-MLP encoder, LayerNorm or an activation
        without a written-out backward, ``combined_reward`` (a second loss term), or parameters
        outside the layers it writes."""
        net = self.nets["actor"]
        structure = (net, net.encoder, net.head, net.value_head, getattr(net.encoder, "layer_chain", None),
                     net.head.layer_chain, net.value_head.layer_chain, self.flat)  # fmt: skip
        cached = self.__dict__.get("_plan")
        if cached is None or any(a is not b for a, b in zip(cached[0], structure, strict=True)):
            cached = self._plan = (structure, None if self.spec.combined_reward else _Plan.of(net, self.flat))
        if cached[1] is not None:
            self.flat.ensure()  # every .grad a view of the flat gradient, which the plan overwrites whole
        return cached[1]

    @no_grad
    def _learn_by_hand(self, batch: dict[str, torch.Tensor], plan: _Plan) -> dict[str, torch.Tensor]:
        """:meth:`learn` with ``loss.backward()``'s gradients written by hand, in autograd's order
        of floating-point operations: the weighted mean, the cross-entropy's product and sum, the
        log-softmax and the index of the taken action, the dueling combination (``V + A -
        mean_a A``), each noisy layer (``addmm`` under ``mu + sigma * eps``: ``mu`` gets the weight
        gradient, ``sigma`` it times ``eps``) and the encoder (:class:`MLPChain`)."""
        net, target = self.nets["actor"], self.nets["actor_target"]
        net.noisy = target.noisy = True
        action = batch["action"].long().view(-1)
        nsteps = batch.get("nsteps")
        gamma_n = self.spec.gamma if nsteps is None else torch.pow(self.spec.gamma, nsteps)
        rows = torch.arange(action.shape[0], device=action.device)
        # Forward: as RainbowNetwork.logits_pair (the next observations under the same noise).
        z, saved_enc = plan.encoder.forward(batch["obs"])
        z2, _ = plan.encoder.forward(batch["next_obs"])
        adv, adv2, saved_adv = plan.advantage.forward_pair(z, z2)
        value, value2, saved_value = plan.value.forward_pair(z, z2)
        logits, next_logits = net.dueling(adv, value), net.dueling(adv2, value2)
        log_p = logits[rows, action].log_softmax(-1)
        next_a = net.q_values(next_logits).argmax(1)
        next_dist = target.logits(batch["next_obs"])[rows, next_a].softmax(-1)
        proj = project_distribution(next_dist, batch["reward"], gamma_n * (1.0 - batch["done"]), net.support)
        loss_i = -(proj * log_p).sum(1)
        weights = batch.get("weights")
        loss = (loss_i * weights).mean() if weights is not None else loss_i.mean()
        # Backward.
        n = loss_i.shape[0]
        g_mean = torch.ones((), dtype=loss_i.dtype, device=loss_i.device) / n
        g_loss_i = g_mean * weights if weights is not None else g_mean.expand(n)
        g_log_p = (-g_loss_i).unsqueeze(1).expand_as(log_p) * proj
        g_picked = torch._log_softmax_backward_data(g_log_p, log_p, -1, log_p.dtype)
        g_logits = torch._index_put_impl_(torch.zeros_like(logits), (rows, action), g_picked, True, True)
        g_value = g_logits.sum(1, keepdim=True)  # V + A: V broadcast over the actions
        g_adv = g_logits + (-g_logits).sum(1, keepdim=True).expand_as(g_logits) / logits.shape[1]  # A - mean_a A
        g_z = plan.advantage.backward(saved_adv, g_adv.view_as(adv)) + plan.value.backward(
            saved_value, g_value.view_as(value)
        )
        plan.encoder.backward(saved_enc, g_z)
        self.flat.clip_grad_norm_(MAX_GRAD_NORM)
        self.optimizers["optimizer"].step()  # every gradient written: nothing to zero first
        self.soft_update()
        net.reset_noise()
        target.reset_noise()
        out = {"loss": loss.detach()}
        if weights is not None:
            out["priorities"] = loss_i.detach() + self.spec.prior_eps
        return out

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Noise buffers ride in the networks' state dicts."""


class _NoisyStream:
    """A :class:`NoisyMLP` stream with its noise on, run by hand: the forward over two batches under
    the same noisy weights (as ``NoisyMLP.forward_pair``), the backward for the first."""

    def __init__(self, layers: list[tuple[NoisyLinear, Any, Any]]) -> None:
        self.layers = layers

    @classmethod
    def of(cls, mlp: Any) -> _NoisyStream | None:
        if type(mlp) is not NoisyMLP or mlp.layer_norm:
            return None
        layers = []
        for lin, act in [*zip(mlp.linears, mlp.acts, strict=True), (mlp.output, mlp.output_act)]:
            kernels = activation_kernels(act)
            if type(lin) is not NoisyLinear or kernels is None:
                return None
            layers.append((lin, *kernels))
        return cls(layers)

    def parameters(self) -> list[torch.Tensor]:
        return [lin._parameters[k] for lin, _, _ in self.layers for k in ("weight", "bias", "weight_sigma",
                                                                            "bias_sigma")]  # type: ignore[misc]  # fmt: skip

    def forward_pair(self, x: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[Any]]:
        saved = []
        for lin, forward, _ in self.layers:
            p, b = lin._parameters, lin._buffers
            weight = torch.addcmul(p["weight"], p["weight_sigma"], b["weight_eps"])  # type: ignore[arg-type]
            bias = torch.addcmul(p["bias"], p["bias_sigma"], b["bias_eps"])  # type: ignore[arg-type]
            x_in = x
            x, x2 = torch.addmm(bias, x, weight.t()), torch.addmm(bias, x2, weight.t())
            if forward is not None:
                x, x2 = forward(x), forward(x2)
            saved.append((weight, x_in, x))
        return x, x2, saved

    def backward(self, saved: list[Any], grad: torch.Tensor) -> torch.Tensor:
        """Write every layer's four gradients (``AddcmulBackward0`` under ``AddmmBackward0``) and
        return the gradient of the stream's input."""
        for (lin, _, act_backward), (weight, x_in, out) in zip(reversed(self.layers), reversed(saved), strict=True):
            if act_backward is not None:
                grad = act_backward(grad, out)
            p, b = lin._parameters, lin._buffers
            g_weight, g_bias = write_linear_grads(p["weight"], p["bias"], grad, x_in)  # type: ignore[arg-type]
            torch.mul(g_weight, b["weight_eps"], out=p["weight_sigma"].grad)  # type: ignore[union-attr]
            torch.mul(g_bias, b["bias_eps"], out=p["bias_sigma"].grad)  # type: ignore[union-attr]
            grad = torch.mm(grad, weight)
        return grad


class _Plan:
    """The online RainbowNetwork for :meth:`RainbowDQN._learn_by_hand`: its encoder as an
    :class:`MLPChain`, its advantage and value streams as :class:`_NoisyStream` s."""

    def __init__(self, encoder: MLPChain, advantage: _NoisyStream, value: _NoisyStream) -> None:
        self.encoder, self.advantage, self.value = encoder, advantage, value

    @classmethod
    def of(cls, net: RainbowNetwork, flat: Any) -> _Plan | None:
        if type(net) is not RainbowNetwork or net.encoder_arch != "mlp":
            return None
        encoder = MLPChain.of_mlp(net.encoder, net.preprocess)
        advantage, value = _NoisyStream.of(net.head), _NoisyStream.of(net.value_head)
        if encoder is None or advantage is None or value is None:
            return None
        written = [*encoder.parameters(), *advantage.parameters(), *value.parameters()]
        if len(written) != len(flat.params) or {id(t) for t in written} != {id(p) for p in flat.params}:
            return None
        return cls(encoder, advantage, value)
