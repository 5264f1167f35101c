"""The ``env_url`` rollout source: text envs whose episodes run on remote OpenEnv servers.

``build_env_url_source(spec)`` (called by the LLM plugin when a manifest sets ``environment.env_url``)
checks every replica once and reads the server's schema, then returns ``make_env``: each call
creates an :class:`OpenEnvTextEnv`, which holds one OpenEnv WebSocket session while an episode runs.

The parts live by job:

* :mod:`~agilerl_plugin_openenv.actions`: the server's schema, and text -> action;
* :mod:`~agilerl_plugin_openenv.prompts`: observations -> text, the system prompt, ``prompt_template``;
* :mod:`~agilerl_plugin_openenv.pool`: replicas, health and backoff, the session pool, capacity;
* :mod:`~agilerl_plugin_openenv.session`: one session (openenv-core's client) and the event loop;
* this module: the configuration and the env adapter.

Faults never end a run by surprise: an unparseable or rejected action is a turn with
``invalid_action_reward`` and a feedback observation (counted in the ``invalid_actions`` metric); a
replica dying mid-episode truncates the episodes on it; only when no replica answers for a whole
reconnect budget does ``reset()`` raise :class:`~agilerl_plugin_openenv.errors.OpenEnvUnavailableError`
(the run stops with its last checkpoint kept).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import json
import logging
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from agilerl_plugin_llm.envs import EnvAtCapacity
from agilerl_plugin_openenv.actions import ActionFormat, ActionParseError, Tool, is_mcp_action, params_of
from agilerl_plugin_openenv.errors import OpenEnvError, OpenEnvProtocolError, OpenEnvUnavailableError
from agilerl_plugin_openenv.pool import AllFull, Replica, ReplicaSet, SessionPool, capacity_error
from agilerl_plugin_openenv.prompts import PromptRenderer
from agilerl_plugin_openenv.session import _LOOPBACK, ErrorFrame, Lost, NotOpenEnv, Unreachable
from agilerl_plugin_openenv.urls import ReplicaURL, parse_replica

log = logging.getLogger("agilerl_plugin_openenv")

DEFAULT_REQUEST_TIMEOUT_S = 30.0
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


# --------------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------------


def expand_env_vars(text: str, where: str) -> tuple[str, list[str]]:
    """``text`` with ``${NAME}`` replaced by environment variables, and the values substituted."""
    values: list[str] = []

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in os.environ:
            raise OpenEnvError(f"{where} uses ${{{name}}} but the environment variable {name} is not set")
        values.append(os.environ[name])
        return os.environ[name]

    return _VAR.sub(sub, text), values


@dataclass
class SourceConfig:
    """The ``LLMEnvSpec`` fields this source honours, resolved."""

    replicas: list[ReplicaURL]
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    max_concurrent_resets: int | None = None
    max_turns: int | None = None
    observation_field: str | None = None
    action_field: str | None = None
    action_error_field: str = ""
    mcp_tool: str | None = None
    invalid_action_reward: float = 0.0
    prompt_template: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: Any) -> SourceConfig:
        headers: dict[str, str] = {}
        secrets: list[str] = []
        for header, var in (getattr(spec, "env_url_headers_from_env", None) or {}).items():
            if var not in os.environ:
                raise OpenEnvError(
                    f"environment.env_url_headers_from_env.{header}: the environment variable {var} is not set"
                )
            headers[str(header)] = os.environ[var]
            secrets.append(os.environ[var])
        urls = spec.env_url if isinstance(spec.env_url, (list, tuple)) else [spec.env_url]
        replicas: list[ReplicaURL] = []
        for i, url in enumerate(urls):
            where = "environment.env_url" + (f"[{i}]" if len(urls) > 1 else "")
            text, values = expand_env_vars(str(url), where)
            try:
                rep = parse_replica(text)
            except ValueError as exc:
                raise OpenEnvError(f"{where} is not a usable URL: {exc}. Use e.g. http://127.0.0.1:8000") from None
            extra = [v for v in [*values, *secrets] if len(v) >= 3]
            rep = replace(rep, raw=text, secrets=tuple(sorted({*rep.secrets, *extra}, key=len, reverse=True)))
            if values:  # what the manifest said is safe to show with the variables unexpanded
                rep = replace(rep, display=parse_replica(_VAR.sub("VAR", str(url))).display)
            replicas.append(rep)
        if not replicas:
            raise OpenEnvError("environment.env_url is an empty list: give at least one OpenEnv server URL")
        timeout = getattr(spec, "request_timeout_s", None)
        return cls(
            replicas=replicas,
            # 0 would mean "never wait"; treat it (and None) as the default rather than fail every request.
            request_timeout_s=float(timeout) if timeout else DEFAULT_REQUEST_TIMEOUT_S,
            max_concurrent_resets=getattr(spec, "max_concurrent_resets", None),
            max_turns=getattr(spec, "max_turns", None),
            observation_field=getattr(spec, "observation_field", None) or None,
            action_field=getattr(spec, "action_field", None) or None,
            action_error_field=getattr(spec, "action_error_field", "") or "",
            mcp_tool=getattr(spec, "mcp_tool", None) or None,
            invalid_action_reward=float(getattr(spec, "invalid_action_reward", 0.0) or 0.0),
            prompt_template=getattr(spec, "prompt_template", None) or None,
            headers=headers,
        )


# --------------------------------------------------------------------------------------------------
# the source: replicas, the server's schema, the prompt
# --------------------------------------------------------------------------------------------------

_EXIT_HOOKED = threading.Event()


class OpenEnvSource:
    """Everything the envs of one ``env_url`` share: replicas, settings, the action format, prompts."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.pool = ReplicaSet(config.replicas, config.request_timeout_s, config.headers)
        self.loop = self.pool.loop
        n = config.max_concurrent_resets
        self._reset_slots = asyncio.Semaphore(n) if n else None
        self.action_format = ActionFormat.for_fields({}, config.action_field)
        self.prompts = PromptRenderer(self.action_format, config.prompt_template, config.observation_field)
        self.env_name: str | None = None
        if not _EXIT_HOOKED.is_set():
            _EXIT_HOOKED.set()
            atexit.register(SessionPool.close_all)  # servers see sessions closed, not dropped

    @property
    def timeout(self) -> float:
        return self.config.request_timeout_s

    @property
    def replicas(self) -> list[Replica]:
        return self.pool.replicas

    def scrub(self, text: str) -> str:
        return self.pool.scrub(text)

    def budget(self) -> float:
        """Seconds a reset may take: one request timeout per replica (a hung one costs a full
        timeout to notice) plus one, plus the backoff waits in between."""
        return self.timeout * (len(self.replicas) + 1) + 1.0

    # -- probing at build time -----------------------------------------------------------------------

    def _http_json(self, rep: ReplicaURL, path: str) -> Any:
        """GET ``path`` from a replica (credentials sent as headers, never in the URL printed)."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(rep.http)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        url = urlunsplit((parts.scheme, netloc, parts.path + path, parts.query, ""))
        req = urllib.request.Request(url, headers={"Accept": "application/json", **self.config.headers})
        if parts.username is not None:
            token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        handler = urllib.request.ProxyHandler({}) if parts.hostname in _LOOPBACK else urllib.request.ProxyHandler()
        with urllib.request.build_opener(handler).open(req, timeout=self.timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))

    async def _check_replica(self, rep: Replica) -> None:
        session = self.pool.new_session(rep)
        display = rep.url.display
        try:
            await session.connect()
            # A session costs the server one env; "state" is the cheapest frame that proves the
            # endpoint is OpenEnv's and that it had room (CAPACITY_REACHED arrives first otherwise).
            frame = await session._send_and_receive({"type": "state"})
            if frame.get("type") != "state" or not isinstance(frame.get("data"), dict):
                raise NotOpenEnv(
                    f"/ws answered a state request with a {frame.get('type')!r} frame, not OpenEnv's 'state'"
                )
        except Unreachable as exc:
            raise OpenEnvUnavailableError(
                f"the OpenEnv server at {display} is not reachable: {self.scrub(str(exc))}. "
                "Start it (e.g. `agilerl serve-env module:TextEnv --port N`) or fix environment.env_url."
            ) from None
        except NotOpenEnv as exc:
            raise OpenEnvProtocolError(
                f"{display} does not speak the OpenEnv protocol: {self.scrub(str(exc))}. "
                "environment.env_url must point at an OpenEnv server (its WebSocket route is /ws)."
            ) from None
        except Lost as exc:
            raise OpenEnvUnavailableError(
                f"the OpenEnv server at {display} accepted a connection but {self.scrub(str(exc))}. "
                "Is it overloaded or hung? Raise environment.request_timeout_s or restart it."
            ) from None
        except ErrorFrame as exc:
            if exc.code == "CAPACITY_REACHED":
                if not SessionPool.count(rep.url.ws)[0]:  # full, and not with this process's sessions
                    raise capacity_error(self.pool, exc.data) from None
                self.pool.note_capacity(rep, exc.data)  # full with ours: the run queues its episodes
            # EXECUTION_ERROR here only means "state before reset" failed: the endpoint is OpenEnv.
        finally:
            await session.disconnect()

    async def _list_tools(self) -> list[Tool]:
        rep, session = await self.pool.open_session(time.monotonic() + self.timeout)
        try:
            frame = await session._send_and_receive({"type": "step", "data": {"type": "list_tools"}})
        except ErrorFrame as exc:
            raise OpenEnvProtocolError(
                f"the server at {rep.url.display} takes MCP tool calls but refused list_tools: "
                f"{self.scrub(exc.message or exc.code)}"
            ) from None
        except (Lost, Unreachable, NotOpenEnv) as exc:
            raise OpenEnvUnavailableError(
                f"listing the tools of {rep.url.display} failed: {self.scrub(str(exc))}"
            ) from None
        finally:
            self.pool.discard(rep, session)
        listing = ((frame.get("data") or {}).get("observation") or {}).get("tools") or []
        return [Tool.from_listing(t) for t in listing if isinstance(t, dict) and t.get("name")]

    def probe(self) -> None:
        """Check every replica before training (reachable, speaks OpenEnv), then read the first one's
        schema and metadata: the action format, the tools, the prompt."""
        for rep in self.replicas:
            self.loop.run(self._check_replica(rep), self.timeout * 2 + 1.0)
        first = self.replicas[0].url
        schema: dict[str, Any] = {}
        try:
            schema = self._http_json(first, "/schema") or {}
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.info("could not read %s/schema (%s); actions are sent as text", first.display, self.scrub(str(exc)))
        try:
            meta = self._http_json(first, "/metadata") or {}
            self.env_name = str(meta.get("name")) if isinstance(meta, dict) and meta.get("name") else None
        except (urllib.error.URLError, OSError, ValueError):
            pass
        self._set_format(schema)

    def _set_format(self, schema: dict[str, Any]) -> None:
        where = self.replicas[0].url.display
        action = schema.get("action") or {}
        obs_fields = {p.name for p in params_of(schema.get("observation") or {}, skip=("metadata", "reward", "done"))}
        field_name = self.config.action_field
        if is_mcp_action(action):
            if field_name:
                raise OpenEnvProtocolError(
                    f"the server at {where} is an MCP tool environment (its action is a tool call); remove "
                    "environment.action_field (set mcp_tool to allow only one tool)"
                )
            tools = self.loop.run(self._list_tools(), self.timeout * 2 + 1.0)
            if self.config.mcp_tool and self.config.mcp_tool not in {t.name for t in tools}:
                raise OpenEnvProtocolError(
                    f"environment.mcp_tool {self.config.mcp_tool!r} is not a tool of the server at {where} "
                    f"(its tools: {', '.join(sorted(t.name for t in tools)) or 'none'})."
                )
            fmt = ActionFormat.for_tools(tools, self.config.mcp_tool)
        else:
            if self.config.mcp_tool and action:
                raise OpenEnvProtocolError(
                    f"environment.mcp_tool is set but the server at {where} is not an MCP tool environment (its "
                    f"action has the fields {', '.join(p.name for p in params_of(action)) or 'none'}). Unset mcp_tool."
                )
            names = [p.name for p in params_of(action)]
            if field_name and names and field_name not in names:
                raise OpenEnvProtocolError(
                    f"environment.action_field {field_name!r} is not a field of the action the server at {where} "
                    f"takes (its fields: {', '.join(sorted(names))}). Set action_field to the one that should receive "
                    "the policy's text, or remove it to fill every field from the reply."
                )
            fmt = ActionFormat.for_fields(action, field_name)
        obs = self.config.observation_field
        if obs and obs_fields and obs not in obs_fields:
            raise OpenEnvProtocolError(
                f"environment.observation_field {obs!r} is not a field of the server's observation (at {where}; "
                f"its fields: {', '.join(sorted(obs_fields))})."
            )
        self.action_format = fmt
        self.prompts = PromptRenderer(fmt, self.config.prompt_template, obs)

    def make_env(self) -> OpenEnvTextEnv:
        """A fresh text env: its session is opened on first ``reset``."""
        return OpenEnvTextEnv(self)


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
        return self._source.loop.run(self.areset(seed), self._source.budget())  # type: ignore[no-any-return]

    def step(self, action: str) -> StepTuple:
        return self._source.loop.run(self.astep(action), self._source.budget())  # type: ignore[no-any-return]

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
        budget = max(env._source.budget() for env in envs)
        results = envs[0]._source.loop.run_all(coros, budget)
        for result in results:
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
                pool.mark_down(rep, str(exc))
                self._drop(discard=True)
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
            reason = src.scrub(str(exc))  # the server dropped our session (SESSION_ERROR, ...): end it
            log.warning(
                "OpenEnv replica %s answered step() with %s; the episode ends as truncated", rep.url.display, reason
            )
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
    return source.make_env, source.config.max_turns
