"""NeuralUCB (Zhou, Li and Gu, 2020, "Neural Contextual Bandits with UCB-based Exploration").

Pull ``argmax_a mu(x_a) + gamma * sigma(x_a)``: the predicted reward plus an optimism bonus that
shrinks as the network sees contexts whose gradients look like ``x_a``'s. ``sigma`` comes from the
diagonal design matrix of :class:`~agilerl_plugin_bandit.neural_bandit.NeuralBandit`.
"""

from __future__ import annotations

import torch

from agilerl_plugin_bandit.neural_bandit import NeuralBandit


class NeuralUCB(NeuralBandit):
    """Neural contextual bandit with an upper-confidence-bound exploration bonus."""

    def score(self, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return mu + self.spec.gamma * sigma
