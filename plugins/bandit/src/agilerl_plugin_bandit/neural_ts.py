"""NeuralTS (Zhang, Zhou, Li and Gu, 2021, "Neural Thompson Sampling").

For each arm draw ``r_a ~ N(mu(x_a), (gamma * sigma(x_a))^2)`` and pull the largest draw:
exploration in proportion to the network's uncertainty, randomised instead of optimistic.
"""

from __future__ import annotations

import torch

from agilerl_plugin_bandit.neural_bandit import NeuralBandit


class NeuralTS(NeuralBandit):
    """Neural contextual bandit exploring by Thompson sampling from a Gaussian posterior."""

    def score(self, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        # Draws come from the agent's own numpy generator, so runs are reproducible and resumable.
        noise = torch.from_numpy(self.rng.standard_normal(mu.shape[0], dtype="float32")).to(mu.device)
        return mu + self.spec.gamma * sigma * noise
