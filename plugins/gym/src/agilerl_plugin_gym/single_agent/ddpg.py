"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016).

Hyperparameters are documented where they are declared: :class:`agilerl_plugin_gym.single_agent.specs.DDPGSpec`.

* Continuous (1-D Box) actions; vector, image (CNN) and Dict/Tuple (multi-input) observations.
* The actor outputs ``tanh`` actions in [-1, 1]; they are stored and fed to the critic in that
  range and rescaled to the env's ``[low, high]`` only when stepping the env.
* Exploration: Ornstein-Uhlenbeck noise (``O_U_noise: true``; ``theta``, ``dt``, ``mean_noise``,
  scale ``expl_noise``), reset per sub-env at episode end, or Gaussian noise
  ``N(mean_noise, expl_noise)``. Before ``training.learning_delay`` steps actions are uniform.
* Delayed policy updates: the actor and the targets update every ``policy_freq`` critic updates.

* Critic input: for vector observations the critic's encoder reads the observation and the action
  concatenated. For images and Dict/Tuple observations, and with ``share_encoders``, the critic
  encodes the observation alone and its head reads ``[latent, action]`` (AgileRL's
  ``ContinuousQNetwork``).
* ``share_encoders: true`` (AgileRL's meaning): the critics (and their targets) read the actor's
  encoder without gradient: the encoder is trained by the actor loss only, the critic loss trains
  the critics' heads. Architecture mutation changes the one encoder for all of them.

:class:`TD3` extends this class.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl_plugin_gym.engine.off_policy import ExplorationNoise, NoiseSettings
from agilerl_plugin_gym.networks import obs_dim
from agilerl_plugin_gym.observations import batch_size
from agilerl_plugin_gym.sections.training import RLTrainingFields
from agilerl_plugin_gym.single_agent.base import GymAlgorithm
from agilerl_plugin_gym.single_agent.specs import DDPGSpec
from agilerl_plugin_gym.space_kinds import is_image_space, is_structured_space
from agilerl_plugin_gym.spec_base import CONTINUOUS_ACTIONS


class DDPG(GymAlgorithm):
    """DDPG with soft target updates and delayed policy updates."""

    policy_name = "actor"
    eval_names = ("actor", "critic")
    target_of = {"actor_target": "actor", "critic_target": "critic"}
    lr_optimizers = {"lr_actor": ("actor",), "lr_critic": ("critic",)}
    critic_names: tuple[str, ...] = ("critic",)

    spec: DDPGSpec

    def __init__(self, spec: DDPGSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_space, action_space, **kwargs)
        name = type(self).__name__
        CONTINUOUS_ACTIONS.check(name, observation_space, action_space)
        assert isinstance(action_space, spaces.Box)
        self.act_dim = int(action_space.shape[0])
        self.low = np.asarray(action_space.low, dtype=np.float32)
        self.high = np.asarray(action_space.high, dtype=np.float32)
        vector = not (is_image_space(observation_space) or is_structured_space(observation_space))
        #: The critic's head reads [latent, action] (else its encoder reads [obs, action]).
        self.action_in_head = self.spec.share_encoders or not vector
        actor = self.build_network(self.act_dim, output_activation="Tanh")
        self.nets = {"actor": actor}
        for critic in self.critic_names:
            if self.action_in_head:
                shared = actor.encoder if self.spec.share_encoders else None
                self.nets[critic] = self.build_network(
                    1, encoder=shared, extra_in=self.act_dim, detach_encoder=self.spec.share_encoders
                )
            else:  # the critic sees [obs, action] as one vector
                critic_space = spaces.Box(-np.inf, np.inf, (obs_dim(observation_space) + self.act_dim,), np.float32)
                self.nets[critic] = self.build_network(1, space=critic_space)
        self.sync_targets()
        self.build_optimizers()
        self.noise = ExplorationNoise(self.act_dim)
        self.critic_updates = 0

    def sync_targets(self) -> None:
        """Target copies; with ``share_encoders`` the critic targets read the actor's encoder too."""
        super().sync_targets()
        if self.spec.share_encoders:
            encoder = self.nets["actor"].encoder
            for target, online in self.target_of.items():
                if online in self.critic_names:
                    self.nets[target].encoder = encoder
            self.targets.rebuild()

    def build_optimizers(self) -> None:
        shared = {id(p) for p in self.nets["actor"].encoder.parameters()} if self.spec.share_encoders else set()
        critic_params = [p for c in self.critic_names for p in self.nets[c].parameters() if id(p) not in shared]
        self.optimizers = {
            "actor": self.make_optimizer(self.nets["actor"].parameters(), self.spec.lr_actor),
            "critic": self.make_optimizer(critic_params, self.spec.lr_critic),
        }

    # --- acting -----------------------------------------------------------------------------------
    def scale(self, action: np.ndarray) -> np.ndarray:
        """[-1, 1] -> the env's [low, high]."""
        return self.low + (action + 1.0) * 0.5 * (self.high - self.low)

    @torch.inference_mode()
    def policy(self, obs: np.ndarray) -> np.ndarray:
        return self.nets["actor"](self.obs_tensor(obs)).cpu().numpy()

    def greedy_action(self, obs: np.ndarray) -> np.ndarray:
        return self.scale(self.policy(obs))

    def init_exploration(self, training: RLTrainingFields) -> None:
        """No schedule: the noise parameters are hyperparameters."""

    def reset_noise(self, mask: np.ndarray | None) -> None:
        """Zero the OU state of the sub-envs in ``mask`` (all when None)."""
        self.noise.reset(mask)

    def _exploration_noise(self, n: int, rng: np.random.Generator) -> np.ndarray:
        settings = NoiseSettings(
            self.spec.O_U_noise, self.spec.expl_noise, self.spec.mean_noise, self.spec.theta, self.spec.dt
        )
        return self.noise.sample(n, rng, settings)

    def explore(
        self, obs: np.ndarray, rng: np.random.Generator, *, warmup: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(action in [-1, 1] to store, scaled action for the env)."""
        n = batch_size(obs)
        if warmup:
            action = rng.uniform(-1.0, 1.0, (n, self.act_dim))
        else:
            action = np.clip(self.policy(obs) + self._exploration_noise(n, rng), -1.0, 1.0)
        action = action.astype(np.float32)
        return action, self.scale(action)

    def end_step(self, done: np.ndarray) -> None:
        if done.any():
            self.reset_noise(done)

    def exploration_stats(self) -> dict[str, float]:
        return {}

    # --- learning ---------------------------------------------------------------------------------
    def q(self, name: str, obs: Any, action: torch.Tensor) -> torch.Tensor:
        """``Q(obs, action)`` of critic ``name``, shape ``(batch,)``."""
        net = self.nets[name]
        out = net(obs, action) if self.action_in_head else net(torch.cat([obs, action], 1))
        return out.squeeze(1)

    def _target_q(self, reward: torch.Tensor, next_obs: Any, done: torch.Tensor) -> torch.Tensor:
        next_a = self.nets["actor_target"](next_obs)
        return reward + self.spec.gamma * (1.0 - done) * self.q("critic_target", next_obs, next_a)

    def learn(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One critic step; every ``policy_freq`` critic steps, one actor step and target updates."""
        obs, next_obs = batch["obs"], batch["next_obs"]
        if not self.action_in_head:  # a vector, concatenated with the action
            obs, next_obs = obs.float(), next_obs.float()
        action = batch["action"].float()
        with torch.no_grad():
            y = self._target_q(batch["reward"].float(), next_obs, batch["done"].float())
        critic_loss = sum((self.q(c, obs, action) - y).pow(2).mean() for c in self.critic_names)
        opt = self.optimizers["critic"]
        opt.zero_grad(set_to_none=True)
        critic_loss.backward()  # type: ignore[union-attr]
        opt.step()
        self.critic_updates += 1
        stats = {"critic_loss": critic_loss.detach()}  # type: ignore[union-attr]
        if self.critic_updates % self.spec.policy_freq == 0:
            # The actor loss must not leave gradients in the critic (a shared encoder is the actor's).
            critic = self.nets[self.critic_names[0]]
            frozen = critic.head if self.spec.share_encoders else critic
            frozen.requires_grad_(False)
            actor_loss = -self.q(self.critic_names[0], obs, self.nets["actor"](obs)).mean()
            frozen.requires_grad_(True)
            opt = self.optimizers["actor"]
            opt.zero_grad(set_to_none=True)
            actor_loss.backward()
            opt.step()
            self.soft_update()
            stats["actor_loss"] = actor_loss.detach()
        return stats

    def extra_state(self) -> dict[str, Any]:
        return {"critic_updates": self.critic_updates}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.critic_updates = int(state.get("critic_updates", 0))
