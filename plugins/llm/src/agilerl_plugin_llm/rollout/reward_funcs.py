"""Batched reward functions, the TRL way: ``environment.reward_funcs: ["module:function", ...]``.

Each function is called once per batch of completions, with keyword arguments only::

    f(prompts=[...], completions=[...], completion_ids=[[...], ...], **columns) -> list[float | None]

``prompts`` are the rows' ``prompt`` column as the dataset holds it (else the user message the
``prompt_template`` rendered); ``completions`` the decoded replies (for a conversational prompt, a
list of messages ``[{"role": "assistant", "content": ...}]``, as TRL); ``completion_ids`` the tokens
the policy sampled; every other dataset column arrives as a list of the rows' values under its own
name. A function without ``**kwargs`` gets only the arguments it names. ``None`` means "not
applicable to this row": the row's reward is the weighted sum of the others; a row where every
function says ``None`` gets 0 (as TRL's ``nansum``), with a warning. An ``async def`` function is
awaited, concurrently with the other async ones.

The reward of a row is ``sum_i reward_weights[i] * f_i(row)``. This list of (name, weight, batched
callable) is the general form of a batched reward source: another source joins it as one more
:class:`RewardFunc` through :data:`REWARD_SOURCES`, as ``environment.reward_model`` does (named
``reward_model``, weighted by the last of ``reward_weights``).

Trust: the ``module:function`` names are code, under the same rule as env entrypoints
(:mod:`agilerl.trust`): a checkpoint naming them is resumed only with the manifest you trust or
``--trust-checkpoint``. A module is imported from the working directory (it is on ``sys.path``
first) or the installed packages; ``path/to/file.py:function`` is accepted too.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import numbers
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError
from agilerl.imports import accepted_kwargs
from agilerl_plugin_llm.chat import is_conversational
from agilerl_plugin_llm.reward_model import reward_model_func

log = logging.getLogger("agilerl.llm.rewards")

#: The keyword arguments every reward function may take (besides the dataset's columns).
CALL_ARGUMENTS = ("prompts", "completions", "completion_ids")


class RewardFunctionError(AgileRLError):
    """A reward function could not be imported, has an unusable signature, or returned a bad value."""


@dataclass(frozen=True)
class RewardFunc:
    """One batched reward: ``fn(**kwargs) -> list[float | None]`` with its weight."""

    name: str
    weight: float
    fn: Callable[..., Any]

    @property
    def is_async(self) -> bool:
        call = type(self.fn).__call__ if not inspect.isfunction(self.fn) else None
        return inspect.iscoroutinefunction(self.fn) or (call is not None and inspect.iscoroutinefunction(call))


# --------------------------------------------------------------------------------------------------
# Loading and checking
# --------------------------------------------------------------------------------------------------


def _import(ref: str, field: str) -> Any:
    from agilerl.imports import import_object

    # "Importable from the working directory": as `python -m`, the cwd comes first.
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    return import_object(ref, what=f"environment.{field}", error=RewardFunctionError,
                         hint="A reward function is 'module:function' importable from the working directory or an "
                              "installed package, or 'path/to/file.py:function'.")  # fmt: skip


def signature_problem(fn: Any, name: str) -> str | None:
    """Why ``fn`` cannot be called as a batched reward function, or None."""
    if inspect.isclass(fn):
        return f"{name} is a class; give a function (or an instance with __call__)"
    if not callable(fn):
        return f"{name} is a {type(fn).__name__}, not a function"
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None  # a builtin or C callable: the first call tells
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    if "completions" not in params:
        return (f"{name}({', '.join(params)}) takes no 'completions' argument: a reward function is called as "
                "f(prompts=..., completions=..., completion_ids=..., **columns); add **kwargs for what it does "
                "not use")  # fmt: skip
    positional_only = [n for n, p in params.items() if p.kind is inspect.Parameter.POSITIONAL_ONLY]
    if positional_only:
        return f"{name}: parameters {', '.join(positional_only)} are positional-only; every argument is by keyword"
    return None


def load_reward_funcs(refs: Sequence[str], weights: Sequence[float] | None = None,
                      field: str = "reward_funcs") -> list[RewardFunc]:  # fmt: skip
    """The functions ``refs`` name, each checked for a usable signature (raises :class:`RewardFunctionError`)."""
    weights = list(weights) if weights is not None else [1.0] * len(refs)
    out: list[RewardFunc] = []
    for i, (ref, weight) in enumerate(zip(refs, weights, strict=True)):
        fn = _import(str(ref), f"{field}[{i}]")
        name = str(ref).rpartition(":")[2] or str(ref)
        why = signature_problem(fn, name)
        if why:
            raise RewardFunctionError(f"environment.{field}[{i}]: {why}")
        out.append(RewardFunc(name, float(weight), fn))
    return out


def _from_reward_funcs(spec: Any) -> list[RewardFunc]:
    refs = list(getattr(spec, "reward_funcs", None) or [])
    if not refs:
        return []
    weights = getattr(spec, "reward_weights", None)
    return load_reward_funcs(refs, weights[: len(refs)] if weights else None)


def _from_reward_model(spec: Any) -> list[RewardFunc]:
    found = reward_model_func(spec)
    return [RewardFunc(*found)] if found is not None else []


#: Batched reward sources, by the ``environment`` field that turns each on. Each builds the
#: :class:`RewardFunc` s it contributes from the env spec; a dataset rollout with any of them set is
#: scored in batches after each rollout, the reward being the weighted sum over all of them. The
#: order is the order of ``reward_weights``: one weight per ``reward_funcs`` entry, then the reward
#: model's (as in TRL, where a reward model is one of ``reward_funcs``).
REWARD_SOURCES: dict[str, Callable[[Any], list[RewardFunc]]] = {
    "reward_funcs": _from_reward_funcs,
    "reward_model": _from_reward_model,
}


def batched_sources_set(spec: Any) -> list[str]:
    """The batched reward source fields ``spec`` sets."""
    return [f for f in REWARD_SOURCES if getattr(spec, f, None) not in (None, "", [], {})]


def build_reward_funcs(spec: Any) -> list[RewardFunc]:
    """Every batched reward function the spec's sources give, in :data:`REWARD_SOURCES` order."""
    out: list[RewardFunc] = []
    for field in batched_sources_set(spec):
        out += REWARD_SOURCES[field](spec)
    return out


