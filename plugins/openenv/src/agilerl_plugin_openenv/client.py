"""The ``env_url`` rollout source: text envs backed by remote OpenEnv servers.

``build_env_url_source(spec)`` (called by the LLM plugin when a manifest sets ``environment.env_url``)
checks every replica once, then returns ``make_env``: each call creates an :class:`OpenEnvTextEnv`,
one OpenEnv WebSocket session (``/ws``) per concurrent trajectory. Sessions are opened through
openenv-core's ``GenericEnvClient`` (a thin subclass, see :func:`_session_cls`), spread over the
replicas round-robin, and driven from one background asyncio loop per process so that any number of
trajectories costs one thread, not one each.

Faults:

* a replica down (or not speaking OpenEnv) when the run starts is an error naming it;
* a replica that dies or hangs mid-episode ends the trajectories on it as *truncated* once
  ``request_timeout_s`` passes (a killed server: at once); the replica is marked down and retried with
  exponential backoff, and new episodes go to the replicas that answer; every transition is logged;
* when no replica answers for a whole reconnect budget, ``reset()`` raises
  :class:`~agilerl_plugin_openenv.errors.OpenEnvUnavailableError`;
* credentials in URLs are used to connect and never printed (:mod:`agilerl_plugin_openenv.urls`).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import itertools
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import cache
from typing import Any

from agilerl_plugin_openenv.errors import (
    OpenEnvActionRejectedError,
    OpenEnvCapacityError,
    OpenEnvError,
    OpenEnvProtocolError,
    OpenEnvUnavailableError,
)
from agilerl_plugin_openenv.toolcalls import ToolCallParseError, parse_tool_call
from agilerl_plugin_openenv.urls import ReplicaURL, parse_replica, scrub

log = logging.getLogger("agilerl_plugin_openenv")

DEFAULT_REQUEST_TIMEOUT_S = 30.0
#: First and largest pause before retrying a replica that failed (doubling in between).
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.25, 30.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
#: Action fields an OpenEnv server commonly takes the agent's text in, when ``action_field`` is unset.
_TEXT_ACTION_NAMES = ("text", "message", "content", "action", "response", "answer", "command", "code")


# --------------------------------------------------------------------------------------------------
# failures inside one session (internal; turned into OpenEnvError subclasses or truncations)
# --------------------------------------------------------------------------------------------------


class _SessionFailure(Exception):
    """Base of the internal failures below."""


class _Unreachable(_SessionFailure):
    """Could not open a connection (refused, DNS, timeout)."""


class _NotOpenEnv(_SessionFailure):
    """Something answered, but not as an OpenEnv ``/ws`` endpoint."""


class _Lost(_SessionFailure):
    """The connection closed or a request timed out mid-session."""


class _ErrorFrame(_SessionFailure):
    """The server answered with an ``{"type": "error"}`` frame."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.code = str(data.get("code", "UNKNOWN"))
        self.message = str(data.get("message", ""))
        super().__init__(f"{self.code}: {self.message}")


# --------------------------------------------------------------------------------------------------
# the background loop and the session client
# --------------------------------------------------------------------------------------------------


