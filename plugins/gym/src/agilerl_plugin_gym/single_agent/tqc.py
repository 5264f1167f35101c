"""Truncated Quantile Critics (Kuznetsov et al. 2020), as sb3-contrib's ``TQC``: SAC whose critics
predict return distributions.

Hyperparameters are documented where they are declared: :class:`agilerl_plugin_gym.single_agent.specs.TQCSpec`.

Everything but the critics is :class:`~agilerl_plugin_gym.single_agent.sac.SAC`'s (squashed
Gaussian actor, learned entropy coefficient, Polyak-averaged target critics, exploration, export).
The differences:

* ``n_critics`` critics each output ``n_quantiles`` quantiles of the return at fractions
  ``(i + 0.5) / n_quantiles``.
* The target pools the target critics' quantiles of ``(s', a')``, sorts them and drops the
  ``top_quantiles_to_drop_per_net * n_critics`` largest (the truncation that controls
  over-estimation, in place of SAC's min over two critics), then
  ``r + gamma (1 - done) (kept quantiles - alpha log pi(a'|s'))``.
* Each critic's quantiles regress on all kept target quantiles with the quantile Huber loss.
* The actor maximises the mean of every critic's quantiles, minus ``alpha log pi``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from agilerl_plugin_gym.single_agent.sac import SAC
from agilerl_plugin_gym.single_agent.specs import TQCSpec


def quantile_huber_loss(current: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Quantile Huber loss (kappa 1) of ``current`` quantiles ``(batch, critics, n)`` against
    ``target`` samples ``(batch, m)``, averaged over batch, critics, quantiles and samples.

    Quantile ``i`` (fraction ``tau_i = (i + 0.5) / n``) is pulled towards every target sample ``y``
    by ``|tau_i - 1{y < q_i}| * huber(y - q_i)``. torch's fused ``huber_loss`` on the broadcast pairs
    computes the same as sb3-contrib's ``where(|d| > 1, |d| - 0.5, d^2 / 2)`` in a quarter of the time.
    """
    n = current.shape[-1]
    fractions = (torch.arange(n, device=current.device, dtype=current.dtype) + 0.5) / n
    q = current[..., None]  # (batch, critics, n, 1)
    y = target[:, None, None, :]  # (batch, 1, 1, m)
    pairs = (current.shape[0], current.shape[1], n, target.shape[1])
    huber = F.huber_loss(q.expand(pairs), y.expand(pairs), reduction="none", delta=1.0)
    with torch.no_grad():
        weight = (fractions[:, None] - (y < q).to(current.dtype)).abs_()
    return (weight * huber).mean()


class TQC(SAC):
    """SAC with truncated quantile critics."""

    spec: TQCSpec  # type: ignore[assignment]

    def __init__(self, spec: TQCSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        # The critic set comes from the spec: name them (per instance, shadowing SAC's class-level
        # names, which the base class reads through self) before SAC builds them.
        self.critic_names = tuple(f"critic_{i + 1}" for i in range(spec.n_critics))
        self.eval_names = ("actor", *self.critic_names)  # type: ignore[misc]
        self.target_of = {f"{c}_target": c for c in self.critic_names}  # type: ignore[misc]
        self.critic_outputs = spec.n_quantiles
        super().__init__(spec, observation_space, action_space, **kwargs)

    def quantiles(self, names: tuple[str, ...], obs: Any, action: torch.Tensor) -> torch.Tensor:
        """The quantiles of critics ``names``, shape ``(batch, len(names), n_quantiles)``."""
        return torch.stack([self.critic(name, obs, action) for name in names], 1)

    def critic_loss(
        self, obs: Any, action: torch.Tensor, reward: torch.Tensor, next_obs: Any, done: torch.Tensor,
        alpha: torch.Tensor,
    ) -> torch.Tensor:  # fmt: skip
        """Quantile Huber loss of every critic against the truncated, pooled target quantiles."""
        with torch.no_grad():
            next_action, next_log_prob = self.sample(next_obs)
            targets = tuple(f"{c}_target" for c in self.critic_names)
            pooled = self.quantiles(targets, next_obs, next_action).flatten(1)
            keep = pooled.shape[1] - self.spec.top_quantiles_to_drop_per_net * len(self.critic_names)
            truncated = pooled.sort(dim=1).values[:, :keep]
            soft = truncated - alpha * next_log_prob[:, None]
            target = reward[:, None] + self.spec.gamma * (1.0 - done[:, None]) * soft
        return quantile_huber_loss(self.quantiles(self.critic_names, obs, action), target)

    def policy_q(self, obs: Any, action: torch.Tensor) -> torch.Tensor:
        """The mean over every critic's quantiles."""
        return self.quantiles(self.critic_names, obs, action).mean(dim=(1, 2))
