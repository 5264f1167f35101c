"""Advantage actor-critic (Mnih et al. 2016, synchronous), as Stable-Baselines3's ``A2C``, readable
top to bottom.

Hyperparameters are documented where they are declared: :class:`agilerl_plugin_gym.single_agent.specs.A2CSpec`.

The on-policy engine (:mod:`agilerl_plugin_gym.engine.on_policy`) collects ``learn_step`` env steps
(SB3's ``n_steps`` x ``num_envs``) into a rollout buffer and computes GAE (``gae_lambda`` 1 by
default: plain n-step returns bootstrapped from the critic); :meth:`A2C.learn` then takes **one**
gradient step on the whole rollout (no minibatches, no epochs):
``policy_loss + vf_coef * value_loss - ent_coef * entropy``, clipped to ``max_grad_norm``, with
RMSprop (SB3's default) or Adam.

* Actions: Discrete (categorical), MultiDiscrete (one categorical per dimension) and Box (diagonal
  Gaussian with a learned, state-independent log-std from ``action_std_init``; samples are clipped
  to the bounds only when sent to the env, the greedy action is the mean clipped).
* Actor and critic are separate networks (SB3's MlpPolicy shares only the flattening extractor).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl_plugin_gym.buffers import RolloutBuffer
from agilerl_plugin_gym.fast.optim import RMSprop
from agilerl_plugin_gym.networks import distributions
from agilerl_plugin_gym.networks.mlp import sb3_latent_gain
from agilerl_plugin_gym.protocols import RolloutLayout
from agilerl_plugin_gym.single_agent.base import GymAlgorithm
from agilerl_plugin_gym.single_agent.specs import A2CSpec
from agilerl_plugin_gym.spec_base import ANY_ACTIONS


class A2C(GymAlgorithm):
    """A2C: one gradient step per rollout of policy gradient, value regression and entropy bonus."""

    spec: A2CSpec
    #: The version of the on-policy protocol (agilerl_plugin_gym.protocols.ON_POLICY) this class implements.
    protocol_version = 1
    policy_name = "actor"
    eval_names = ("actor", "critic")
    lr_optimizers = {"lr": ("optimizer",)}

    def __init__(self, spec: A2CSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_space, action_space, **kwargs)
        ANY_ACTIONS.check("A2C", observation_space, action_space)
        self.nvec: list[int] = []  # the MultiDiscrete action's sizes (none for other spaces)
        if isinstance(action_space, spaces.Discrete):
            self.kind, out_dim = "discrete", int(action_space.n)
        elif isinstance(action_space, spaces.MultiDiscrete):
            self.kind, out_dim = "multidiscrete", int(action_space.nvec.sum())
            self.nvec = [int(n) for n in action_space.nvec]
        else:
            assert isinstance(action_space, spaces.Box)
            self.kind, out_dim = "continuous", int(action_space.shape[0])
            self.low = torch.as_tensor(action_space.low, dtype=torch.float32, device=self.device)
            self.high = torch.as_tensor(action_space.high, dtype=torch.float32, device=self.device)
            log_std = torch.full((out_dim,), float(spec.action_std_init), device=self.device)
            self.extra_params = {"log_std": nn.Parameter(log_std)}
        self.nets = {
            "actor": self.build_network(out_dim, output_vanish=True),
            "critic": self.build_network(1, output_vanish=False),
        }
        for net in self.nets.values():
            sb3_latent_gain(net.encoder)
        self.build_optimizers()

    def parameters(self) -> list[nn.Parameter]:
        return [*self.nets["actor"].parameters(), *self.nets["critic"].parameters(), *self.extra_params.values()]

    def build_optimizers(self) -> None:
        # torch.optim's maths without torch.optim (whose first step imports torch._dynamo: ~70 MB of RSS).
        if self.spec.use_rms_prop:  # SB3's: RMSprop(alpha=0.99, eps=1e-5)
            opt: Any = RMSprop(self.parameters(), lr=self.spec.lr, alpha=0.99, eps=1e-5)
        else:
            opt = self.make_optimizer(self.parameters(), self.spec.lr, eps=1e-5)
        self.optimizers = {"optimizer": opt}

    # --- the policy -------------------------------------------------------------------------------
    def log_prob_entropy(self, out: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``actions`` and entropy of the policy whose head gave ``out``."""
        return distributions.log_prob_entropy(self.kind, out, actions, self.nvec, self.extra_params.get("log_std"))

    def sample(self, out: torch.Tensor) -> torch.Tensor:
        return distributions.sample(self.kind, out, self.nvec, self.extra_params.get("log_std"))

    def mode(self, out: torch.Tensor) -> torch.Tensor:
        """The most likely action (the mean for Box actions)."""
        if self.kind == "discrete":
            return out.argmax(-1)
        if self.kind == "multidiscrete":
            return torch.stack([c.argmax(-1) for c in out.split(self.nvec, dim=-1)], -1)
        return out

    # --- the on-policy protocol (agilerl_plugin_gym.protocols.OnPolicyAlgorithm) --------------------
    def rollout_layout(self) -> RolloutLayout:
        return RolloutLayout.for_actions(self.kind, self.nvec, self.action_space)

    @torch.inference_mode()
    def act(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample a batch: (action, log-prob, value)."""
        out = self.nets["actor"](obs)
        action = self.sample(out)
        log_prob, _ = self.log_prob_entropy(out, action)
        return action, log_prob, self.nets["critic"](obs).squeeze(-1)

    @torch.inference_mode()
    def value(self, obs: Any) -> torch.Tensor:
        return self.nets["critic"](obs).squeeze(-1)

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        """An action as the env takes it (Gaussian samples clipped to the Box)."""
        if self.kind == "continuous":
            action = torch.maximum(torch.minimum(action, self.high.to(action.device)), self.low.to(action.device))
        return action.cpu().numpy()

    @torch.inference_mode()
    def greedy_action(self, obs: np.ndarray) -> np.ndarray:
        return self.env_action(self.mode(self.nets["actor"](self.obs_tensor(obs))))

    def learn(self, buffer: RolloutBuffer) -> dict[str, float]:
        """One gradient step on the whole rollout (GAE already computed by the engine)."""
        data = buffer.flat()
        obs = data["obs"]  # a dict of tensors for Dict/Tuple observations
        advantages = data["advantages"]
        if self.spec.normalize_advantages and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_prob, entropy = self.log_prob_entropy(self.nets["actor"](obs), data["actions"])
        value = self.nets["critic"](obs).squeeze(-1)
        policy_loss = -(log_prob * advantages).mean()
        value_loss = (data["returns"] - value).pow(2).mean()  # SB3: F.mse_loss
        entropy_loss = -entropy.mean()
        loss = policy_loss + self.spec.ent_coef * entropy_loss + self.spec.vf_coef * value_loss
        opt = self.optimizers["optimizer"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.parameters(), self.spec.max_grad_norm)
        opt.step()
        return {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": -entropy_loss.item()}