class _Loop:
    """One daemon thread running an asyncio loop for every session of the process."""

    _instance: _Loop | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agilerl-openenv-loop", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> _Loop:
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = _Loop()
            return cls._instance

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """Run ``coro`` on the loop and wait at most ``timeout`` seconds (then it is cancelled)."""

        async def bounded() -> Any:
            try:
                return await asyncio.wait_for(coro, timeout)
            except asyncio.TimeoutError:
                raise _Lost(f"no answer within request_timeout_s={timeout:g}s") from None

        future = asyncio.run_coroutine_threadsafe(bounded(), self.loop)
        try:
            # The inner wait_for is the real limit; this one only guards against a wedged loop.
            return future.result(timeout + 5.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise _Lost(f"no answer within request_timeout_s={timeout:g}s") from None

    def fire(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Schedule ``coro`` without waiting (closing sessions)."""
        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(coro, self.loop)
        else:
            coro.close()


@cache
def _session_cls() -> type:
    """A ``GenericEnvClient`` subclass (built lazily: importing openenv-core is heavy).

    We keep openenv-core's client for the message shapes (``reset``/``step``/``state`` frames and
    ``StepResult`` parsing) and override three things it cannot do for a training run:

    * ``connect``: its error message prints the full URL (credentials included), it appends ``/ws``
      after any query string (``?token=...``), and it uses websockets' 10 s close timeout, which would
      stall a trajectory on a hung server long after ``request_timeout_s``;
    * ``_send_and_receive``: its error frames become ``RuntimeError("Server error: ...")`` strings; we
      need the structured code (``CAPACITY_REACHED``, ``VALIDATION_ERROR``, ...) to act on it;
    * ``_receive``: a non-JSON or non-OpenEnv frame must be a clear protocol error, not a KeyError later.
    """
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

    from agilerl_plugin_openenv._openenv import generic_client_cls

    class OpenEnvSession(generic_client_cls()):  # type: ignore[misc]
        def __init__(self, replica: ReplicaURL, timeout: float) -> None:
            super().__init__(base_url=replica.http, connect_timeout_s=timeout, message_timeout_s=timeout)
            self._ws_url = replica.ws
            self.replica = replica
            self.timeout = timeout

        async def connect(self) -> Any:
            if self._ws is not None:  # type: ignore[has-type]
                return self
            host = self.replica.http.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
            loopback = host.rsplit(":", 1)[0] in _LOOPBACK if not host.startswith("[") else host.startswith("[::1]")
            try:
                self._ws = await ws_connect(
                    self._ws_url,
                    open_timeout=self.timeout,
                    close_timeout=min(1.0, self.timeout),
                    max_size=self._max_message_size,
                    proxy=None if loopback else True,  # never send loopback traffic through a proxy
                    compression=None,  # frames are small; deflate costs more CPU than it saves on loopback
                )
            except InvalidStatus as exc:
                status = exc.response.status_code
                raise _NotOpenEnv(f"GET /ws answered HTTP {status} instead of a WebSocket upgrade") from None
            except InvalidURI as exc:
                raise _NotOpenEnv(f"not a valid WebSocket URL ({type(exc).__name__})") from None
            except InvalidHandshake as exc:
                raise _NotOpenEnv(f"the WebSocket handshake failed ({type(exc).__name__}: {exc})") from None
            except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
                reason = (
                    f"no connection within request_timeout_s={self.timeout:g}s"
                    if isinstance(exc, (asyncio.TimeoutError, TimeoutError))
                    else (exc.strerror or str(exc) or type(exc).__name__)
                )
                raise _Unreachable(reason) from None
            return self

        async def _receive(self) -> dict[str, Any]:
            assert self._ws is not None
            try:
                raw = await asyncio.wait_for(self._ws.recv(), timeout=self._message_timeout)
            except asyncio.TimeoutError:
                raise _Lost(f"no answer within request_timeout_s={self.timeout:g}s") from None
            except ConnectionClosed as exc:
                raise _Lost(f"the connection closed ({_close_reason(exc)})") from None
            try:
                frame = json.loads(raw)
            except (TypeError, ValueError):
                raise _NotOpenEnv("the server sent a frame that is not JSON") from None
            if not isinstance(frame, dict) or "type" not in frame:
                raise _NotOpenEnv("the server sent a JSON frame without a 'type' (not an OpenEnv /ws endpoint)")
            return frame

        async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
            await self.connect()
            assert self._ws is not None
            try:
                await self._ws.send(json.dumps(message))
            except ConnectionClosed as exc:
                # A server at capacity accepts, sends CAPACITY_REACHED and closes at once: our
                # request can race with that close, so read the frame it left before giving up.
                try:
                    pending = json.loads(await asyncio.wait_for(self._ws.recv(), 0.5))
                except Exception:
                    raise _Lost(f"the connection closed ({_close_reason(exc)})") from None
                if isinstance(pending, dict) and pending.get("type") == "error":
                    raise _ErrorFrame(pending.get("data") or {}) from None
                raise _Lost(f"the connection closed ({_close_reason(exc)})") from None
            frame = await self._receive()
            if frame.get("type") == "error":
                raise _ErrorFrame(frame.get("data") or {})
            return frame

        async def disconnect(self) -> None:
            ws, self._ws = self._ws, None  # type: ignore[assignment]
            if ws is None:
                return
            try:
                await ws.send(json.dumps({"type": "close"}))
                # Let the server close first: openenv-core's handler closes after a "close" frame and
                # logs a traceback when the client has already hung up.
                await asyncio.wait_for(ws.wait_closed(), min(1.0, self.timeout))
            except Exception:  # already gone, or slow to close: close from our side
                pass
            try:
                await ws.close()
            except Exception:
                pass

    return OpenEnvSession


def _close_reason(exc: Any) -> str:
    rcvd = getattr(exc, "rcvd", None)
    if rcvd is None:
        return "no close frame: the server went away"
    return f"code {rcvd.code}" + (f", {rcvd.reason}" if rcvd.reason else "")


# --------------------------------------------------------------------------------------------------
# configuration, replicas
# --------------------------------------------------------------------------------------------------


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

    @classmethod
    def from_spec(cls, spec: Any) -> SourceConfig:
        urls = spec.env_url if isinstance(spec.env_url, (list, tuple)) else [spec.env_url]
        replicas: list[ReplicaURL] = []
        for i, url in enumerate(urls):
            try:
                replicas.append(parse_replica(str(url)))
            except ValueError as exc:
                where = "environment.env_url" + (f"[{i}]" if len(urls) > 1 else "")
                raise OpenEnvError(f"{where} is not a usable URL: {exc}. Use e.g. http://127.0.0.1:8000") from None
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
        )


@dataclass
class _Replica:
    url: ReplicaURL
    index: int
    down_until: float = 0.0
    failures: int = 0
    last_error: str = ""


class _SessionPool:
    """Open sessions no env uses right now, per server, shared by every source of the process.

    A run builds several sources for one URL (training and held-out envs, say); if each kept its
    own idle sessions they would add up and exhaust the server's ``max_concurrent_envs`` although
    at most one batch plays at a time. Reusing a session also skips a WebSocket handshake.
    """

    lock = threading.Lock()
    idle: dict[str, list[Any]] = {}
    held: dict[str, int] = {}  # open sessions of this process per server (busy + idle)

    @classmethod
    def take(cls, ws_url: str) -> Any | None:
        with cls.lock:
            sessions = cls.idle.get(ws_url)
            return sessions.pop() if sessions else None

    @classmethod
    def put(cls, ws_url: str, session: Any) -> None:
        with cls.lock:
            cls.idle.setdefault(ws_url, []).append(session)

    @classmethod
    def opened(cls, ws_url: str) -> None:
        with cls.lock:
            cls.held[ws_url] = cls.held.get(ws_url, 0) + 1

    @classmethod
    def closed(cls, ws_url: str, count: int = 1) -> None:
        with cls.lock:
            cls.held[ws_url] = max(0, cls.held.get(ws_url, 0) - count)

    @classmethod
    def drain(cls, ws_url: str) -> list[Any]:
        with cls.lock:
            stale = cls.idle.pop(ws_url, [])
            cls.held[ws_url] = max(0, cls.held.get(ws_url, 0) - len(stale))
            return stale


# --------------------------------------------------------------------------------------------------
# the source: replicas, probing, sessions
# --------------------------------------------------------------------------------------------------


class OpenEnvSource:
    """Everything shared by the envs of one ``env_url``: replicas, health, settings, idle sessions."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.replicas = [_Replica(url, i) for i, url in enumerate(config.replicas)]
        self._rr = itertools.count()
        self._lock = threading.Lock()
        n = config.max_concurrent_resets
        self._reset_slots = threading.BoundedSemaphore(n) if n else None
        self.tool_schema: dict[str, Any] = {}
        self.action_field: str = config.action_field or "text"
        self._loop = _Loop.get()

    # -- messages ----------------------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        return scrub(text, self.config.replicas)

    @property
    def timeout(self) -> float:
        return self.config.request_timeout_s

    # -- health ------------------------------------------------------------------------------------

    def mark_down(self, rep: _Replica, reason: str) -> None:
        reason = self.scrub(reason)
        with self._lock:
            if rep.down_until > time.monotonic():
                # Already backing off: other trajectories on it failing now is the same outage,
                # not a failed retry, so the backoff does not grow.
                rep.last_error = reason
                return
            was_up = rep.failures == 0
            rep.failures += 1
            rep.last_error = reason
            wait = min(BACKOFF_FIRST_S * 2 ** (rep.failures - 1), BACKOFF_MAX_S)
            rep.down_until = time.monotonic() + wait
        for session in _SessionPool.drain(rep.url.ws):  # idle sessions on a dead replica are dead too
            self._loop.fire(session.disconnect())
        others = len(self.replicas) - 1
        msg = (
            f"OpenEnv replica {rep.url.display} failed: {reason}; "
            + (f"new episodes go to the other {others} replica(s); " if others else "")
            + f"retrying it in {wait:.2f}s (backoff)"
        )
        (log.warning if was_up else log.info)(msg)

    def mark_up(self, rep: _Replica) -> None:
        with self._lock:
            was_down, rep.failures, rep.down_until = rep.failures > 0, 0, 0.0
        if was_down:
            log.warning("OpenEnv replica %s answers again; reconnected", rep.url.display)

    # -- sessions ----------------------------------------------------------------------------------

    def _candidates(self) -> list[_Replica]:
        """Replicas in round-robin order starting at the next one, those marked down last."""
        start = next(self._rr) % len(self.replicas)
        order = self.replicas[start:] + self.replicas[:start]
        now = time.monotonic()
        return [r for r in order if r.down_until <= now] + sorted(
            (r for r in order if r.down_until > now), key=lambda r: r.down_until
        )

    def _take_idle(self, order: list[_Replica]) -> tuple[_Replica, Any] | None:
        now = time.monotonic()
        for rep in order:
            if rep.down_until <= now:
                session = _SessionPool.take(rep.url.ws)
                if session is not None:
                    # The session may come from another source of this process with other settings.
                    session.timeout = session._message_timeout = session._connect_timeout = self.timeout
                    return rep, session
        return None

    def release(self, rep: _Replica, session: Any) -> None:
        """An env is done with ``session``: keep it open for the next env (cheaper than reconnecting)."""
        if rep.down_until <= time.monotonic():
            _SessionPool.put(rep.url.ws, session)
        else:
            self.discard(rep, session)

    def discard(self, rep: _Replica, session: Any) -> None:
        _SessionPool.closed(rep.url.ws)
        self._loop.fire(session.disconnect())

    def open_session(self, deadline: float) -> tuple[_Replica, Any]:
        """A connected session on a live replica (reconnecting with backoff until ``deadline``)."""
        candidates = self._candidates()  # advances the round-robin once per session
        reused = self._take_idle(candidates)
        if reused:
            return reused
        cls = _session_cls()
        first = True
        while True:
            now = time.monotonic()
            if not first:
                candidates = self._candidates()
            first = False
            up = [r for r in candidates if r.down_until <= now]
            if not up:
                if now >= deadline:
                    break
                # Every replica is backing off: wait for the first to come due (within the budget).
                time.sleep(max(0.0, min(candidates[0].down_until, deadline) - now))
                up = [candidates[0]]
            for rep in up:
                session = cls(rep.url, self.timeout)
                try:
                    self._loop.run(session.connect(), self.timeout)
                except (_Unreachable, _Lost, _NotOpenEnv) as exc:
                    self.mark_down(rep, str(exc))
                    continue
                _SessionPool.opened(rep.url.ws)
                self.mark_up(rep)
                return rep, session
            if time.monotonic() >= deadline:
                break
        details = "; ".join(f"{r.url.display}: {r.last_error or 'not tried'}" for r in self.replicas)
        raise OpenEnvUnavailableError(
            f"no OpenEnv replica answered within the reconnect budget ({details}). "
            "Check that the server(s) in environment.env_url are running and reachable; the last checkpoint is kept."
        )

    # -- probing at build time -----------------------------------------------------------------------

    def _http_json(self, rep: ReplicaURL, path: str) -> Any:
        """GET ``path`` from a replica (credentials sent as basic auth, never in the URL printed)."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(rep.http)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        url = urlunsplit((parts.scheme, netloc, parts.path + path, parts.query, ""))
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        if parts.username is not None:
            token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        handler = urllib.request.ProxyHandler({}) if parts.hostname in _LOOPBACK else urllib.request.ProxyHandler()
        opener = urllib.request.build_opener(handler)
        with opener.open(req, timeout=self.timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def probe(self) -> None:
        """Check every replica before training: reachable, speaks OpenEnv, fields as configured."""
        cls = _session_cls()
        schema: dict[str, Any] | None = None
        for rep in self.replicas:
            session = cls(rep.url, self.timeout)
            try:
                self._loop.run(session.connect(), self.timeout)
                # A session costs the server one env; "state" is the cheapest frame that proves the
                # endpoint is OpenEnv's and that it had room (CAPACITY_REACHED arrives first otherwise).
                frame = self._loop.run(session._send_and_receive({"type": "state"}), self.timeout)
                if frame.get("type") != "state" or not isinstance(frame.get("data"), dict):
                    # Some other WebSocket service (an echo server answers {"type": "state"} too).
                    raise _NotOpenEnv(
                        f"/ws answered a state request with a {frame.get('type')!r} frame, not OpenEnv's 'state'"
                    )
            except _Unreachable as exc:
                raise OpenEnvUnavailableError(
                    f"the OpenEnv server at {rep.url.display} is not reachable: {self.scrub(str(exc))}. "
                    "Start it (e.g. `agilerl serve-env module:TextEnv --port N`) or fix environment.env_url."
                ) from None
            except _NotOpenEnv as exc:
                raise OpenEnvProtocolError(
                    f"{rep.url.display} does not speak the OpenEnv protocol: {self.scrub(str(exc))}. "
                    "environment.env_url must point at an OpenEnv server (its WebSocket route is /ws)."
                ) from None
            except _Lost as exc:
                raise OpenEnvUnavailableError(
                    f"the OpenEnv server at {rep.url.display} accepted a connection but {self.scrub(str(exc))}. "
                    "Is it overloaded or hung? Raise environment.request_timeout_s or restart it."
                ) from None
            except _ErrorFrame as exc:
                if exc.code == "CAPACITY_REACHED":
                    raise OpenEnvCapacityError(self._capacity_message([rep], exc)) from None
                # EXECUTION_ERROR here only means "state before reset" failed: the endpoint is OpenEnv.
            finally:
                self._loop.run(session.disconnect(), self.timeout)
            if schema is None:
                try:
                    schema = self._http_json(rep.url, "/schema")
                except (urllib.error.URLError, OSError, ValueError) as exc:
                    log.info(
                        "could not read %s/schema (%s); field names are not checked",
                        rep.url.display,
                        self.scrub(str(exc)),
                    )
                    schema = {}
        self._check_fields(schema or {})
        if self.config.mcp_tool:
            self._find_tool()

    def _check_fields(self, schema: dict[str, Any]) -> None:
        action_props = {
            k: v for k, v in ((schema.get("action") or {}).get("properties") or {}).items() if k != "metadata"
        }
        obs_props = {
            k
            for k in ((schema.get("observation") or {}).get("properties") or {})
            if k not in ("metadata", "reward", "done")
        }
        where = self.replicas[0].url.display
        if self.config.mcp_tool:
            return
        if self.config.action_field:
            if action_props and self.config.action_field not in action_props:
                raise OpenEnvProtocolError(
                    f"environment.action_field {self.config.action_field!r} is not a field of the action the server at "
                    f"{where} takes (its fields: {', '.join(sorted(action_props))}). Set action_field to the one that "
                    "should receive the policy's text."
                )
        elif action_props:
            strings = [k for k, v in action_props.items() if v.get("type") == "string"]
            named = [k for k in _TEXT_ACTION_NAMES if k in action_props]
            if "tool_name" in action_props and "arguments" in action_props:
                raise OpenEnvProtocolError(
                    f"the server at {where} is an MCP tool environment (its action is a tool call): set "
                    "environment.mcp_tool to the tool the policy calls"
                )
            if len(strings) == 1:
                self.action_field = strings[0]
            elif named:
                self.action_field = named[0]
            else:
                raise OpenEnvProtocolError(
                    f"cannot tell which field of the server's action (at {where}) takes the policy's text: it has "
                    f"{', '.join(sorted(action_props))}. Set environment.action_field."
                )
        if self.config.observation_field and obs_props and self.config.observation_field not in obs_props:
            raise OpenEnvProtocolError(
                f"environment.observation_field {self.config.observation_field!r} is not a field of the server's "
                f"observation (at {where}; its fields: {', '.join(sorted(obs_props))})."
            )

    def _find_tool(self) -> None:
        tool = self.config.mcp_tool
        rep, session = self.open_session(time.monotonic() + self.timeout)
        try:
            frame = self._loop.run(
                session._send_and_receive({"type": "step", "data": {"type": "list_tools"}}), self.timeout
            )
        except _ErrorFrame as exc:
            raise OpenEnvProtocolError(
                f"environment.mcp_tool is set but the server at {rep.url.display} is not an MCP tool environment "
                f"(list_tools was refused: {self.scrub(exc.message or exc.code)}). Unset mcp_tool, or point env_url at an "
                "MCPEnvironment server."
            ) from None
        except _SessionFailure as exc:
            raise OpenEnvUnavailableError(
                f"listing the tools of {rep.url.display} failed: {self.scrub(str(exc))}"
            ) from None
        finally:
            self.discard(rep, session)
        tools = ((frame.get("data") or {}).get("observation") or {}).get("tools") or []
        by_name = {t.get("name"): t for t in tools if isinstance(t, dict)}
        if tool not in by_name:
            raise OpenEnvProtocolError(
                f"environment.mcp_tool {tool!r} is not a tool of the server at {rep.url.display} "
                f"(its tools: {', '.join(sorted(n for n in by_name if n)) or 'none'})."
            )
        self.tool_schema = by_name[tool].get("input_schema") or by_name[tool].get("inputSchema") or {}

    def _capacity_message(self, reps: list[_Replica], exc: _ErrorFrame) -> str:
        held = sum(_SessionPool.held.get(r.url.ws, 0) for r in reps)
        shown = ", ".join(
            f"{r.url.display} ({exc.data.get('active_sessions', '?')}/{exc.data.get('max_sessions', '?')} sessions)"
            for r in reps
        )
        return (
            f"every OpenEnv replica refused a new session: CAPACITY_REACHED at {shown}. This process holds {held} of "
            "them (one per concurrent trajectory, plus idle ones it reuses). Start the server with more sessions (agilerl serve-env ... "
            "--max-concurrent-envs N), add replicas to environment.env_url, or run fewer trajectories at once."
        )

    # -- envs --------------------------------------------------------------------------------------

    def make_env(self) -> OpenEnvTextEnv:
        """A fresh text env: its own session, opened on first ``reset``."""
        return OpenEnvTextEnv(self)


# --------------------------------------------------------------------------------------------------
# the text env
# --------------------------------------------------------------------------------------------------


def render_observation(obs: dict[str, Any], field_name: str | None) -> str:
    """An OpenEnv observation dict as the text the policy reads."""
    if field_name:
        value = obs.get(field_name)
        if field_name not in obs:
            raise OpenEnvProtocolError(
                f"the server's observation has no field {field_name!r} (environment.observation_field); "
                f"it has: {', '.join(sorted(obs)) or 'none'}"
            )
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    if isinstance(obs.get("text"), str):
        return str(obs["text"])
    if "tool_name" in obs and "result" in obs:  # an MCP CallToolObservation
        return render_tool_result(obs)
    strings = [k for k, v in obs.items() if isinstance(v, str) and k not in ("system_prompt",)]
    if len(strings) == 1:
        return str(obs[strings[0]])
    return json.dumps({k: v for k, v in obs.items() if k not in ("info", "truncated")}, sort_keys=True, default=str)


def render_tool_result(obs: dict[str, Any]) -> str:
    error = obs.get("error")
    if error:
        return f"Tool error: {error.get('message', error) if isinstance(error, dict) else error}"
    result = obs.get("result")
    if isinstance(result, dict):
        texts = [
            c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict) and c.get("type") == "text"
        ]
        if texts:
            return "\n".join(texts)
        if "data" in result:
            result = result["data"]
    return result if isinstance(result, str) else json.dumps(result, sort_keys=True, default=str)


class OpenEnvTextEnv:
    """A text env (``reset``/``step``) whose episodes run on a remote OpenEnv server.

    One instance holds at most one WebSocket session; make one per concurrent trajectory.
    ``concurrent``: calls wait on the network and instances are thread-safe, so the LLM plugin's
    rollout harness resets and steps a batch of them at once.
    """

    concurrent = True

    def __init__(self, source: OpenEnvSource) -> None:
        self._source = source
        self._rep: _Replica | None = None
        self._session: Any = None
        self._last_text = ""
        self._turns = 0
        self._done = True
        self.system_prompt: str | None = None
        self.max_turns: int | None = source.config.max_turns

    # -- protocol ----------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        src = self._source
        if src._reset_slots is not None:
            with src._reset_slots:
                return self._reset(seed)
        return self._reset(seed)

    def _reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        src = self._source
        # Budget: one request timeout per replica (a hung one costs a full timeout to notice) plus one.
        deadline = time.monotonic() + src.timeout * (len(src.replicas) + 1)
        full: list[_Replica] = []
        while True:
            if self._session is None:
                self._rep, self._session = src.open_session(deadline)
            rep = self._rep
            assert rep is not None
            try:
                result = src._loop.run(
                    self._session.reset(**({} if seed is None else {"seed": int(seed)})), src.timeout
                )
                break
            except _ErrorFrame as exc:
                self._drop(discard=True)
                if exc.code == "CAPACITY_REACHED":
                    if rep not in full:
                        full.append(rep)
                    if len(full) >= len(src.replicas) or time.monotonic() >= deadline:
                        raise OpenEnvCapacityError(src._capacity_message(full, exc)) from None
                    src.mark_down(rep, "CAPACITY_REACHED (no free session)")
                    continue
                raise OpenEnvProtocolError(
                    f"the OpenEnv server at {rep.url.display} rejected reset(seed={seed}): {src.scrub(str(exc))}"
                ) from None
            except (_Lost, _Unreachable) as exc:
                src.mark_down(rep, str(exc))
                self._drop(discard=True)
                if time.monotonic() >= deadline:
                    raise OpenEnvUnavailableError(
                        f"reset() could not start an episode on any OpenEnv replica: {src.scrub(str(exc))}"
                    ) from None
            except _NotOpenEnv as exc:
                self._drop(discard=True)
                raise OpenEnvProtocolError(
                    f"{rep.url.display} stopped speaking OpenEnv: {src.scrub(str(exc))}"
                ) from None
        obs = result.observation if isinstance(result.observation, dict) else {}
        self.system_prompt = (
            obs.get("system_prompt") if isinstance(obs.get("system_prompt"), str) else self.system_prompt
        )
        self._last_text = render_observation(obs, src.config.observation_field)
        self._turns, self._done = 0, False
        extra = obs.get("info")
        info: dict[str, Any] = {"env_url": rep.url.display, **(extra if isinstance(extra, dict) else {})}
        return self._last_text, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        src = self._source
        if self._session is None or self._done:
            raise OpenEnvError("step() called before reset() (or after the episode ended): call reset() first")
        rep = self._rep
        assert rep is not None
        self._turns += 1
        info: dict[str, Any] = {"env_url": rep.url.display}
        if src.config.mcp_tool:
            try:
                args = parse_tool_call(action, src.config.mcp_tool, src.tool_schema)
            except ToolCallParseError as exc:
                return self._feedback(f"Invalid tool call: {exc}", info)
            payload: dict[str, Any] = {"type": "call_tool", "tool_name": src.config.mcp_tool, "arguments": args}
        else:
            payload = {src.action_field: action}
        try:
            result = src._loop.run(self._session.step(payload), src.timeout)
        except (_Lost, _Unreachable, _NotOpenEnv) as exc:
            reason = src.scrub(str(exc))
            log.warning(
                "OpenEnv replica %s: %s; the trajectory on it ends as truncated (the run goes on)",
                rep.url.display,
                reason,
            )
            src.mark_down(rep, reason)
            self._drop(discard=True)
            self._done = True
            return self._last_text, 0.0, False, True, {**info, "openenv_error": reason}
        except _ErrorFrame as exc:
            if exc.code in ("VALIDATION_ERROR", "EXECUTION_ERROR") and src.config.action_error_field:
                return self._feedback(f"Invalid action: {_frame_details(exc)}", info)
            if exc.code in ("VALIDATION_ERROR", "EXECUTION_ERROR"):
                self._done = True
                where = "rejected the action" if exc.code == "VALIDATION_ERROR" else "failed executing the action"
                sent = (
                    f"call of tool {src.config.mcp_tool!r}"
                    if src.config.mcp_tool
                    else f"{{{src.action_field!r}: <policy text>}}"
                )
                raise OpenEnvActionRejectedError(
                    f"the OpenEnv server at {rep.url.display} {where} ({exc.code}: {src.scrub(_frame_details(exc))}); "
                    f"sent {sent}. Set environment.action_field to the action field that takes text, or set "
                    "environment.action_error_field to feed rejected actions back to the policy as observations."
                ) from None
            raise OpenEnvProtocolError(
                f"the OpenEnv server at {rep.url.display} answered step() with {src.scrub(str(exc))}"
            ) from None
        obs = result.observation if isinstance(result.observation, dict) else {}
        reward = 0.0 if result.reward is None else float(result.reward)
        done = bool(result.done)
        truncated = done and bool(obs.get("truncated", False))
        terminated = done and not truncated
        text = render_observation(obs, src.config.observation_field) if obs else ""
        if isinstance(obs.get("info"), dict):
            info.update(obs["info"])
        field_name = src.config.action_error_field
        if field_name and obs.get(field_name):
            info["action_error"] = str(obs[field_name])
            if str(obs[field_name]) not in text:
                text = f"{text}\n{obs[field_name]}" if text else str(obs[field_name])
        if not done and self.max_turns is not None and self._turns >= self.max_turns:
            truncated = True
        self._last_text = text
        self._done = terminated or truncated
        return text, reward, terminated, truncated, info

    def _feedback(self, message: str, info: dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """A rejected action counts as a turn with no reward; the policy reads why."""
        truncated = self.max_turns is not None and self._turns >= self.max_turns
        self._done = truncated
        self._last_text = message
        return message, 0.0, False, truncated, {**info, "action_error": message}

    # -- cleanup -----------------------------------------------------------------------------------

    def _drop(self, *, discard: bool) -> None:
        rep, session, self._rep, self._session = self._rep, self._session, None, None
        if session is not None and rep is not None:
            (self._source.discard if discard else self._source.release)(rep, session)

    def close(self) -> None:
        """Give the session back (kept open for the next env of this source)."""
        self._drop(discard=False)
        self._done = True

    def __del__(self) -> None:  # envs dropped without close() must not leak server sessions
        try:
            self._drop(discard=False)
        except Exception:
            pass


def _frame_details(exc: _ErrorFrame) -> str:
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
