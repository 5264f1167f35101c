"""Bounded evaluation with progress: what the strategies' ``evaluate`` wraps around ``agent.test``.

With ``training.eval_steps`` unset, an evaluation episode ends when the env ends it. An env that
declares no step limit (no ``TimeLimit``, ``max_episode_steps`` None) and a policy that never ends
an episode (Breakout without FIRE) would evaluate forever, silently: such episodes stop after
:data:`DEFAULT_EVAL_CAP` vector steps, and the log says so once per run. While an evaluation runs,
a line every :data:`PROGRESS_INTERVAL_S` seconds says how far it is.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_EVAL_CAP",
    "EvalTicker",
    "env_step_limit",
    "eval_step_cap",
    "evaluate_bounded",
    "evaluation_progress",
    "single_env_step_limit",
]

log = logging.getLogger("agilerl.gym.eval")  # under "agilerl": the CLI shows it

#: Vector steps after which an evaluation episode stops when neither ``training.eval_steps`` nor
#: the env bounds it (AgileRL's Atari manifests leave eval_steps null; ALE's own cap is 108k frames).
DEFAULT_EVAL_CAP = 10_000
#: Seconds between two progress lines of one evaluation.
PROGRESS_INTERVAL_S = 10.0


def single_env_step_limit(env: Any) -> int | None:
    """The episode step limit one (not vectorised) env declares itself, or None: its registered
    ``max_episode_steps``, a ``TimeLimit`` among its wrappers (a custom env has no spec), or
    PettingZoo's ``max_cycles``."""
    from gymnasium.wrappers import TimeLimit

    spec = getattr(env, "spec", None)
    limit = getattr(spec, "max_episode_steps", None)
    if isinstance(limit, int):
        return limit
    inner = env
    for _ in range(64):  # the wrapper chain, outermost first
        if inner is None:
            break
        if isinstance(inner, TimeLimit):
            return int(inner._max_episode_steps)
        inner = getattr(inner, "env", None)
    cycles = getattr(getattr(env, "unwrapped", env), "max_cycles", None)  # PettingZoo's MPE and friends
    return cycles if isinstance(cycles, int) else None


def env_step_limit(env: Any) -> int | None:
    """The episode step limit the (vector) eval env declares itself, or None."""
    for sub in list(getattr(env, "envs", None) or [])[:1]:
        return single_env_step_limit(sub)
    return None


def eval_step_cap(eval_steps: int | None, env: Any, *, label: str, said: set[str], single: bool = False) -> int | None:
    """``eval_steps`` if set; None when the env bounds its episodes; else the default cap (logged once).

    ``env`` is a vector env, or one env when ``single`` (``agilerl eval``'s)."""
    if eval_steps is not None:
        return eval_steps
    if (single_env_step_limit(env) if single else env_step_limit(env)) is not None:
        return None  # the env ends every episode by itself
    if label not in said:
        said.add(label)
        log.info(
            "evaluation: %s declares no episode step limit and training.eval_steps is unset: evaluation "
            "episodes stop after %d steps (set training.eval_steps to change it)",
            label, DEFAULT_EVAL_CAP,
        )  # fmt: skip
    return DEFAULT_EVAL_CAP


@dataclass
class _Context:
    enabled: bool
    label: str


_current: contextvars.ContextVar[_Context | None] = contextvars.ContextVar("agilerl_gym_eval", default=None)


@contextlib.contextmanager
def evaluation_progress(*, enabled: bool, label: str) -> Iterator[None]:
    """Let ``agent.test`` inside this block report its progress (``label``: "member 3")."""
    token = _current.set(_Context(enabled, label))
    try:
        yield
    finally:
        _current.reset(token)


class EvalTicker:
    """Called by ``test`` once per vector step; logs a progress line every few seconds when enabled."""

    def __init__(self, episodes: int) -> None:
        ctx = _current.get()
        self.enabled = ctx is not None and ctx.enabled
        self.label = ctx.label if ctx is not None else ""
        self.episodes = episodes
        self.steps = 0
        self.finished = 0
        self._last = time.perf_counter()

    def tick(self, finished_in_round: int) -> None:
        """One vector step done; ``finished_in_round`` episodes of the current round have ended."""
        self.steps += 1
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last >= PROGRESS_INTERVAL_S:
            self._last = now
            done = self.finished + finished_in_round
            log.info("evaluating %s: %d steps, %d/%d episodes finished", self.label, self.steps, done, self.episodes)

    def end_round(self, finished_in_round: int) -> None:
        self.finished += finished_in_round


def evaluate_bounded(agent: Any, run: Any, said: set[str]) -> float:
    """A gym strategy's ``evaluate``: ``agent.test`` on the run's eval env, seeded per evaluation (so
    a resumed run evaluates alike), each episode bounded by :func:`eval_step_cap` (``said``: the
    labels whose default cap was already logged) and progress shown while it runs."""
    t = run.manifest.training
    cap = eval_step_cap(t.eval_steps, run.eval_env, label=run.manifest.environment.label, said=said)
    with evaluation_progress(enabled=run.progress, label=f"member {agent.index}"):
        return float(agent.test(run.eval_env, max_steps=cap, loop=t.eval_loop, seed=run.eval_seed))
