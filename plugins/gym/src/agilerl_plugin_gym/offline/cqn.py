"""Conservative Q-Network (AgileRL's ``CQN``): CQL (Kumar et al. 2020) applied to DQN, for offline RL.

Hyperparameters are declared in :class:`agilerl_plugin_gym.offline.specs.CQNSpec`; the data comes
from the manifest's offline ``environment`` (see :mod:`agilerl_plugin_gym.offline.datasets`).

The loss is AgileRL's: ``CQL(H) + 0.5 * MSE(Q(s, a), y)`` where the conservative term is
``mean_s[logsumexp_a Q(s, a) - mean_a Q(s, a)]``, pushing down the soft maximum of each state's
Q-values towards their mean so actions the data never shows do not get inflated values; ``y`` is
the DQN target ``r + gamma (1 - terminal) Q_target(s', a')`` with ``a'`` picked by the target net,
or by the online net when ``double``. Gradients are clipped to norm 1 and the target network tracks
the online one by Polyak averaging (``tau``) after every update, as in AgileRL.

Networks, acting (greedy ``argmax Q``), evaluation, checkpoints and mutation are DQN's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from agilerl_plugin_gym.offline.specs import CQNSpec
from agilerl_plugin_gym.single_agent.dqn import DQN
from agilerl_plugin_gym.spec_base import DISCRETE_ACTIONS

__all__ = ["CQN"]

#: Global gradient-norm clip of each update (AgileRL's constant).
MAX_GRAD_NORM = 1.0


class CQN(DQN):
    """Offline Q-learning with the conservative (CQL) penalty; trained by the ``single_agent/offline`` strategy."""

    torch_init_default = False  # keeps its own init (DQN.q_network_init)

    def __init__(self, spec: CQNSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        DISCRETE_ACTIONS.check("CQN", observation_space, action_space)
        super().__init__(spec, observation_space, action_space, **kwargs)  # type: ignore[arg-type]

    def learn(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient step on a batch of dataset transitions; soft-update the target."""
        net = self.nets["actor"]
        q_all = net(batch["obs"])
        q = q_all.gather(1, batch["action"].long().view(-1, 1)).squeeze(1)
        y = batch["reward"] + self.spec.gamma * (1.0 - batch["done"]) * self.next_q(batch["next_obs"])
        conservative = (torch.logsumexp(q_all, dim=1) - q_all.mean(dim=1)).mean()
        td = nn.functional.mse_loss(q, y)
        loss = conservative + 0.5 * td
        self.optimize(loss, MAX_GRAD_NORM)
        return {
            "loss": loss.detach(),
            "td_loss": td.detach(),
            "cql_loss": conservative.detach(),
            "q": q.detach().mean(),
        }
