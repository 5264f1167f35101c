"""Serve any text env (``reset()``/``step(text)``) as an OpenEnv server: ``agilerl serve-env``.

Each WebSocket session (``/ws``) gets its own text env from the factory, so concurrent clients never
share state. The wire types are :class:`TextAction` (``{"text": ...}``) and :class:`TextObservation`
(``text``, ``reward``, ``done``, plus ``truncated`` so a client can tell a time limit from a real end,
and ``system_prompt`` on reset). Anything OpenEnv-compatible can talk to it; our own client reads the
extra fields when they are there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Literal

from agilerl_plugin_openenv._openenv import env_server
from agilerl_plugin_openenv.entrypoints import text_env_factory
from agilerl_plugin_openenv.errors import ServeEnvError

_server = env_server()
Action = _server.Action
Observation = _server.Observation
State = _server.State
Environment = _server.Environment

log = logging.getLogger("agilerl_plugin_openenv.server")


class TextAction(Action):  # type: ignore[misc,valid-type]
    """The policy's reply."""

    text: str


class TextObservation(Observation):  # type: ignore[misc,valid-type]
    """What the policy sees next. ``done`` = terminated or truncated; ``truncated`` tells them apart."""

    text: str = ""
    truncated: bool = False
    system_prompt: str | None = None
    info: dict[str, Any] = {}


