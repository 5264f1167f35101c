"""Generalised Advantage Estimation over a ``(steps, envs)`` rollout (numpy only).

Aware of Gymnasium's next-step autoreset (``valid``) and of the difference between termination (no
bootstrap) and an episode end that cuts a trajectory (bootstrap, but no credit across it).
:class:`agilerl_plugin_gym.buffers.RolloutBuffer` calls it for single- and multi-agent rollouts.
"""

from __future__ import annotations

import numpy as np

__all__ = ["gae"]


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    dones: np.ndarray,
    valid: np.ndarray,
    last_value: np.ndarray,
    last_valid: np.ndarray,
    gamma: float,
    gae_lambda: float,
    out: np.ndarray,
) -> None:
    """GAE(lambda) of a ``(T, N)`` rollout into ``out`` (advantages; returns are ``out + values``).

    ``values[t + 1]`` (``last_value`` after the last step) is the value of the observation that
    followed step ``t``. It is bootstrapped unless step ``t`` *terminated*; credit never flows back
    across an episode end (``dones``); a step with ``valid == 0`` (an auto-reset step, or an agent
    that did not act) gets advantage 0 and passes no credit back.
    """
    next_values = np.concatenate([values[1:], np.asarray(last_value, dtype=np.float32)[None]])
    next_valid = np.concatenate([valid[1:], np.asarray(last_valid, dtype=np.float32)[None]])
    # Everything that does not depend on the recursion, computed for all steps at once.
    delta = rewards + gamma * next_values * (1.0 - terminated) - values
    carry = gamma * gae_lambda * (1.0 - dones) * next_valid
    last_gae = np.zeros(rewards.shape[1], dtype=np.float32)
    for t in range(rewards.shape[0] - 1, -1, -1):
        last_gae = (delta[t] + carry[t] * last_gae) * valid[t]
        out[t] = last_gae
