"""Deep Q-Network (Mnih et al. 2015) with double-DQN targets (van Hasselt et al. 2016).

Hyperparameters are documented where they are declared: :class:`agilerl_plugin_gym.single_agent.specs.DQNSpec`;
the epsilon schedule (``eps_start``, ``eps_end``, ``eps_decay`` or ``eps_linear_steps``) and ``learning_delay`` come from
the manifest's ``training`` section, the buffer from ``replay_buffer``.

* Discrete actions only; vector, image (CNN) and Dict/Tuple (multi-input) observations.
* The target network tracks the online one by Polyak averaging every update (``tau``), or with
  ``target_update_interval`` is a hard copy of it every that many gradient steps (Mnih et al.'s,
  SB3's; ``update_burst`` takes the gradient steps in SB3's bursts).
* Epsilon decays multiplicatively once per vector step: ``eps = max(eps_end, eps * eps_decay)``; or
  with ``eps_linear_steps`` linearly from ``eps_start`` to ``eps_end`` over that many env steps of
  the agent (SB3's schedule: ``exploration_fraction`` x ``total_timesteps``).
* Loss: Huber (smooth L1) on the TD error, which keeps early large errors from blowing up updates.

Plain autograd throughout; for a plain-MLP network the engine runs the same acting and gradient
step through :mod:`agilerl_plugin_gym.fast.dqn`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl_plugin_gym.fast.optim import FlatAdam, FlatParameters, inference_mode, no_grad
from agilerl_plugin_gym.masking import mask_logits
from agilerl_plugin_gym.networks.mlp import torch_default_init
from agilerl_plugin_gym.observations import batch_size
from agilerl_plugin_gym.sections.training import RLTrainingFields
from agilerl_plugin_gym.single_agent.base import GymAlgorithm
from agilerl_plugin_gym.single_agent.specs import DQNSpec, QLearningSpec
from agilerl_plugin_gym.spec_base import DISCRETE_ACTIONS

EPS_START, EPS_END, EPS_DECAY = 1.0, 0.1, 0.995  # AgileRL's defaults
PER_PRIOR_EPS = 1e-6  # with replay_buffer.per_buffer: RainbowDQN's default prior_eps


class DQN(GymAlgorithm):
    """Double DQN with soft target updates and epsilon-greedy exploration."""

    policy_name = "actor"
    eval_names = ("actor",)
    target_of = {"actor_target": "actor"}
    lr_optimizers = {"lr": ("optimizer",)}
    torch_init_default: ClassVar[bool] = True  # q_network_init: SB3's QNetwork init unless the manifest says

    spec: QLearningSpec  # DQNSpec, or a subclass's (RainbowDQN, CQN)

    def __init__(self, spec: DQNSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_space, action_space, **kwargs)
        DISCRETE_ACTIONS.check("DQN", observation_space, action_space)
        assert isinstance(action_space, spaces.Discrete)
        self.n_actions = int(action_space.n)
        self.nets = {"actor": self.build_network(self.n_actions, output_vanish=self.q_head_vanish())}
        self.q_network_init(self.nets["actor"])
        self.sync_targets()
        self.build_optimizers()
        self.epsilon: float | None = None
        self.eps_end, self.eps_decay = EPS_END, EPS_DECAY
        self.eps_start, self.eps_linear_steps = EPS_START, None
        self.gradient_steps = 0  # counts the hard target copies' interval (target_update_interval)

    def q_head_vanish(self) -> bool:
        """The Q head's output layer starts at gain 1 (a value head, as the critics here and SB3's
        QNetwork) unless the manifest sets ``head_config.output_vanish``: the policy-logit gain .01
        left DQN CartPole collapsing (benchmarks/README.md, the DQN ablation; docs/gym.md)."""
        head = self.net_spec.head_config if self.net_spec is not None else None
        return bool(head.output_vanish) if head is not None and "output_vanish" in head.model_fields_set else False

    def q_network_init(self, net: nn.Module) -> None:
        """SB3's QNetwork init: the MLP encoder and head start at torch's default layer init instead of
        the orthogonal one, each unless the manifest sets its ``init_layers``. On DQN CartPole with
        SB3's settings the orthogonal init ended lower (benchmarks/README.md, the DQN ablation:
        last-quarter median 257 against 366 over 30 seeds; docs/gym.md, DQN). RainbowDQN (noisy
        layers, its own init) and CQN keep theirs."""
        if not self.torch_init_default:
            return
        spec = self.net_spec
        for part, cfg in (
            ("encoder", spec.encoder_config if spec else None),
            ("head", spec.head_config if spec else None),
        ):
            if cfg is not None and "init_layers" in cfg.model_fields_set:
                continue
            torch_default_init(getattr(net, part, None))

    def build_optimizers(self) -> None:
        # Flat storage: the Adam step and the soft target update are one kernel each instead of one
        # per tensor (most of their time for a network this small; agilerl_plugin_gym.fast.optim).
        self.flat = FlatParameters(self.nets["actor"].parameters())
        self.optimizers = {"optimizer": FlatAdam(self.flat, lr=self.spec.lr)}

    def sync_targets(self) -> None:
        super().sync_targets()
        self.flat_target = FlatParameters(self.nets["actor_target"].parameters(), grads=False)

    def soft_update(self, tau: float | None = None) -> None:
        """Polyak-average the target network towards the online one (one kernel on the flat buffers)."""
        self.flat_target.lerp_(self.flat, float(self.spec.tau if tau is None else tau))

    def update_target(self) -> None:
        """After a gradient step: the soft update, or with ``target_update_interval`` a hard copy
        every that many gradient steps (RainbowDQN's and CQN's specs have no such field: soft)."""
        interval = getattr(self.spec, "target_update_interval", None)
        if interval is None:
            self.soft_update()
            return
        self.gradient_steps += 1
        if self.gradient_steps % interval == 0:
            self.soft_update(1.0)

    # --- acting -----------------------------------------------------------------------------------
    def init_exploration(self, training: RLTrainingFields) -> None:
        """Set the epsilon schedule from the manifest (keeps a restored epsilon)."""
        self.eps_end = training.eps_end if training.eps_end is not None else EPS_END
        self.eps_decay = training.eps_decay if training.eps_decay is not None else EPS_DECAY
        self.eps_start = training.eps_start if training.eps_start is not None else EPS_START
        self.eps_linear_steps = training.eps_linear_steps
        if self.epsilon is None:
            self.epsilon = self.eps_start

    def reset_noise(self, mask: np.ndarray | None) -> None:
        """No per-episode exploration state."""

    @inference_mode
    def greedy_action(self, obs: np.ndarray, action_mask: np.ndarray | None = None) -> np.ndarray:
        q = self.q_values(self.nets["actor"], self.obs_tensor(obs))
        return mask_logits(q, None if action_mask is None else torch.as_tensor(action_mask)).argmax(-1).cpu().numpy()

    @staticmethod
    def q_values(net: nn.Module, obs: Any) -> torch.Tensor:
        """``net(obs)``: the Q-values of every action."""
        return net(obs)  # type: ignore[no-any-return]

    def explore(
        self, obs: np.ndarray, rng: np.random.Generator, *, warmup: bool = False, action_mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Epsilon-greedy actions for a batch: (action to store, action for the env); allowed ones
        only under ``action_mask`` (random actions uniform over them)."""
        n = batch_size(obs)
        eps = 1.0 if self.epsilon is None else self.epsilon
        if warmup or eps >= 1.0:
            action = self._random_actions(n, rng, action_mask)
        else:
            action = self.greedy_action(obs, action_mask)
            explore = rng.random(n) < eps
            if explore.any():
                action = np.where(explore, self._random_actions(n, rng, action_mask), action)
        return action, action

    def _random_actions(self, n: int, rng: np.random.Generator, action_mask: np.ndarray | None) -> np.ndarray:
        if action_mask is None:
            return rng.integers(0, self.n_actions, size=n)
        return np.where(action_mask, rng.random((n, self.n_actions)), -1.0).argmax(1)  # type: ignore[no-any-return]

    def end_step(self, done: np.ndarray) -> None:
        if self.epsilon is None:
            return
        if self.eps_linear_steps is None:
            self.epsilon = max(self.eps_end, self.epsilon * self.eps_decay)
        else:  # linear in the agent's env steps, this vector step's included (agent.steps counts them after)
            progress = min(1.0, (self.steps + len(done)) / self.eps_linear_steps)
            self.epsilon = self.eps_start + (self.eps_end - self.eps_start) * progress

    def exploration_stats(self) -> dict[str, float]:
        return {"epsilon": float(self.epsilon if self.epsilon is not None else EPS_START)}

    # --- learning ---------------------------------------------------------------------------------
    @no_grad
    def next_q(self, next_obs: Any, next_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The bootstrap value of each next observation: the target net's max, or with ``double`` the
        target net's value of the action the online net picks (over allowed actions under ``next_mask``)."""
        q_target = self.q_values(self.nets["actor_target"], next_obs)
        if not getattr(self.spec, "double", True):  # RainbowDQN's spec has no such field
            return mask_logits(q_target, next_mask).max(1).values
        next_a = mask_logits(self.q_values(self.nets["actor"], next_obs), next_mask).argmax(1, keepdim=True)
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
        self.update_target()

    def td_target(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``reward + gamma^k (1 - done) * next_q`` (k: the n-step return's length, else 1)."""
        nsteps = batch.get("nsteps")  # n-step replay: bootstrap with gamma^k after a k-step return
        gamma = self.spec.gamma if nsteps is None else torch.pow(self.spec.gamma, nsteps)
        next_q = self.next_q(batch["next_obs"], batch.get("next_action_mask"))  # the mask: a masked env's
        return batch["reward"] + gamma * (1.0 - batch["done"]) * next_q

    def learn(self, batch: dict[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """One gradient step on a sampled batch; soft-update the target."""
        actions = batch["action"].long().view(-1, 1)
        q = self.nets["actor"](batch["obs"]).gather(1, actions).squeeze(1)
        y = self.td_target(batch)
        weights = batch.get("weights")  # prioritized replay: importance-weighted per-sample loss
        loss_i = nn.functional.smooth_l1_loss(q, y, reduction="none" if weights is not None else "mean")
        loss = (loss_i * weights).mean() if weights is not None else loss_i
        self.optimize(loss, getattr(self.spec, "max_grad_norm", None))  # DQN's spec field
        return self._stats(loss, q, y, weights)

    @staticmethod
    def _stats(
        loss: torch.Tensor, q: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        out = {"loss": loss.detach(), "q": q.detach().mean()}
        if weights is not None:  # new priorities: |TD error| (+ a floor so none is zero)
            out["priorities"] = (q - y).detach().abs() + PER_PRIOR_EPS
        return out

    def extra_state(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "gradient_steps": self.gradient_steps}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.epsilon = state.get("epsilon", self.epsilon)
        self.gradient_steps = int(state.get("gradient_steps", self.gradient_steps))
