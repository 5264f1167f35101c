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

Plain autograd throughout; for an MLP encoder the engine runs the same gradient step through
:mod:`agilerl_plugin_gym.fast.rainbow`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agilerl_plugin_gym.fast.optim import inference_mode
from agilerl_plugin_gym.masking import mask_logits
from agilerl_plugin_gym.networks.rainbow import RainbowNetwork, project_distribution
from agilerl_plugin_gym.observations import batch_size
from agilerl_plugin_gym.sections.training import RLTrainingFields
from agilerl_plugin_gym.single_agent.dqn import DQN
from agilerl_plugin_gym.single_agent.specs import RainbowDQNSpec

#: Global gradient-norm clip of each update (AgileRL's value).
MAX_GRAD_NORM = 10.0


class RainbowDQN(DQN):
    """Distributional dueling double DQN with noisy exploration, PER and n-step returns."""

    torch_init_default = False  # keeps its own init (DQN.q_network_init)

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
    def greedy_action(self, obs: np.ndarray, action_mask: np.ndarray | None = None) -> np.ndarray:
        self._noise(False)
        q = self.nets["actor"](self.obs_tensor(obs))
        return mask_logits(q, None if action_mask is None else torch.as_tensor(action_mask)).argmax(-1).cpu().numpy()

    @inference_mode
    def explore(
        self, obs: np.ndarray, rng: np.random.Generator, *, warmup: bool = False, action_mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Random actions while warming up, then the greedy action of the noisy network (allowed
        ones only under ``action_mask``)."""
        if warmup:
            action = self._random_actions(batch_size(obs), rng, action_mask)
        else:
            self._noise(True)
            q = self.nets["actor"](self.obs_tensor(obs))
            mask = None if action_mask is None else torch.as_tensor(action_mask)
            action = mask_logits(q, mask).argmax(-1).cpu().numpy()
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
        next_a = mask_logits(net.q_values(next_logits), batch.get("next_action_mask")).argmax(1)  # masked envs
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

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Noise buffers ride in the networks' state dicts."""
