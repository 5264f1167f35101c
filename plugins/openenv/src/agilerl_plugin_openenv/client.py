"""The ``env_url`` rollout source: text envs whose episodes run on remote OpenEnv servers.

``build_env_url_source(spec)`` (called by the LLM plugin when a manifest sets ``environment.env_url``)
checks every replica once and reads the server's schema, then returns ``make_env``: each call
creates an :class:`OpenEnvTextEnv`, which holds one OpenEnv WebSocket session while an episode runs.

The parts live by job:

* :mod:`~agilerl_plugin_openenv.actions`: the server's schema, and text -> action;
* :mod:`~agilerl_plugin_openenv.prompts`: observations -> text, the system prompt, ``prompt_template``;
* :mod:`~agilerl_plugin_openenv.pool`: replicas, health and backoff, the session pool, capacity;
* :mod:`~agilerl_plugin_openenv.session`: one session (openenv-core's client) and the event loop;
* :mod:`~agilerl_plugin_openenv.config` (the spec's fields resolved) and
  :mod:`~agilerl_plugin_openenv.source` (probing the replicas, reading the schema);
* this module: the env adapter and the rollout-source entry point.

Faults never end a run by surprise: an unparseable or rejected action is a turn with
``invalid_action_reward`` and a feedback observation (counted in the ``invalid_actions`` metric); a
replica dying mid-episode truncates the episodes on it; only when no replica answers for a whole
reconnect budget does ``reset()`` raise :class:`~agilerl_plugin_openenv.errors.OpenEnvUnavailableError`
(the run stops with its last checkpoint kept).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from agilerl_plugin_llm.envs import EnvAtCapacity
from agilerl_plugin_openenv.actions import ActionParseError
from agilerl_plugin_openenv.config import DEFAULT_REQUEST_TIMEOUT_S, SourceConfig, expand_env_vars
from agilerl_plugin_openenv.errors import OpenEnvError, OpenEnvProtocolError, OpenEnvUnavailableError
from agilerl_plugin_openenv.pool import AllFull, Replica, SessionPool, capacity_error
from agilerl_plugin_openenv.session import ErrorFrame, Lost, NotOpenEnv, Unreachable
from agilerl_plugin_openenv.source import OpenEnvSource

# --------------------------------------------------------------------------------------------------
# the text env
# --------------------------------------------------------------------------------------------------

StepTuple = tuple[str, float, bool, bool, dict[str, Any]]


class OpenEnvTextEnv:
    """A text env (``reset``/``step``) whose episodes run on a remote OpenEnv server.

    An instance holds a WebSocket session only while its episode runs (then the session goes back
    to the pool for the next episode). ``concurrent``: calls wait on the network, so the rollout
    plays a batch of these at once; :meth:`run_batch` runs a batch's calls on the one event loop.
    """

    concurrent = True

    def __init__(self, source: OpenEnvSource) -> None:
        self._source = source
        self._rep: Replica | None = None
        self._session: Any = None
        self._last_text = ""
        self._turns = 0
        self._invalid = 0
        self._done = True
        self.system_prompt: str | None = None
        self.assistant_prefix: str | None = None
        self.max_turns: int | None = source.config.max_turns
        #: MCP envs: the allowed tools as function schemas, for the model's chat template (``tools=``).
        self.tools: list[dict[str, Any]] | None = (
            [t.function_schema() for t in source.action_format.allowed_tools()] or None
            if source.action_format.is_mcp
            else None
        )

    # -- the protocol (synchronous, for any caller) ------------------------------------------------

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return self._run(self.areset(seed))  # type: ignore[no-any-return]

    def step(self, action: str) -> StepTuple:
        return self._run(self.astep(action))  # type: ignore[no-any-return]

    def _run(self, coro: Any) -> Any:
        try:
            return self._source.loop.run(coro, self._source.outer_limit())
        except Lost as exc:  # only the outer guard: areset/astep handle their own requests' timeouts
            raise _stalled(self._source, exc) from None

    @staticmethod
    def run_batch(calls: list[Callable[[], Any]]) -> list[Any]:
        """Run ``reset``/``step`` calls of several envs concurrently on the event loop (one thread hop
        per batch). An :class:`EnvAtCapacity` is returned in its call's place; other errors raise."""
        coros: list[Any] = []
        for call in calls:
            fn = call.func if isinstance(call, partial) else None
            env = getattr(fn, "__self__", None)
            name = getattr(fn, "__name__", "")
            if not isinstance(env, OpenEnvTextEnv) or name not in ("reset", "step"):
                for c in coros:
                    c.close()
                return [_capture(c) for c in calls]
            assert isinstance(call, partial)
            coros.append(getattr(env, "a" + name)(*call.args, **call.keywords))
        if not coros:
            return []
        envs = [call.func.__self__ for call in calls]  # type: ignore[attr-defined]
        source = max((env._source for env in envs), key=lambda src: src.outer_limit())
        results = source.loop.run_all(coros, source.outer_limit())
        for result in results:
            if isinstance(result, Lost):
                raise _stalled(source, result)
            if isinstance(result, BaseException) and not isinstance(result, EnvAtCapacity):
                raise result
        return results

    # -- reset -------------------------------------------------------------------------------------

    async def areset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        slots = self._source._reset_slots
        if slots is None:
            return await self._reset(seed)
        async with slots:
            return await self._reset(seed)

    async def _reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        src, pool = self._source, self._source.pool
        deadline = time.monotonic() + src.budget() - 1.0
        kwargs = {} if seed is None else {"seed": int(seed)}
        while True:
            if self._session is None:
                try:
                    self._rep, self._session = await pool.open_session(deadline)
                except AllFull:
                    raise EnvAtCapacity(
                        "every OpenEnv replica is at its session limit with this run's own episodes; "
                        "this one waits for a free session"
                    ) from None
            rep = self._rep
            assert rep is not None
            try:
                result = await self._session.reset(**kwargs)
                break
            except ErrorFrame as exc:
                self._drop(discard=True)
                if exc.code != "CAPACITY_REACHED":
                    raise OpenEnvProtocolError(
                        f"the OpenEnv server at {rep.url.display} rejected reset(seed={seed}): {src.scrub(str(exc))}"
                    ) from None
                pool.note_capacity(rep, exc.data)
                mine, _ = SessionPool.count(rep.url.ws)
                if mine:  # this run's own episodes fill it: never ask it for more than that
                    rep.capacity = min(rep.capacity or mine, mine)
                    continue
                # Other clients fill this server: try the others, and it again after a backoff.
                pool.mark_down(rep, "CAPACITY_REACHED: other clients hold every session")
                if time.monotonic() >= deadline:
                    raise capacity_error(pool, exc.data) from None
            except (Lost, Unreachable) as exc:
                stale = pool.stale(self._session)
                self._drop(discard=True)
                if stale:  # a pooled session the server had closed: retry on a fresh one
                    continue
                pool.mark_down(rep, str(exc))
                if time.monotonic() >= deadline:
                    raise OpenEnvUnavailableError(
                        f"reset() could not start an episode on any OpenEnv replica ({rep.url.display}: "
                        f"{src.scrub(str(exc))}); the last checkpoint is kept (resume with agilerl train --resume)"
                    ) from None
            except NotOpenEnv as exc:
                self._drop(discard=True)
                raise OpenEnvProtocolError(
                    f"{rep.url.display} stopped speaking OpenEnv: {src.scrub(str(exc))}"
                ) from None
        pool.mark_up(rep)
        obs = result.observation if isinstance(result.observation, dict) else {}
        self.system_prompt = src.prompts.system(obs)
        self.assistant_prefix = src.prompts.assistant_prefix(obs)
        self._last_text = src.prompts.user(obs)
        self._turns, self._invalid, self._done = 0, 0, False
        extra = obs.get("info")
        info: dict[str, Any] = {**(extra if isinstance(extra, dict) else {}), **self._info(rep)}
        info["openenv_reward"] = result.reward
        return self._last_text, info

    def _info(self, rep: Replica) -> dict[str, Any]:
        info: dict[str, Any] = {"env_url": rep.url.display, "metrics": {"invalid_actions": float(self._invalid)}}
        if self._source.env_name:
            info["env_name"] = self._source.env_name
        return info

    # -- step --------------------------------------------------------------------------------------

    async def astep(self, action: str) -> StepTuple:
        src = self._source
        if self._session is None or self._done:
            raise OpenEnvError("step() called before reset() (or after the episode ended): call reset() first")
        rep = self._rep
        assert rep is not None
        self._turns += 1
        try:
            data = src.action_format.parse(action)
        except ActionParseError as exc:
            return self._invalid_action(f"Invalid action: {exc}.", rep)
        try:
            result = await self._session.step(data)
        except (Lost, Unreachable, NotOpenEnv) as exc:
            reason = src.scrub(str(exc))
            src.pool.mark_down(rep, reason, truncated=True)
            self._drop(discard=True)
            self._done = True
            return self._last_text, 0.0, False, True, {**self._info(rep), "openenv_error": reason}
        except ErrorFrame as exc:
            if exc.code in ("VALIDATION_ERROR", "EXECUTION_ERROR"):
                return self._invalid_action(f"Invalid action: {src.scrub(_frame_details(exc))}.", rep)
            # The server dropped our session (SESSION_ERROR, ...): a replica fault like any other
            # (named, backed off, warned about at most once per backoff period); the episode ends.
            reason = f"step() answered {src.scrub(str(exc))}"
            src.pool.mark_down(rep, reason, truncated=True)
            self._drop(discard=True)
            self._done = True
            return self._last_text, 0.0, False, True, {**self._info(rep), "openenv_error": reason}
        src.pool.mark_up(rep)
        obs = result.observation if isinstance(result.observation, dict) else {}
        reward = 0.0 if result.reward is None else float(result.reward)
        done = bool(result.done)
        truncated = done and bool(obs.get("truncated", False))
        terminated = done and not truncated
        text = src.prompts.user(obs) if obs else ""
        error_field = src.config.action_error_field
        info: dict[str, Any] = {}
        if isinstance(obs.get("info"), dict):
            info.update(obs["info"])
        if "tool_name" in obs and obs.get("error"):  # the MCP tool refused the call (it raised)
            self._invalid += 1
            info["action_error"] = text
            if result.reward is None:
                reward = src.config.invalid_action_reward
        elif error_field and obs.get(error_field):
            self._invalid += 1  # refused by the env itself, in its own observation field
            info["action_error"] = str(obs[error_field])
            if str(obs[error_field]) not in text:
                text = f"{text}\n{obs[error_field]}" if text else str(obs[error_field])
        if not done and self.max_turns is not None and self._turns >= self.max_turns:
            truncated = True
        self._last_text = text
        self._done = terminated or truncated
        if self._done:
            self._drop(discard=False)  # the session serves the next episode (of any env)
        return text, reward, terminated, truncated, {**info, **self._info(rep), "openenv_done": done}

    def _invalid_action(self, message: str, rep: Replica) -> StepTuple:
        """An action the server would not take: a turn with the penalty; the policy reads why."""
        self._invalid += 1
        hint = self._source.action_format.instructions()
        text = f"{message} {hint}".strip()
        truncated = self.max_turns is not None and self._turns >= self.max_turns
        self._done = truncated
        self._last_text = text
        if truncated:
            self._drop(discard=False)
        reward = self._source.config.invalid_action_reward
        return text, reward, False, truncated, {**self._info(rep), "action_error": message}

    # -- cleanup -----------------------------------------------------------------------------------

    def _drop(self, *, discard: bool) -> None:
        rep, session, self._rep, self._session = self._rep, self._session, None, None
        if session is not None and rep is not None:
            (self._source.pool.discard if discard else self._source.pool.release)(rep, session)

    def close(self) -> None:
        """Give the session back (kept open for the next env of this process)."""
        self._drop(discard=False)
        self._done = True

    def __del__(self) -> None:  # envs dropped without close() must not leak server sessions
        try:
            self._drop(discard=False)
        except Exception:
            pass