def reward_funcs_problems(spec: Any) -> list[tuple[str, str]]:
    """Validation: each ``reward_funcs`` entry imports and has a usable signature (``(field, why)`` pairs)."""
    problems: list[tuple[str, str]] = []
    for i, ref in enumerate(getattr(spec, "reward_funcs", None) or []):
        try:
            load_reward_funcs([ref], field="reward_funcs")
        except RewardFunctionError as exc:
            problems.append((f"reward_funcs[{i}]", str(exc).split(": ", 1)[-1]))
    return problems


# --------------------------------------------------------------------------------------------------
# Calling
# --------------------------------------------------------------------------------------------------


def _row_label(kwargs: dict[str, Any], row: int) -> str:
    prompt = kwargs["prompts"][row] if row < len(kwargs["prompts"]) else None
    text = prompt if isinstance(prompt, str) else repr(prompt)
    return f"row {row} (prompt {text[:80]!r})"


def check_values(name: str, values: Any, kwargs: dict[str, Any]) -> list[float | None]:
    """``values`` as one float (or None) per row; raises naming the function and the row otherwise."""
    n = len(kwargs["completions"])
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise RewardFunctionError(
            f"reward function {name} returned a {type(values).__name__}; it must return a list of {n} floats "
            "(one per completion; None where it does not apply)"
        )
    values = list(values)
    if len(values) != n:
        raise RewardFunctionError(
            f"reward function {name} returned {len(values)} values for {n} completions; it must return one per "
            "completion (None where it does not apply)"
        )
    out: list[float | None] = []
    for row, value in enumerate(values):
        if value is None:
            out.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise RewardFunctionError(
                f"reward function {name} returned {value!r} ({type(value).__name__}) for {_row_label(kwargs, row)}; "
                "rewards are numbers (None where it does not apply)"
            )
        if not math.isfinite(float(value)):
            raise RewardFunctionError(
                f"reward function {name} returned {value} for {_row_label(kwargs, row)}; rewards must be finite"
            )
        out.append(float(value))
    return out


def _call_one(func: RewardFunc, kwargs: dict[str, Any]) -> Any:
    try:
        return func.fn(**accepted_kwargs(func.fn, kwargs))
    except RewardFunctionError:
        raise
    except Exception as exc:
        raise RewardFunctionError(
            f"reward function {func.name} raised {type(exc).__name__}: {exc} (called on {len(kwargs['completions'])} "
            f"completions; the first: {_row_label(kwargs, 0)})"
        ) from exc


