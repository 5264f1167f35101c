"""The fast paths: the same computations as the algorithms' own methods, with less overhead.

The algorithm modules (:mod:`agilerl_plugin_gym.single_agent`, :mod:`agilerl_plugin_gym.multi_agent`)
hold their networks and losses in plain autograd, to be read top to bottom. For the small networks
of classic control most of a step's time is per-module dispatch and autograd bookkeeping, not
arithmetic, so this room keeps faster versions of a few methods, which the engines select when an
agent's networks qualify (:func:`select`) and which compute what the method computes:

* :mod:`.optim` — Adam calling torch's fused kernel directly, and flat parameter storage
  (``FlatParameters``/``FlatAdam``: one kernel for the Adam step, the gradient clip, the soft
  target update). Algorithms use these optimizers always; other plugins import them from
  :mod:`agilerl_plugin_gym.optim`.
* :mod:`.fused` — plain MLPs without the modules: ``FusedMLP`` (actor and critic packed into one
  chain of matmuls for acting) and ``MLPChain`` (a forward and a hand-written backward, writing
  the very gradients autograd writes).
* :mod:`.ppo`, :mod:`.dqn`, :mod:`.rainbow` — PPO's fused acting and minibatch step without
  autograd, DQN's and RainbowDQN's gradient step without autograd, DQN's acting through its chain.

Each fast method is selected for the algorithm *method* it replaces (``"module:Class.method"``
of the agent's own class), so a subclass that overrides the method runs its own code. A fast
method is bit-identical to the method it replaces (fused acting: equal up to float rounding); the
tests in ``plugins/gym/tests/fast/`` check each against the autograd path. :func:`off` turns the
room off, or some of its methods (agents then run their own), for those tests and for debugging.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["FAST_PATHS", "off", "select"]

#: ``"module:Class.method"`` of an algorithm's method -> ``"module:selector"``: the selector takes
#: the agent and returns the fast version of the method bound to it, or None when the agent's
#: networks do not qualify.
FAST_PATHS: dict[str, str] = {
    "agilerl_plugin_gym.single_agent.ppo:PPO.act": "agilerl_plugin_gym.fast.ppo:select_act",
    "agilerl_plugin_gym.single_agent.ppo:PPO.learn": "agilerl_plugin_gym.fast.ppo:select_learn",
    "agilerl_plugin_gym.single_agent.dqn:DQN.explore": "agilerl_plugin_gym.fast.dqn:select_explore",
    "agilerl_plugin_gym.single_agent.dqn:DQN.learn": "agilerl_plugin_gym.fast.dqn:select_learn",
    "agilerl_plugin_gym.single_agent.rainbow:RainbowDQN.learn": "agilerl_plugin_gym.fast.rainbow:select_learn",
}

#: Methods no fast path is selected for (:func:`off`); ``"*"``: all.
_off: frozenset[str] = frozenset()


def select(agent: Any, method: str) -> Callable[..., Any] | None:
    """The fast version of ``agent.<method>`` (bound to ``agent``), or None: no fast path for the
    method of the agent's class, its networks do not qualify, or the room is :func:`off`.

    The engines call it once per ``learn`` call (networks change only between them)."""
    if method in _off or "*" in _off:
        return None
    fn = getattr(type(agent), method, None)
    key = f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', '')}"
    target = FAST_PATHS.get(key)
    if target is None:
        return None
    module, _, attr = target.partition(":")
    selector: Callable[[Any], Callable[..., Any] | None] = getattr(importlib.import_module(module), attr)
    return selector(agent)


@contextmanager
def off(*methods: str) -> Iterator[None]:
    """No fast path is selected inside the block for ``methods`` (``"act"``, ``"learn"``, ...; none
    named: for any method), so agents run their own."""
    global _off
    before = _off
    _off = before | (frozenset(methods) or frozenset("*"))
    try:
        yield
    finally:
        _off = before