def _stalled(source: OpenEnvSource, exc: Exception) -> OpenEnvUnavailableError:
    return OpenEnvUnavailableError(
        f"an OpenEnv call did not finish within {source.outer_limit():g}s ({source.scrub(str(exc))}); replicas: "
        + "; ".join(f"{r.url.display}: {r.last_error or 'no error seen'}" for r in source.replicas)
        + ". The last checkpoint is kept (resume with agilerl train --resume)."
    )


def _capture(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except EnvAtCapacity as exc:
        return exc


def _frame_details(exc: ErrorFrame) -> str:
    errors = exc.data.get("errors")
    if isinstance(errors, list) and errors:
        parts = []
        for e in errors[:3]:
            if isinstance(e, dict):
                loc = ".".join(str(x) for x in e.get("loc", ()) if x != "data")
                parts.append(f"{loc}: {e.get('msg', '')}" if loc else str(e.get("msg", "")))
        return f"{exc.message}: " + "; ".join(parts)
    return exc.message or exc.code


# --------------------------------------------------------------------------------------------------
# the rollout-source entry point
# --------------------------------------------------------------------------------------------------


def build_env_url_source(spec: Any, *, seed: int | None = None) -> tuple[Callable[[], OpenEnvTextEnv], int | None]:
    """``env_url`` rollout source: ``(make_env, max_turns)`` after checking every replica once.

    ``seed`` is unused: episodes are seeded per ``reset(seed)``, which is forwarded to the server.
    """
    source = OpenEnvSource(SourceConfig.from_spec(spec))
    source.probe()
    # Each call is a fresh text env; its session is opened on first ``reset``.
    return partial(OpenEnvTextEnv, source), source.config.max_turns


__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_S",
    "OpenEnvSource",
    "OpenEnvTextEnv",
    "SourceConfig",
    "build_env_url_source",
    "expand_env_vars",
]
