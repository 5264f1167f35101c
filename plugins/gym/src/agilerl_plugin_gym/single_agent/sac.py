"""Soft Actor-Critic (Haarnoja et al. 2018, with the learned temperature of the 2018 follow-up),
as Stable-Baselines3's ``SAC``, readable top to bottom.

Hyperparameters are documented where they are declared: :class:`agilerl_plugin_gym.single_agent.specs.SACSpec`.

* The actor outputs the mean and log-std (clamped to [-20, 2]) of a diagonal Gaussian; actions
  are ``tanh`` of a sample (a squashed Gaussian), stored and fed to the critics in [-1, 1] and
  rescaled to the env's ``[low, high]`` only when stepping the env. The deterministic action
  (evaluation, ``predict``, export) is ``tanh`` of the mean, rescaled.
* Twin Q critics with target copies (Polyak averaging every ``target_update_interval`` gradient
  steps); the actor has no target. The TD target is
  ``r + gamma (1 - done) (min_i Q_i'(s', a') - alpha log pi(a'|s'))`` with ``a' ~ pi(s')``.
* ``ent_coef: auto`` learns ``log alpha`` towards ``target_entropy`` (-dim(A) by default) with its
  own Adam at the actor's learning rate; a float keeps alpha fixed.
* Critic input, as DDPG's: for vector observations the critic's encoder reads ``[obs, action]``;
  for images and Dict/Tuple observations the critic encodes the observation and its head reads
  ``[latent, action]``.
* ``environment.normalize`` (SB3's ``VecNormalize``): the off-policy engine feeds the actor
  normalised observations and normalises each sampled batch with this agent's statistics;
  ``predict`` and the exported deterministic actor (:meth:`SAC.policy_module`) take raw ones.
* Exploration draws its Gaussian noise from the engine's generator (checkpointed with the run), so
  a resumed run acts exactly as the uninterrupted one; before ``training.learning_delay`` steps
  actions are uniform in the Box (SB3's ``learning_starts``).
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl_plugin_gym.networks import obs_dim
from agilerl_plugin_gym.normalization import NormalizedPolicy
from agilerl_plugin_gym.observations import batch_size
from agilerl_plugin_gym.sections.training import RLTrainingFields
from agilerl_plugin_gym.single_agent.base import GymAlgorithm
from agilerl_plugin_gym.single_agent.specs import SACSpec
from agilerl_plugin_gym.space_kinds import is_image_space, is_structured_space
from agilerl_plugin_gym.spec_base import CONTINUOUS_ACTIONS

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
#: Keeps ``log(1 - tanh(u)^2)`` finite where the squashed action saturates (SB3's epsilon).
_SQUASH_EPS = 1e-6
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class SAC(GymAlgorithm):
    """SAC with twin critics, target critics and an automatically tuned entropy coefficient."""

    spec: SACSpec
    policy_name = "actor"
    eval_names: ClassVar[tuple[str, ...]] = ("actor", "critic_1", "critic_2")
    target_of: ClassVar[dict[str, str]] = {"critic_1_target": "critic_1", "critic_2_target": "critic_2"}
    lr_optimizers: ClassVar[dict[str, tuple[str, ...]]] = {
        "lr_actor": ("actor", "ent_coef"),
        "lr_critic": ("critic",),
    }
    critic_names: tuple[str, ...] = ("critic_1", "critic_2")
    #: Outputs of each critic (TQC: its quantiles).
    critic_outputs = 1

    def __init__(self, spec: SACSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_space, action_space, **kwargs)
        CONTINUOUS_ACTIONS.check("SAC", observation_space, action_space)
        assert isinstance(action_space, spaces.Box)
        self.act_dim = int(action_space.shape[0])
        self.low = np.asarray(action_space.low, dtype=np.float32)
        self.high = np.asarray(action_space.high, dtype=np.float32)
        vector = not (is_image_space(observation_space) or is_structured_space(observation_space))
        #: The critic's head reads [latent, action] (else its encoder reads [obs, action]).
        self.action_in_head = not vector
        self.nets = {"actor": self.build_network(2 * self.act_dim)}
        for critic in self.critic_names:
            if self.action_in_head:
                self.nets[critic] = self.build_network(self.critic_outputs, extra_in=self.act_dim)
            else:
                critic_space = spaces.Box(-np.inf, np.inf, (obs_dim(observation_space) + self.act_dim,), np.float32)
                self.nets[critic] = self.build_network(self.critic_outputs, space=critic_space)
        self.sync_targets()
        # The entropy coefficient: learned as log(alpha) ("auto", "auto_<initial>") or fixed.
        self.learn_alpha = isinstance(spec.ent_coef, str)
        if self.learn_alpha:
            initial = float(str(spec.ent_coef).partition("_")[2] or 1.0)
            log_alpha = torch.full((1,), math.log(initial), device=self.device)
            self.extra_params = {"log_ent_coef": nn.Parameter(log_alpha)}
        #: The learned coefficient's entropy target (``target_entropy: auto`` is -dim(A)).
        self.entropy_target = -float(self.act_dim) if spec.target_entropy == "auto" else float(spec.target_entropy)
        self.build_optimizers()
        self.gradient_updates = 0

    def build_optimizers(self) -> None:
        critic_params = [p for c in self.critic_names for p in self.nets[c].parameters()]
        self.optimizers = {
            "actor": self.make_optimizer(self.nets["actor"].parameters(), self.spec.lr_actor),
            "critic": self.make_optimizer(critic_params, self.spec.lr_critic),
        }
        if self.learn_alpha:
            self.optimizers["ent_coef"] = self.make_optimizer([self.extra_params["log_ent_coef"]], self.spec.lr_actor)

    # --- the policy -------------------------------------------------------------------------------
    def mean_log_std(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian's mean and clamped log-std (before squashing) for a batch."""
        mean, log_std = self.nets["actor"](obs).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: Any, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A squashed sample ``tanh(mean + std * noise)`` in [-1, 1] and its log-probability.

        The log-probability is the Gaussian's minus the log-determinant of ``tanh``'s Jacobian,
        ``sum log(1 - tanh(u)^2)``. ``noise`` defaults to fresh draws from torch's generator.
        """
        mean, log_std = self.mean_log_std(obs)
        if noise is None:
            noise = torch.randn_like(mean)
        u = mean + log_std.exp() * noise
        action = torch.tanh(u)
        gaussian = (-0.5 * noise.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
        log_prob = gaussian - torch.log(1.0 - action.pow(2) + _SQUASH_EPS).sum(-1)
        return action, log_prob

    def scale(self, action: np.ndarray) -> np.ndarray:
        """[-1, 1] -> the env's [low, high]."""
        return self.low + (action + 1.0) * 0.5 * (self.high - self.low)

    @torch.inference_mode()
    def greedy_action(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic action: ``tanh`` of the mean, rescaled to the Box."""
        mean, _ = self.mean_log_std(self.obs_tensor(obs))
        return self.scale(torch.tanh(mean).cpu().numpy())

    # ``predict(deterministic=False)`` samples through these two (the inference mixin's protocol).
    @torch.inference_mode()
    def act(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """A squashed sample in [-1, 1] and its log-probability."""
        return self.sample(obs)

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        return self.scale(action.cpu().numpy())

    # --- exploration (the off-policy engine's protocol) ---------------------------------------------
    def init_exploration(self, training: RLTrainingFields) -> None:
        """No schedule: the policy's own entropy explores."""

    def reset_noise(self, mask: np.ndarray | None) -> None:
        """No noise state."""

    def explore(
        self, obs: np.ndarray, rng: np.random.Generator, *, warmup: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(action in [-1, 1] to store, scaled action for the env); the noise comes from ``rng``."""
        n = batch_size(obs)
        if warmup:
            action = rng.uniform(-1.0, 1.0, (n, self.act_dim)).astype(np.float32)
        else:
            noise = torch.as_tensor(rng.standard_normal((n, self.act_dim)), dtype=torch.float32, device=self.device)
            with torch.inference_mode():
                action = self.sample(self.obs_tensor(obs), noise)[0].cpu().numpy()
        return action, self.scale(action)

    def end_step(self, done: np.ndarray) -> None:
        """Nothing per step."""

    def exploration_stats(self) -> dict[str, float]:
        return {"ent_coef": float(self.alpha().item())}

    # --- learning ---------------------------------------------------------------------------------
    def alpha(self) -> torch.Tensor:
        """alpha, without gradient."""
        if self.learn_alpha:
            return self.extra_params["log_ent_coef"].detach().exp()
        return torch.tensor(float(self.spec.ent_coef), device=self.device)

    def critic(self, name: str, obs: Any, action: torch.Tensor) -> torch.Tensor:
        """The outputs of critic ``name`` for ``(obs, action)``, shape ``(batch, critic_outputs)``."""
        net = self.nets[name]
        return net(obs, action) if self.action_in_head else net(torch.cat([obs, action], 1))

    def q(self, name: str, obs: Any, action: torch.Tensor) -> torch.Tensor:
        """``Q(obs, action)`` of critic ``name``, shape ``(batch,)``."""
        return self.critic(name, obs, action).squeeze(1)

    def min_q(self, names: tuple[str, ...], obs: Any, action: torch.Tensor) -> torch.Tensor:
        return torch.min(self.q(names[0], obs, action), self.q(names[1], obs, action))

    def learn(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient step of the entropy coefficient, the critics and the actor (SB3's order)."""
        obs, next_obs = batch["obs"], batch["next_obs"]
        if not self.action_in_head:  # a vector, concatenated with the action
            obs, next_obs = obs.float(), next_obs.float()
        action, reward, done = batch["action"].float(), batch["reward"].float(), batch["done"].float()
        stats: dict[str, torch.Tensor] = {}

        # 1. The entropy coefficient: raise alpha while the policy's entropy is below the target.
        pi_action, log_prob = self.sample(obs)
        alpha = self.alpha()  # the value before this step's update serves both losses below
        if self.learn_alpha:
            log_alpha = self.extra_params["log_ent_coef"]
            alpha_loss = -(log_alpha * (log_prob.detach() + self.entropy_target)).mean()
            self._step("ent_coef", alpha_loss)
            stats["ent_coef_loss"] = alpha_loss.detach()
        stats["ent_coef"] = alpha

        # 2. The critics, towards a soft TD target from the target critics and a fresh next action.
        critic_loss = self.critic_loss(obs, action, reward, next_obs, done, alpha)
        self._step("critic", critic_loss)
        stats["critic_loss"] = critic_loss.detach()

        # 3. The actor: maximise Q - alpha log pi. The critics are frozen so it leaves them no gradient.
        for c in self.critic_names:
            self.nets[c].requires_grad_(False)
        actor_loss = (alpha * log_prob - self.policy_q(obs, pi_action)).mean()
        for c in self.critic_names:
            self.nets[c].requires_grad_(True)
        self._step("actor", actor_loss)
        stats["actor_loss"] = actor_loss.detach()

        # 4. The target critics.
        self.gradient_updates += 1
        if self.gradient_updates % self.spec.target_update_interval == 0:
            self.targets.soft(self.spec.tau)
        return stats

    def critic_loss(
        self, obs: Any, action: torch.Tensor, reward: torch.Tensor, next_obs: Any, done: torch.Tensor,
        alpha: torch.Tensor,
    ) -> torch.Tensor:  # fmt: skip
        """SAC's: half the summed MSE of both critics to ``r + gamma (1 - done) (min Q' - alpha log pi')``."""
        with torch.no_grad():
            next_action, next_log_prob = self.sample(next_obs)
            next_q = self.min_q(("critic_1_target", "critic_2_target"), next_obs, next_action)
            y = reward + self.spec.gamma * (1.0 - done) * (next_q - alpha * next_log_prob)
        losses = [(self.q(c, obs, action) - y).pow(2).mean() for c in self.critic_names]
        return 0.5 * torch.stack(losses).sum()

    def policy_q(self, obs: Any, action: torch.Tensor) -> torch.Tensor:
        """The value the actor maximises: SAC's min of the twin critics."""
        return self.min_q(self.critic_names, obs, action)

    def _step(self, name: str, loss: torch.Tensor) -> None:
        opt = self.optimizers[name]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    # --- checkpoints and export -------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        return {"gradient_updates": self.gradient_updates}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.gradient_updates = int(state.get("gradient_updates", 0))

    def policy_module(self) -> nn.Module:
        """The deterministic policy (``tanh`` of the mean, rescaled) as a CPU module in eval mode;
        with ``environment.normalize`` it takes raw observations (the frozen statistics first)."""
        actor = copy.deepcopy(self.nets["actor"]).cpu().eval()
        module: nn.Module = SquashedMeanPolicy(actor, self.low, self.high)
        if self.normalizer is not None:
            module = NormalizedPolicy(self.normalizer.module(), module)
        return module.eval()


class SquashedMeanPolicy(nn.Module):
    """Raw observation batch -> the env action ``low + (tanh(mean) + 1) (high - low) / 2``."""

    def __init__(self, actor: nn.Module, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.actor = actor
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean = self.actor(obs).chunk(2, dim=-1)[0]
        low, high = self.get_buffer("low"), self.get_buffer("high")
        return low + (torch.tanh(mean) + 1.0) * 0.5 * (high - low)
