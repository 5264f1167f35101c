"""A2C on the gym plugin's public API: :class:`GymAlgorithm` + the on-policy protocol.

The gym plugin's on-policy strategy collects ``learn_step`` env steps into a
:class:`~agilerl_plugin_gym.buffers.RolloutBuffer`, computes GAE (autoreset-aware) and calls
:meth:`A2C.learn`; :class:`GymAlgorithm` gives checkpoints (``state_dict``), cloning, architecture
and parameter mutation and evaluation (``test``), so HPO, resume and the CLI work unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from agilerl_plugin_gym.buffers import RolloutBuffer
from agilerl_plugin_gym.protocols import RolloutLayout
from agilerl_plugin_gym.single_agent.base import GymAlgorithm
from agilerl_plugin_gym.spec_base import DISCRETE_ACTIONS
from agilerl_tutorial_a2c.specs import A2CSpec


class A2C(GymAlgorithm):
    """Synchronous advantage actor-critic for Discrete actions."""

    #: The version of the on-policy protocol (agilerl_plugin_gym.protocols.ON_POLICY) this class implements.
    protocol_version = 1
    policy_name = "actor"
    eval_names = ("actor", "critic")
    lr_optimizers = {"lr": ("optimizer",)}

    spec: A2CSpec

    def __init__(self, spec: A2CSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_space, action_space, **kwargs)
        DISCRETE_ACTIONS.check("TutorialA2C", observation_space, action_space)
        self.nets = {
            "actor": self.build_network(int(action_space.n), output_vanish=True),
            "critic": self.build_network(1, output_vanish=False),
        }
        self.build_optimizers()

    def build_optimizers(self) -> None:
        params = [*self.nets["actor"].parameters(), *self.nets["critic"].parameters()]
        self.optimizers = {"optimizer": self.make_optimizer(params, self.spec.lr)}

    # --- the on-policy protocol (agilerl_plugin_gym.protocols.OnPolicyAlgorithm) ----------------
    def rollout_layout(self) -> RolloutLayout:
        return RolloutLayout((), np.int64)

    @torch.inference_mode()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist = torch.distributions.Categorical(logits=self.nets["actor"](obs))
        action = dist.sample()
        return action, dist.log_prob(action), self.nets["critic"](obs).squeeze(-1)

    @torch.inference_mode()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.nets["critic"](obs).squeeze(-1)

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        return action.cpu().numpy()

    @torch.inference_mode()
    def greedy_action(self, obs: np.ndarray) -> np.ndarray:
        return self.nets["actor"](self.obs_tensor(obs)).argmax(-1).cpu().numpy()

    def learn(self, buffer: RolloutBuffer) -> dict[str, float]:
        """One gradient step on the whole rollout: policy gradient + value regression + entropy bonus."""
        data = buffer.flat()
        dist = torch.distributions.Categorical(logits=self.nets["actor"](data["obs"]))
        log_prob, entropy = dist.log_prob(data["actions"]), dist.entropy().mean()
        value = self.nets["critic"](data["obs"]).squeeze(-1)
        policy_loss = -(log_prob * data["advantages"]).mean()
        value_loss = 0.5 * (value - data["returns"]).pow(2).mean()
        loss = policy_loss + self.spec.vf_coef * value_loss - self.spec.ent_coef * entropy
        opt = self.optimizers["optimizer"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(list(self.nets["actor"].parameters()) + list(self.nets["critic"].parameters()),
                                 self.spec.max_grad_norm, foreach=True)  # fmt: skip
        opt.step()
        return {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy.item()}