class _QuietDisconnects:
    """ASGI middleware: a client that hangs up is not a server error.

    openenv-core's ``/ws`` handler closes the socket in a ``finally`` that only tolerates
    ``RuntimeError``; when the client is already gone starlette raises ``WebSocketDisconnect`` and
    uvicorn logs a full traceback per session. Swallow exactly those, for WebSocket scopes only.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            names = {type(e).__name__ for e in (exc, exc.__context__, exc.__cause__) if e is not None}
            if not names & {"WebSocketDisconnect", "ClientDisconnected"}:
                raise


#: The largest request body or WebSocket text frame a server takes (``--max-message-bytes``). A
#: policy's reply is a few kilobytes; this bounds what one client can make the server hold.
MAX_MESSAGE_BYTES = 1024 * 1024


def _ws_error(message: str, code: str = "INVALID_JSON") -> dict[str, Any]:
    """An OpenEnv ``WSErrorResponse`` frame (what openenv-core sends for a bad message)."""
    return {"type": "websocket.send", "text": json.dumps({"type": "error", "data": {"message": message, "code": code}})}


class _Limits:
    """ASGI middleware: size limits, and frames openenv-core's ``/ws`` handler would drop the
    session for, answered with a protocol error instead (the session goes on).

    * an HTTP request body over ``max_bytes`` gets ``413`` (by ``Content-Length``, or once a
      streamed body passes the limit); a ``/reset`` or ``/step`` body that is JSON but not an object
      gets ``400``, and ``POST /step`` gets ``409`` (:data:`HTTP_STEP_ERROR`: HTTP requests are
      stateless, so a step there never follows a reset), each as ``{"detail": message}``;
    * on a WebSocket, a binary frame, a text frame over ``max_bytes`` or a JSON value that is not
      an object (a list, a number) is answered with ``{"type": "error", "data": {"message": ...,
      "code": "INVALID_JSON"}}`` and never reaches the env.
    """

    def __init__(self, app: Any, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope.get("type")
        if kind == "websocket":
            await self.app(scope, self._ws_receive(receive, send), send)
        elif kind == "http":
            await self._http(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _ws_receive(self, receive: Any, send: Any) -> Any:
        limit = self.max_bytes

        async def checked() -> Any:
            while True:
                message = await receive()
                if message.get("type") != "websocket.receive":
                    return message
                text = message.get("text")
                if text is None:
                    await send(_ws_error("binary frames are not part of the protocol: send JSON text frames"))
                    continue
                if len(text.encode("utf-8", "surrogatepass")) > limit:
                    await send(
                        _ws_error(f"a frame of {len(text)} characters is over this server's limit of {limit} bytes")
                    )
                    continue
                try:
                    value = json.loads(text)
                except ValueError:
                    return message  # openenv-core answers invalid JSON itself
                if not isinstance(value, dict):
                    await send(_ws_error(
                        f"a message is a JSON object such as {{\"type\": \"reset\"}}; got a JSON {type(value).__name__}"
                    ))  # fmt: skip
                    continue
                return message

        return checked

    async def _http(self, scope: Any, receive: Any, send: Any) -> None:
        limit = self.max_bytes
        headers = dict(scope.get("headers") or [])
        try:
            declared = int(headers.get(b"content-length", b"0") or 0)
        except ValueError:
            declared = 0
        too_large = f"request body over this server's limit of {limit} bytes"
        if declared > limit:
            await _http_error(send, 413, too_large)
            return
        # The body is read whole (at most the limit) and checked before the app sees it.
        buffer = bytearray()
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                return  # the client went away
            buffer += message.get("body", b"")
            if len(buffer) > limit:  # a streamed body (no Content-Length) counted as it comes in
                await _http_error(send, 413, too_large)
                return
            if not message.get("more_body", False):
                break
        body = bytes(buffer)
        problem = _http_problem(str(scope.get("path", "")), body) if scope.get("method") == "POST" else None
        if problem is not None:
            await _http_error(send, *problem)
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)


#: What ``POST /step`` over HTTP answers: each HTTP request gets a fresh env (openenv-core's HTTP
#: routes are stateless), so a step there always comes before any reset of that env.
HTTP_STEP_ERROR = (
    "step before reset: each HTTP request gets a fresh env (HTTP is stateless), so POST /step has no episode "
    "to step; play an episode in a WebSocket session at /ws (reset, then step)"
)


def _http_problem(path: str, body: bytes) -> tuple[int, str] | None:
    """``(status, message)`` for a POST this server refuses before it reaches openenv-core: a JSON
    body of ``/reset`` or ``/step`` that is not an object (400), ``/step`` over HTTP (409); ``None``
    to pass it on (``/mcp`` takes JSON-RPC, whose batches are lists)."""
    path = path.rstrip("/")
    if path not in ("/reset", "/step"):
        return None
    if body.strip():
        try:
            value = json.loads(body)
        except ValueError:
            value = {}  # not JSON: openenv-core's validation answers it (422)
        if not isinstance(value, dict):
            return 400, (
                f'a request body is a JSON object such as {{"seed": 0}} for /reset; got a JSON {type(value).__name__}'
            )
    if path == "/step":
        return 409, HTTP_STEP_ERROR
    return None


async def _http_error(send: Any, status: int, message: str) -> None:
    """Answer an HTTP request with ``{"detail": message}`` (FastAPI's error shape) and ``status``."""
    body = json.dumps({"detail": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def _jsonable(info: dict[str, Any]) -> dict[str, Any]:
    """The part of an ``info`` dict that survives JSON (the rest is dropped, not sent as garbage)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[str(key)] = value
    return out


#: How env calls run: on the server's event loop, in a per-session worker thread, or "auto".
Execution = Literal["auto", "inline", "thread"]
#: ``auto`` keeps an env on the event loop while its calls average under this many seconds.
INLINE_BUDGET_S = 0.0005


class TextEnvEnvironment(Environment):  # type: ignore[misc,valid-type]
    """An OpenEnv ``Environment`` wrapping one text env instance (one per session).

    Where the env's ``reset``/``step`` run (``execution``):

    * ``thread``: a worker thread per session (what openenv-core does for any synchronous env). Safe
      for slow steps, but each request pays two thread hops, most of a fast env's round trip;
    * ``inline``: on the server's event loop: no hops, but a slow step stalls every other session;
    * ``auto`` (default): inline while the env's calls stay cheap (moving average under
      :data:`INLINE_BUDGET_S`), then in its worker thread for good once they are not, so a slow env
      switches threads at most once, early.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        make_text_env: Callable[[], Any],
        execution: Execution = "auto",
        *,
        name: str = "text_env",
        max_concurrent_envs: int | None = None,
    ) -> None:
        super().__init__()
        self._name, self._max_sessions = name, max_concurrent_envs
        from agilerl_plugin_llm.envs import check_reset, check_step

        self._check_reset, self._check_step = check_reset, check_step
        self._env = make_text_env()
        self._state = State(episode_id=None, step_count=0)
        self._execution = execution
        self._offloaded = execution == "thread"
        self._avg_s = 0.0
        self._executor: ThreadPoolExecutor | None = None

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if not self._offloaded:
            t0 = time.perf_counter()
            out = fn(*args)
            if self._execution == "auto":
                self._avg_s = (
                    0.8 * self._avg_s + 0.2 * (time.perf_counter() - t0) if self._avg_s else time.perf_counter() - t0
                )
                self._offloaded = self._avg_s > INLINE_BUDGET_S
            return out
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agilerl-env")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _reset(self, seed: int | None, episode_id: str | None) -> TextObservation:
        raw = self._env.reset() if seed is None else self._env.reset(seed=seed)
        text, info = self._check_reset(raw, self._env)
        # As openenv-core's env template does: an episode always has an id, and reset's reward is 0.
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return TextObservation(
            text=text,
            reward=0.0,
            done=False,
            system_prompt=getattr(self._env, "system_prompt", None),
            info=_jsonable(info),
        )

    def _step(self, text: str) -> TextObservation:
        if self._state.episode_id is None:
            # The env has no episode yet: stepping it would answer for a game nobody started.
            raise ServeEnvError("step before reset: a session's first message must be reset")
        obs, reward, terminated, truncated, info = self._check_step(self._env.step(text), self._env)
        self._state.step_count += 1
        return TextObservation(
            text=obs,
            reward=reward,
            done=terminated or truncated,
            truncated=truncated and not terminated,
            info=_jsonable(info),
        )

    # openenv-core calls the *_async methods when a subclass defines them (and the sync ones otherwise).
    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> TextObservation:
        return await self._run(self._reset, seed, episode_id)  # type: ignore[no-any-return]

    async def step_async(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        return await self._run(self._step, action.text)  # type: ignore[no-any-return]

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> TextObservation:
        return self._reset(seed, episode_id)

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        return self._step(action.text)

    @property
    def state(self) -> Any:
        return self._state

    def get_metadata(self) -> Any:
        """``GET /metadata``: the env's name, and how many sessions the server holds at once."""
        limit = f"at most {self._max_sessions} concurrent sessions" if self._max_sessions else "concurrent sessions"
        doc = (getattr(self._env, "__doc__", None) or "").strip().split("\n\n")[0]
        from openenv.core.env_server.types import EnvironmentMetadata

        return EnvironmentMetadata(
            name=self._name,
            description=(
                f"agilerl serve-env: the text env {self._name!r} ({doc or 'reset()/step(text)'}); one env per "
                f"WebSocket session, {limit} (--max-concurrent-envs); action {{'text': str}}."
            ),
            version=None,
        )

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        close = getattr(self._env, "close", None)
        if callable(close):
            close()


def make_app(
    make_text_env: Callable[[], Any] | str,
    *,
    max_concurrent_envs: int = 64,
    env_config: dict[str, Any] | None = None,
    env_name: str | None = None,
    execution: Execution = "auto",
) -> Any:
    """A FastAPI app (openenv-core's ``create_app``) serving the text env.

    :param make_text_env: zero-argument factory of text envs, or an entrypoint string
        (``"module:Class"`` / ``"file.py:Class"``; ``env_config`` gives its keyword arguments).
    :param max_concurrent_envs: sessions the server holds at once; the next one gets ``CAPACITY_REACHED``.
    :param execution: where env calls run: ``auto``, ``inline`` or ``thread`` (see :class:`TextEnvEnvironment`).
    """
    name: str
    if isinstance(make_text_env, str):
        name = env_name or make_text_env.rpartition(":")[2]
        make_text_env = text_env_factory(make_text_env, env_config)
    else:
        name = env_name or str(getattr(make_text_env, "__name__", "text_env"))
    # Fail here, at startup, rather than on the first client's session.
    try:
        probe = make_text_env()
    except Exception as exc:
        raise ServeEnvError(f"creating the text env {name!r} failed: {type(exc).__name__}: {exc}") from exc
    missing = [m for m in ("reset", "step") if not callable(getattr(probe, m, None))]
    close = getattr(probe, "close", None)
    if callable(close):
        close()
    if missing:
        raise ServeEnvError(
            f"{name!r} is not a text env: it has no {' or '.join(missing)}() (see agilerl_plugin_llm.envs.TextEnv)"
        )

    if execution not in ("auto", "inline", "thread"):
        raise ServeEnvError(f"execution must be auto, inline or thread, got {execution!r}")

    def factory() -> TextEnvEnvironment:
        return TextEnvEnvironment(make_text_env, execution, name=name, max_concurrent_envs=max_concurrent_envs)

    factory.__name__ = name
    # A plain function (not the class) makes create_app build one instance to check concurrency
    # support; our wrapper declares it, so that is cheap and harmless.
    return _server.create_app(
        factory, TextAction, TextObservation, env_name=name, max_concurrent_envs=max_concurrent_envs
    )


def startup_lines(entrypoint: str, host: str, port: int, max_concurrent_envs: int) -> list[str]:
    """What ``serve-env`` prints when it starts: where it listens, its session limit, and a warning
    when the address is reachable from other machines."""
    shown_host = f"[{host}]" if ":" in host else host
    lines = [
        f"serving {entrypoint} as an OpenEnv server on http://{shown_host}:{port} (WebSocket /ws, "
        f"{max_concurrent_envs} sessions max: one per concurrent episode; raise with --max-concurrent-envs)"
    ]
    if not is_loopback(host):
        lines.append(
            f"warning: listening on {host}, reachable from other machines; the server has no authentication "
            "(anyone who can reach it can play, and use up its sessions). Bind 127.0.0.1 (the default) unless you "
            "mean it, and put an authenticating proxy in front."
        )
    return lines


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket (``port=0``: a free port chosen by the OS, no race with other processes)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeEnvError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _uvicorn_server(app: Any, log_level: str, max_message_bytes: int = MAX_MESSAGE_BYTES) -> Any:
    import uvicorn

    # The sans-I/O websockets implementation closes sessions quietly; uvicorn's default one logs a
    # traceback for every client that disconnects, which is noise for a training server.
    # A frame up to 4x the limit is read and answered with an error (the session goes on); a larger
    # one closes the connection (1009, message too big) before it is buffered.
    config = uvicorn.Config(
        _QuietDisconnects(_Limits(app, max_message_bytes)),
        log_level=log_level,
        ws="websockets-sansio",
        ws_max_size=4 * max_message_bytes,
        lifespan="on",
        access_log=False,
    )
    return uvicorn.Server(config)


def serve(
    entrypoint: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_concurrent_envs: int = 64,
    env_config: dict[str, Any] | None = None,
    log_level: str = "warning",
    execution: Execution = "auto",
    announce: Callable[[str], None] = print,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> None:
    """Serve ``entrypoint`` until interrupted (what ``agilerl serve-env`` runs)."""
    app = make_app(entrypoint, max_concurrent_envs=max_concurrent_envs, env_config=env_config, execution=execution)
    sock = bind_socket(host, port)
    for line in startup_lines(entrypoint, host, sock.getsockname()[1], max_concurrent_envs):
        announce(line)
    server = _uvicorn_server(app, log_level, max_message_bytes)
    server.run(sockets=[sock])


class ServedEnv:
    """A server running in a background thread of this process (tests, benchmarks, notebooks)."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:  # fmt: skip
        self._sock = bind_socket(host, port)
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self._server = _uvicorn_server(app, log_level, max_message_bytes)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self) -> ServedEnv:
        self._thread.start()
        for _ in range(6000):  # bounded (30 s): uvicorn sets `started` once it accepts connections
            if self._server.started or not self._thread.is_alive():
                break
            time.sleep(0.005)
        if not self._server.started:
            raise ServeEnvError("the OpenEnv server thread did not start")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@contextmanager
def serve_in_thread(app_or_entrypoint: Any, *, max_concurrent_envs: int = 64, **app_kwargs: Any) -> Iterator[ServedEnv]:
    """``with serve_in_thread("pkg.mod:Game") as served: ... served.url ...``."""
    app = app_or_entrypoint
    if isinstance(app, str) or (callable(app) and not hasattr(app, "router")):
        app = make_app(app, max_concurrent_envs=max_concurrent_envs, **app_kwargs)
    served = ServedEnv(app).start()
    try:
        yield served
    finally:
        served.stop()
