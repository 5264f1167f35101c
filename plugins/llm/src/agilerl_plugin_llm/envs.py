"""The text-environment protocol rollout algorithms play against.

A *text env* is the LLM analogue of a gymnasium env: observations and actions are strings. Rollout
sources (dataset rows + rubric, a Python ``entrypoint``, a remote OpenEnv ``env_url``) all produce
objects of this shape; :class:`agilerl_plugin_llm.rollout.harness.RolloutHarness` turns one into
token ids with a chat template and tracks which tokens the policy wrote.

No torch or transformers here: the OpenEnv plugin and users' env modules import this freely.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

from agilerl.errors import AgileRLError


@runtime_checkable
class TextEnv(Protocol):
    """What a rollout source's ``make_env()`` returns.

    ``reset(seed=None) -> (observation, info)``: start an episode; ``observation`` is the first user
    message.

    ``step(action) -> (observation, reward, terminated, truncated, info)``: ``action`` is the
    policy's reply as text; ``observation`` is the next user message (ignored once the episode ends).

    Optional attributes: ``system_prompt: str | None`` (rendered as the system message),
    ``max_turns: int | None`` (the env's own turn budget), ``close()``, and ``concurrent: bool``:
    true when ``reset``/``step`` mostly wait (on a server, a subprocess) and different instances
    may be called from different threads at once; the rollout harness then plays a batch's envs
    concurrently instead of one after another. ``info["metrics"]`` (a dict of numbers for the
    episode so far) is averaged over a batch's episodes into the training metrics.
    ``prompt_messages``: a list of ``{role, content}`` messages that *is* the prompt (a conversational
    dataset row, TRL's form); set, the harness renders it with the chat template instead of
    ``system_prompt`` + the observation. ``info["prefix"]`` / ``info["suffix"]`` (GEM's convention, as AgileRL reads it): text put before /
    after the observation in the user message (GEM's Sudoku sends the board as the suffix).
    """

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]: ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]: ...


class EnvAtCapacity(AgileRLError):
    """Raised by ``reset`` of a ``concurrent`` env whose backend (a server's session limit, say) has
    no room for another episode while other episodes of the same batch hold it: the rollout plays
    this episode once those end, in a later wave, instead of failing."""


class TextEnvError(AgileRLError):
    """A text env broke the :class:`TextEnv` protocol (wrong return shapes, non-numeric reward)."""


def check_reset(result: Any, env: Any) -> tuple[str, dict[str, Any]]:
    """Normalise and check what ``env.reset`` returned: a string, or ``(string, info)``."""
    if isinstance(result, str):
        return result, {}
    if isinstance(result, tuple) and len(result) >= 2 and isinstance(result[0], str):
        info = result[1] if isinstance(result[1], dict) else {}
        return result[0], info
    raise TextEnvError(
        f"{type(env).__name__}.reset() must return (observation: str, info: dict); got {_show(result)}. "
        "See agilerl_plugin_llm.envs.TextEnv."
    )


def check_step(result: Any, env: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """Normalise and check what ``env.step`` returned (a gymnasium 5-tuple, or the old 4-tuple)."""
    if isinstance(result, tuple) and len(result) == 4:
        obs, reward, done, info = result
        result = (obs, reward, done, False, info)
    if not (isinstance(result, tuple) and len(result) == 5):
        raise TextEnvError(
            f"{type(env).__name__}.step() must return (observation, reward, terminated, truncated, info); "
            f"got {_show(result)}"
        )
    obs, reward, terminated, truncated, info = result
    reward = as_reward(reward, f"{type(env).__name__}.step()")
    return ("" if obs is None else str(obs)), reward, bool(terminated), bool(truncated), dict(info or {})


def format_observation(obs: str, info: dict[str, Any] | None) -> str:
    """The user message for ``obs``: ``info["prefix"] + obs``, then ``"\n" + info["suffix"]`` when given.

    GEM envs keep part of the observation in ``info`` (the instructions in ``obs``, the board in
    ``suffix``); AgileRL's multi-turn wrapper renders it this way for every local env, and so do we.
    """
    if not info:
        return obs
    prefix, suffix = info.get("prefix"), info.get("suffix")
    text = f"{prefix}{obs}" if isinstance(prefix, str) and prefix else obs
    return f"{text}\n{suffix}" if isinstance(suffix, str) and suffix else text


def as_reward(value: Any, where: str) -> float:
    """A reward as a finite float, or a clear error naming ``where`` it came from."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            import numbers

            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                value = float(value)
            elif hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
                value = float(value.item())
            else:
                raise TypeError
        except (TypeError, ValueError):
            raise TextEnvError(f"{where} must give a number as the reward, got {_show(value)}") from None
    number = float(value)
    if not math.isfinite(number):
        raise TextEnvError(f"{where} gave a non-finite reward ({number})")
    return number


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) < 80 else text[:77] + '...'}"


__all__ = ["EnvAtCapacity", "TextEnv", "TextEnvError", "as_reward", "check_reset", "check_step", "format_observation"]
