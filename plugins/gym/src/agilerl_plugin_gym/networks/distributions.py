"""The action distributions of the on-policy policies (PPO, A2C): categorical, a product of categoricals,
or a diagonal Gaussian with a state-independent log-std, read off the policy head's output ``out``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def log_prob_entropy(
    kind: str, out: torch.Tensor, actions: torch.Tensor, nvec: Sequence[int], log_std: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``actions`` and entropy of the policy whose head gave ``out``.

    ``kind`` is ``"discrete"``, ``"multidiscrete"`` (``out`` holds one block of logits per entry of
    ``nvec``) or continuous (``out`` is the Gaussian's mean, ``log_std`` its log-std)."""
    if kind == "discrete":
        logp = torch.log_softmax(out, -1)
        return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)
    if kind == "multidiscrete":
        lps, ents = [], []
        for d, chunk in enumerate(out.split(list(nvec), dim=-1)):
            logp = torch.log_softmax(chunk, -1)
            lps.append(logp.gather(-1, actions[:, d].long().unsqueeze(-1)).squeeze(-1))
            ents.append(-(logp.exp() * logp).sum(-1))
        return torch.stack(lps).sum(0), torch.stack(ents).sum(0)
    assert log_std is not None, "a Gaussian policy needs its log-std"
    z = (actions - out) / log_std.exp()
    log_prob = (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
    entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum().expand(out.shape[0])
    return log_prob, entropy


def sample(kind: str, out: torch.Tensor, nvec: Sequence[int], log_std: torch.Tensor | None) -> torch.Tensor:
    """A sampled action per row of ``out`` (see :func:`log_prob_entropy` for ``kind``)."""
    if kind == "discrete":
        return torch.multinomial(torch.softmax(out, -1), 1).squeeze(-1)
    if kind == "multidiscrete":
        return torch.stack(
            [torch.multinomial(torch.softmax(c, -1), 1).squeeze(-1) for c in out.split(list(nvec), dim=-1)], -1
        )
    assert log_std is not None, "a Gaussian policy needs its log-std"
    return out + torch.randn_like(out) * log_std.exp()
