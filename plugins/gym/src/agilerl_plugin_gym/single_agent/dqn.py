"""Deep Q-Network (Mnih et al. 2015) with double-DQN targets (van Hasselt et al. 2016).

Hyperparameters are documented where they are declared: :class:`agilerl_plugin_gym.single_agent.specs.DQNSpec`;
the epsilon schedule (``eps_start``, ``eps_end``, ``eps_decay``) and ``learning_delay`` come from
the manifest's ``training`` section, the buffer from ``replay_buffer``.

* Discrete actions only; vector, image (CNN) and Dict/Tuple (multi-input) observations.
* The target network tracks the online one by Polyak averaging every update (``tau``).
* Epsilon decays multiplicatively once per vector step: ``eps = max(eps_end, eps * eps_decay)``.
* Loss: Huber (smooth L1) on the TD error, which keeps early large errors from blowing up updates.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl_plugin_gym.engine.common import LazyStats
from agilerl_plugin_gym.fused import MLPChain, mlp_chain
from agilerl_plugin_gym.observations import batch_size
from agilerl_plugin_gym.optim import FlatAdam, FlatParameters, inference_mode, no_grad
from agilerl_plugin_gym.sections.training import RLTrainingFields
from agilerl_plugin_gym.single_agent.base import GymAlgorithm
from agilerl_plugin_gym.single_agent.specs import DQNSpec, QLearningSpec
from agilerl_plugin_gym.spec_base import DISCRETE_ACTIONS

EPS_START, EPS_END, EPS_DECAY = 1.0, 0.1, 0.995  # AgileRL's defaults
PER_PRIOR_EPS = 1e-6  # with replay_buffer.per_buffer: RainbowDQN's default prior_eps
_SMOOTH_L1_BACKWARD = torch.ops.aten.smooth_l1_loss_backward.default
_NONE, _MEAN = 0, 1  # torch's loss reduction enum


class DQN(GymAlgorithm):
    """Double DQN with soft target updates and epsilon-greedy exploration."""

    policy_name = "actor"
    eval_names = ("actor",)
    target_of = {"actor_target": "actor"}
    lr_optimizers = {"lr": ("optimizer",)}

    spec: QLearningSpec  # DQNSpec, or a subclass's (RainbowDQN, CQN)

    def __init__(self, spec: DQNSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_space, action_space, **kwargs)
        DISCRETE_ACTIONS.check("DQN", observation_space, action_space)
        assert isinstance(action_space, spaces.Discrete)
        self.n_actions = int(action_space.n)
        self.nets = {"actor": self.build_network(self.n_actions)}
        self.sync_targets()
        self.build_optimizers()
        self.epsilon: float | None = None
        self.eps_end, self.eps_decay = EPS_END, EPS_DECAY

    def build_optimizers(self) -> None:
        # Flat storage: the Adam step and the soft target update are one kernel each instead of one
        # per tensor (most of their time for a network this small; agilerl_plugin_gym.optim).
        self.flat = FlatParameters(self.nets["actor"].parameters())
        self.optimizers = {"optimizer": FlatAdam(self.flat, lr=self.spec.lr)}

    def sync_targets(self) -> None:
        super().sync_targets()
        self.flat_target = FlatParameters(self.nets["actor_target"].parameters(), grads=False)

    def soft_update(self, tau: float | None = None) -> None:
        """Polyak-average the target network towards the online one (one kernel on the flat buffers)."""
        self.flat_target.lerp_(self.flat, float(self.spec.tau if tau is None else tau))

    # --- acting -----------------------------------------------------------------------------------
    def init_exploration(self, training: RLTrainingFields) -> None:
        """Set the epsilon schedule from the manifest (keeps a restored epsilon)."""
        self.eps_end = training.eps_end if training.eps_end is not None else EPS_END
        self.eps_decay = training.eps_decay if training.eps_decay is not None else EPS_DECAY
        if self.epsilon is None:
            self.epsilon = training.eps_start if training.eps_start is not None else EPS_START

    def reset_noise(self, mask: np.ndarray | None) -> None:
        """No per-episode exploration state."""

    @inference_mode
    def greedy_action(self, obs: np.ndarray) -> np.ndarray:
        return self.q_values(self.nets["actor"], self.obs_tensor(obs)).argmax(-1).cpu().numpy()

    @staticmethod
    def q_values(net: nn.Module, obs: Any) -> torch.Tensor:
        """``net(obs)`` (call it without gradients): through its :class:`~agilerl_plugin_gym.fused.MLPChain`
        when it is a plain MLP (the same kernels without the modules' call overhead), else the modules."""
        chain = mlp_chain(net)
        return chain.forward(obs)[0] if chain is not None else net(obs)

    def explore(
        self, obs: np.ndarray, rng: np.random.Generator, *, warmup: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Epsilon-greedy actions for a batch: (action to store, action for the env)."""
        n = batch_size(obs)
        eps = 1.0 if self.epsilon is None else self.epsilon
        if warmup or eps >= 1.0:
            action = rng.integers(0, self.n_actions, size=n)
        else:
            action = self.greedy_action(obs)
            explore = rng.random(n) < eps
            if explore.any():
                action = np.where(explore, rng.integers(0, self.n_actions, size=n), action)
        return action, action

    def end_step(self, done: np.ndarray) -> None:
        if self.epsilon is not None:
            self.epsilon = max(self.eps_end, self.epsilon * self.eps_decay)

    def exploration_stats(self) -> dict[str, float]:
        return {"epsilon": float(self.epsilon if self.epsilon is not None else EPS_START)}

    # --- learning ---------------------------------------------------------------------------------
    @no_grad
    def next_q(self, next_obs: Any) -> torch.Tensor:
        """The bootstrap value of each next observation: the target net's max, or with ``double`` the
        target net's value of the action the online net picks."""
        q_target = self.q_values(self.nets["actor_target"], next_obs)
        if not getattr(self.spec, "double", True):  # RainbowDQN's spec has no such field
            return q_target.max(1).values
        next_a = self.q_values(self.nets["actor"], next_obs).argmax(1, keepdim=True)
        return q_target.gather(1, next_a).squeeze(1)

    def optimize(self, loss: torch.Tensor, max_grad_norm: float | None = None) -> None:
        """One Adam step on ``loss`` (its gradient's global norm clipped to ``max_grad_norm`` when
        given), then the soft target update: the step every Q-learner here (DQN, RainbowDQN, CQN)
        ends its ``learn`` with, one kernel each on the flat buffers."""
        opt = self.optimizers["optimizer"]
        opt.zero_grad()
        loss.backward()
        if max_grad_norm is not None:
            self.flat.clip_grad_norm_(max_grad_norm)
        opt.step()
        self.soft_update()

    def td_target(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``reward + gamma^k (1 - done) * next_q`` (k: the n-step return's length, else 1)."""
        nsteps = batch.get("nsteps")  # n-step replay: bootstrap with gamma^k after a k-step return
        gamma = self.spec.gamma if nsteps is None else torch.pow(self.spec.gamma, nsteps)
        return batch["reward"] + gamma * (1.0 - batch["done"]) * self.next_q(batch["next_obs"])

    def learn(self, batch: dict[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """One gradient step on a sampled batch; soft-update the target."""
        chain = self._chain()
        if chain is not None:  # a plain MLP: forward and backward without autograd (bit-identical)
            return self._learn_by_hand(batch, chain)
        actions = batch["action"].long().view(-1, 1)
        q = self.nets["actor"](batch["obs"]).gather(1, actions).squeeze(1)
        y = self.td_target(batch)
        weights = batch.get("weights")  # prioritized replay: importance-weighted per-sample loss
        loss_i = nn.functional.smooth_l1_loss(q, y, reduction="none" if weights is not None else "mean")
        loss = (loss_i * weights).mean() if weights is not None else loss_i
        self.optimize(loss)
        return self._stats(loss, q, y, weights)

    @no_grad
    def _learn_by_hand(self, batch: dict[str, torch.Tensor], chain: MLPChain) -> Mapping[str, torch.Tensor]:
        """:meth:`learn`'s step with the gradients ``loss.backward()`` gives written by hand:
        ``smooth_l1_loss``'s own backward kernel (after ``mean``'s and the weights' product under
        prioritized replay), the gather's (a scatter into zeros), then the chain's."""
        actions = batch["action"].long().view(-1, 1)
        out_q, saved = chain.forward(batch["obs"])
        q = out_q.gather(1, actions).squeeze(1)
        y = self.td_target(batch)
        weights = batch.get("weights")
        one = torch.ones((), dtype=q.dtype, device=q.device)
        # The kernels nn.functional.smooth_l1_loss and its autograd node run (q and y have one shape).
        if weights is None:
            g_q = _SMOOTH_L1_BACKWARD(one, q, y, _MEAN, 1.0)
        else:
            g_q = _SMOOTH_L1_BACKWARD((one / q.shape[0]) * weights, q, y, _NONE, 1.0)
        chain.backward(saved, torch.zeros_like(out_q).scatter_add_(1, actions, g_q.unsqueeze(1)))
        self.optimizers["optimizer"].step()  # every gradient written: nothing to zero first
        self.soft_update()
        if weights is not None:  # the priorities are read at once: no point deferring
            return self._stats(self._weighted_huber(q, y, weights), q, y, weights)
        # The engine reads only the last step's statistics: the loss value waits until then.
        return LazyStats(lambda: self._stats(torch._C._nn.smooth_l1_loss(q, y, _MEAN, 1.0), q, y, None))

    @staticmethod
    def _weighted_huber(q: torch.Tensor, y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return (torch._C._nn.smooth_l1_loss(q, y, _NONE, 1.0) * weights).mean()

    @staticmethod
    def _stats(
        loss: torch.Tensor, q: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        out = {"loss": loss.detach(), "q": q.detach().mean()}
        if weights is not None:  # new priorities: |TD error| (+ a floor so none is zero)
            out["priorities"] = (q - y).detach().abs() + PER_PRIOR_EPS
        return out

    def _chain(self) -> MLPChain | None:
        """The online network as an :class:`~agilerl_plugin_gym.fused.MLPChain` when :meth:`learn`
        may skip autograd: a plain MLP whose layers are every parameter of the flat buffer."""
        chain = mlp_chain(self.nets["actor"])
        if chain is None or type(self).learn is not DQN.learn:
            return None
        flat = self.flat
        checked = self.__dict__.get("_chain_covers")
        if checked is None or checked[0] is not chain or checked[1] is not flat:
            params = chain.parameters()
            covers = len(params) == len(flat.params) and all(map(operator.is_, params, flat.params))
            checked = self._chain_covers = (chain, flat, covers)
        if not checked[2]:
            return None
        flat.ensure()  # every .grad a view of the flat gradient, which the chain overwrites whole
        return chain

    def extra_state(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.epsilon = state.get("epsilon", self.epsilon)
