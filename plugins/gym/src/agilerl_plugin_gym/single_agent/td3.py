"""Twin Delayed DDPG (Fujimoto et al. 2018): DDPG plus three fixes for Q over-estimation.

Hyperparameters are documented where they are declared: :class:`agilerl_plugin_gym.single_agent.specs.TD3Spec`.

1. Twin critics: the target is the minimum of two target critics.
2. Target policy smoothing: the target action gets clipped Gaussian noise (``policy_noise``,
   ``noise_clip``, in the actor's [-1, 1] units).
3. Delayed policy updates: the actor and all targets update every ``policy_freq`` critic updates.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from agilerl_plugin_gym.single_agent.ddpg import DDPG
from agilerl_plugin_gym.single_agent.specs import TD3Spec


class TD3(DDPG):
    """TD3: twin critics, target policy smoothing, delayed policy updates."""

    eval_names = ("actor", "critic_1", "critic_2")
    target_of: ClassVar[dict[str, str]] = {
        "actor_target": "actor",
        "critic_1_target": "critic_1",
        "critic_2_target": "critic_2",
    }
    critic_names = ("critic_1", "critic_2")

    spec: TD3Spec

    def _target_q(self, reward: torch.Tensor, next_obs: Any, done: torch.Tensor) -> torch.Tensor:
        next_a = self.nets["actor_target"](next_obs)
        smoothing = (torch.randn_like(next_a) * self.spec.policy_noise).clamp(
            -self.spec.noise_clip, self.spec.noise_clip
        )
        next_a = (next_a + smoothing).clamp(-1.0, 1.0)
        q1 = self.q("critic_1_target", next_obs, next_a)
        q2 = self.q("critic_2_target", next_obs, next_a)
        return reward + self.spec.gamma * (1.0 - done) * torch.min(q1, q2)