def _await_all(funcs: list[RewardFunc], kwargs: dict[str, Any]) -> list[Any]:
    async def one(func: RewardFunc) -> Any:
        try:
            return await func.fn(**accepted_kwargs(func.fn, kwargs))
        except Exception as exc:
            raise RewardFunctionError(
                f"reward function {func.name} raised {type(exc).__name__}: {exc} (called on "
                f"{len(kwargs['completions'])} completions; the first: {_row_label(kwargs, 0)})"
            ) from exc

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*(one(f) for f in funcs)))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(gather())
    with ThreadPoolExecutor(max_workers=1) as pool:  # called from inside an event loop: a loop of its own
        return pool.submit(asyncio.run, gather()).result()


def call_reward_funcs(funcs: Sequence[RewardFunc], kwargs: dict[str, Any]) -> tuple[list[float], list[dict[str, float | None]]]:  # fmt: skip
    """``(rewards, parts)``: the weighted reward of each row, and each function's value per row."""
    funcs = list(funcs)
    raw: dict[str, Any] = {}
    for func in funcs:
        if not func.is_async:
            raw[func.name] = _call_one(func, kwargs)
    pending = [f for f in funcs if f.is_async]
    if pending:
        raw.update(zip([f.name for f in pending], _await_all(pending, kwargs), strict=True))
    values = {f.name: check_values(f.name, raw[f.name], kwargs) for f in funcs}
    n = len(kwargs["completions"])
    rewards: list[float] = []
    parts: list[dict[str, float | None]] = []
    unscored: list[int] = []
    for row in range(n):
        part = {f.name: values[f.name][row] for f in funcs}
        given = [(f.weight, part[f.name]) for f in funcs if part[f.name] is not None]
        if not given:
            unscored.append(row)
        rewards.append(float(sum(w * float(v) for w, v in given if v is not None)))
        parts.append(part)
    if unscored:
        log.warning("every reward function returned None for %d of %d completions (%s): their reward is 0",
                    len(unscored), n, _row_label(kwargs, unscored[0]))  # fmt: skip
    return rewards, parts


class BatchReward:
    """Scores a batch of single-turn episodes with the batched reward functions, after the rollout.

    The dataset envs of a run share one; each env leaves its row, prompt and reply in its episode's
    ``info`` (``reward_row``), and :meth:`score` sets every trajectory's reward from them.
    """

    def __init__(self, funcs: Sequence[RewardFunc], *, max_reward: float | None = None) -> None:
        self.funcs = list(funcs)
        self.max_reward = max_reward

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.funcs]

    def score(self, trajs: Sequence[Any], tokenizer: Any = None) -> None:
        """Set ``rewards``, ``info["rewards"]`` (each function's value) and ``info["success"]`` in place."""
        todo = [t for t in trajs if "reward_row" in t.info]
        if not todo:
            return
        rows = [t.info["reward_row"] for t in todo]
        prompts = [r["prompt"] for r in rows]
        conversational = [is_conversational(p) for p in prompts]
        completions: list[Any] = [
            [{"role": "assistant", "content": r["completion"]}] if conv else r["completion"]
            for r, conv in zip(rows, conversational, strict=True)
        ]
        ids = [[tid for tid, m in zip(t.token_ids, t.policy_mask, strict=True) if m] for t in todo]
        columns: dict[str, list[Any]] = {}
        keys = list(dict.fromkeys(k for r in rows for k in r["columns"]))
        for key in keys:
            if key not in CALL_ARGUMENTS:
                columns[key] = [r["columns"].get(key) for r in rows]
        kwargs = {**columns, "prompts": prompts, "completions": completions, "completion_ids": ids}
        rewards, parts = call_reward_funcs(self.funcs, kwargs)
        for t, reward, part in zip(todo, rewards, parts, strict=True):
            t.rewards = [reward] if not t.rewards else [*([0.0] * (len(t.rewards) - 1)), reward]
            t.info["rewards"] = part
            if self.max_reward is not None:
                t.info["success"] = reward >= self.max_reward


__all__ = [
    "CALL_ARGUMENTS",
    "REWARD_SOURCES",
    "BatchReward",
    "RewardFunc",
    "RewardFunctionError",
    "batched_sources_set",
    "build_reward_funcs",
    "call_reward_funcs",
    "check_values",
    "load_reward_funcs",
    "reward_funcs_problems",
    "signature_problem",
]
