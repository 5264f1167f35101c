"""DQN's fast paths: acting and the gradient step of a plain-MLP Q-network without the modules.

* :func:`explore` — :meth:`DQN.explore <agilerl_plugin_gym.single_agent.dqn.DQN.explore>` with the
  greedy action computed through the network's :class:`~agilerl_plugin_gym.fast.fused.MLPChain`;
* :func:`learn` — :meth:`DQN.learn <agilerl_plugin_gym.single_agent.dqn.DQN.learn>` with the
  forward passes through the chains and ``loss.backward()``'s gradients written by hand
  (:func:`learn_by_hand`), bit-identical.

Selected (:func:`agilerl_plugin_gym.fast.select`) only for an agent whose class keeps DQN's own
``q_values``, ``next_q``, ``td_target`` and ``greedy_action`` (their chain versions are here). The
functions take the agent as ``self``: they are the methods they were, moved here unchanged.
``plugins/gym/tests/fast/test_hand_written_gradients.py`` checks them against the autograd path.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from agilerl_plugin_gym.engine.common import LazyStats
from agilerl_plugin_gym.fast.fused import MLPChain, mlp_chain
from agilerl_plugin_gym.fast.optim import inference_mode, no_grad
from agilerl_plugin_gym.observations import batch_size
from agilerl_plugin_gym.single_agent.dqn import DQN

__all__ = ["explore", "learn", "learn_by_hand", "select_explore", "select_learn"]

_SMOOTH_L1_BACKWARD = torch.ops.aten.smooth_l1_loss_backward.default
_NONE, _MEAN = 0, 1  # torch's loss reduction enum
#: The DQN methods whose chain versions :func:`explore` and :func:`learn` run instead.
_ACTING = ("q_values", "greedy_action")
_LEARNING = ("q_values", "next_q", "td_target")


def _own(agent: DQN, names: tuple[str, ...]) -> bool:
    return all(getattr(type(agent), name) is getattr(DQN, name) for name in names)


def _masking(agent: DQN) -> bool:
    return bool(getattr(agent.spec, "action_masking", False))  # masked actions: DQN's own methods


def select_explore(agent: DQN) -> Callable[..., Any] | None:
    """:func:`explore` bound to ``agent`` when its network is a plain MLP."""
    if _masking(agent) or not _own(agent, _ACTING) or mlp_chain(agent.nets["actor"]) is None:
        return None
    return functools.partial(explore, agent)


def select_learn(agent: DQN) -> Callable[..., Any] | None:
    """:func:`learn` bound to ``agent`` when :func:`learn_by_hand` writes its gradients."""
    if _masking(agent) or not _own(agent, _LEARNING) or _chain(agent) is None:
        return None
    return functools.partial(learn, agent)


def q_values(net: nn.Module, obs: Any) -> torch.Tensor:
    """``net(obs)`` (call it without gradients): through its :class:`~agilerl_plugin_gym.fast.fused.MLPChain`
    when it is a plain MLP (the same kernels without the modules' call overhead), else the modules."""
    chain = mlp_chain(net)
    return chain.forward(obs)[0] if chain is not None else net(obs)


@inference_mode
def greedy_action(self: DQN, obs: np.ndarray) -> np.ndarray:
    """:meth:`DQN.greedy_action` through :func:`q_values`."""
    return q_values(self.nets["actor"], self.obs_tensor(obs)).argmax(-1).cpu().numpy()


def explore(
    self: DQN, obs: np.ndarray, rng: np.random.Generator, *, warmup: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`DQN.explore` (the same draws from ``rng``) through :func:`greedy_action`."""
    n = batch_size(obs)
    eps = 1.0 if self.epsilon is None else self.epsilon
    if warmup or eps >= 1.0:
        action = rng.integers(0, self.n_actions, size=n)
    else:
        action = greedy_action(self, obs)
        explore = rng.random(n) < eps
        if explore.any():
            action = np.where(explore, rng.integers(0, self.n_actions, size=n), action)
    return action, action


@no_grad
def next_q(self: DQN, next_obs: Any) -> torch.Tensor:
    """:meth:`DQN.next_q` through :func:`q_values`."""
    q_target = q_values(self.nets["actor_target"], next_obs)
    if not getattr(self.spec, "double", True):  # RainbowDQN's spec has no such field
        return q_target.max(1).values
    next_a = q_values(self.nets["actor"], next_obs).argmax(1, keepdim=True)
    return q_target.gather(1, next_a).squeeze(1)


def td_target(self: DQN, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """:meth:`DQN.td_target` through :func:`next_q`."""
    nsteps = batch.get("nsteps")  # n-step replay: bootstrap with gamma^k after a k-step return
    gamma = self.spec.gamma if nsteps is None else torch.pow(self.spec.gamma, nsteps)
    return batch["reward"] + gamma * (1.0 - batch["done"]) * next_q(self, batch["next_obs"])


def learn(self: DQN, batch: dict[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """:meth:`DQN.learn`: by hand while the network is a plain MLP (:func:`learn_by_hand`)."""
    chain = _chain(self)
    if chain is None:
        return self.learn(batch)
    return learn_by_hand(self, batch, chain)


@no_grad
def learn_by_hand(self: DQN, batch: dict[str, torch.Tensor], chain: MLPChain) -> Mapping[str, torch.Tensor]:
    """:meth:`DQN.learn`'s step with the gradients ``loss.backward()`` gives written by hand:
    ``smooth_l1_loss``'s own backward kernel (after ``mean``'s and the weights' product under
    prioritized replay), the gather's (a scatter into zeros), then the chain's."""
    actions = batch["action"].long().view(-1, 1)
    out_q, saved = chain.forward(batch["obs"])
    q = out_q.gather(1, actions).squeeze(1)
    y = td_target(self, batch)
    weights = batch.get("weights")
    one = torch.ones((), dtype=q.dtype, device=q.device)
    # The kernels nn.functional.smooth_l1_loss and its autograd node run (q and y have one shape).
    if weights is None:
        g_q = _SMOOTH_L1_BACKWARD(one, q, y, _MEAN, 1.0)
    else:
        g_q = _SMOOTH_L1_BACKWARD((one / q.shape[0]) * weights, q, y, _NONE, 1.0)
    chain.backward(saved, torch.zeros_like(out_q).scatter_add_(1, actions, g_q.unsqueeze(1)))
    max_grad_norm = getattr(self.spec, "max_grad_norm", None)  # DQN's (as DQN.learn's optimize)
    if max_grad_norm is not None:
        self.flat.clip_grad_norm_(max_grad_norm)
    self.optimizers["optimizer"].step()  # every gradient written: nothing to zero first
    self.update_target()
    if weights is not None:  # the priorities are read at once: no point deferring
        return self._stats(_weighted_huber(q, y, weights), q, y, weights)
    # The engine reads only the last step's statistics: the loss value waits until then.
    return LazyStats(lambda: self._stats(torch._C._nn.smooth_l1_loss(q, y, _MEAN, 1.0), q, y, None))


def _weighted_huber(q: torch.Tensor, y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (torch._C._nn.smooth_l1_loss(q, y, _NONE, 1.0) * weights).mean()


def _chain(self: DQN) -> MLPChain | None:
    """The online network as an :class:`~agilerl_plugin_gym.fast.fused.MLPChain` when :meth:`DQN.learn`
    may skip autograd: a plain MLP whose layers are every parameter of the flat buffer."""
    chain = mlp_chain(self.nets["actor"])
    if chain is None:
        return None
    flat = self.flat
    checked = self.__dict__.get("_chain_covers")
    if checked is None or checked[0] is not chain or checked[1] is not flat:
        params = chain.parameters()
        covers = len(params) == len(flat.params) and all(map(operator.is_, params, flat.params))
        checked = self._chain_covers = (chain, flat, covers)  # type: ignore[attr-defined]
    if not checked[2]:
        return None
    flat.ensure()  # every .grad a view of the flat gradient, which the chain overwrites whole
    return chain
