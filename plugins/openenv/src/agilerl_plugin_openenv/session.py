"""One OpenEnv WebSocket session, and the one event loop every session of the process runs on.

:func:`session_cls` is openenv-core's own ``GenericEnvClient`` (its ``reset``/``step``/``state``
frames and ``StepResult`` parsing) with the parts a training run needs changed: redacted errors,
structured error frames, bounded timeouts, extra headers (credentials read from the environment).
All sessions are driven from :class:`EventLoop`: one thread multiplexes every session, instead of a
thread (and loop) per client as openenv-core's ``SyncEnvClient`` has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import threading
from collections.abc import Coroutine
from functools import cache
from typing import Any

from agilerl_plugin_openenv._openenv import generic_client_cls
from agilerl_plugin_openenv.urls import ReplicaURL

_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


async def within(awaitable: Any, timeout: float) -> Any:
    """``await awaitable`` for at most ``timeout`` seconds (``TimeoutError`` after).

    ``asyncio.timeout`` where there is one (3.11+): unlike ``wait_for`` it makes no task per call,
    which is a good part of the client's CPU per step when a batch's requests are tiny.
    """
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(timeout):
            return await awaitable
    return await asyncio.wait_for(awaitable, timeout)


# --------------------------------------------------------------------------------------------------
# failures inside one session (internal; turned into OpenEnvError subclasses or truncations)
# --------------------------------------------------------------------------------------------------


class SessionFailure(Exception):
    """Base of the internal failures below."""


class Unreachable(SessionFailure):
    """Could not open a connection (refused, DNS, timeout)."""


class NotOpenEnv(SessionFailure):
    """Something answered, but not as an OpenEnv ``/ws`` endpoint."""


class Lost(SessionFailure):
    """The connection closed or a request timed out mid-session."""


class ErrorFrame(SessionFailure):
    """The server answered with an ``{"type": "error"}`` frame."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.code = str(data.get("code", "UNKNOWN"))
        self.message = str(data.get("message", ""))
        super().__init__(f"{self.code}: {self.message}")


# --------------------------------------------------------------------------------------------------
# the background loop and the session client
# --------------------------------------------------------------------------------------------------


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (a dependency on Linux and macOS), else asyncio's.

    The client's CPU per env step is mostly event-loop and transport work in Python; uvloop does
    that in C (see benchmarks/openenv/bench_speed.py). ``AGILERL_OPENENV_LOOP=asyncio`` opts out.
    """
    if os.environ.get("AGILERL_OPENENV_LOOP", "").lower() != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()  # type: ignore[no-any-return]
    return asyncio.new_event_loop()


class EventLoop:
    """One daemon thread running an asyncio loop for every session of the process."""

    _instance: EventLoop | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agilerl-openenv-loop", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> EventLoop:
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = EventLoop()
            return cls._instance

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """Run ``coro`` on the loop and wait at most ``timeout`` seconds (then it is cancelled)."""

        async def bounded() -> Any:
            try:
                return await within(coro, timeout)
            except (asyncio.TimeoutError, TimeoutError):
                raise Lost(f"no answer within request_timeout_s={timeout:g}s") from None

        future = asyncio.run_coroutine_threadsafe(bounded(), self.loop)
        try:
            # The inner wait_for is the real limit; this one only guards against a wedged loop.
            return future.result(timeout + 5.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise Lost(f"no answer within request_timeout_s={timeout:g}s") from None

    def run_all(self, coros: list[Coroutine[Any, Any, Any]], timeout: float) -> list[Any]:
        """Run ``coros`` concurrently on the loop; each result, or the exception it raised, in order.

        One thread hop for the whole batch (not one per call): what keeps client CPU per env step
        low when a rollout batch steps many sessions at once.
        """

        # No timeout per call: every request of a session is bounded by its own timeouts (connect,
        # message), and a timer per call would be a good part of the CPU of a tiny step.
        async def gather() -> list[Any]:
            return list(await asyncio.gather(*coros, return_exceptions=True))

        future = asyncio.run_coroutine_threadsafe(gather(), self.loop)
        try:
            return future.result(timeout + 5.0)  # type: ignore[no-any-return]
        except concurrent.futures.TimeoutError:
            future.cancel()
            return [Lost(f"no answer within request_timeout_s={timeout:g}s") for _ in coros]

    def fire(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Schedule ``coro`` without waiting (closing sessions)."""
        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(coro, self.loop)
        else:
            coro.close()


@cache
def session_cls() -> type:
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

    class OpenEnvSession(generic_client_cls()):  # type: ignore[misc]
        def __init__(self, replica: ReplicaURL, timeout: float, headers: dict[str, str] | None = None) -> None:
            super().__init__(base_url=replica.http, connect_timeout_s=timeout, message_timeout_s=timeout)
            self._ws_url = replica.ws
            self.replica = replica
            self.timeout = timeout
            self.headers = dict(headers or {})

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
                    additional_headers=self.headers or None,
                )
            except InvalidStatus as exc:
                status = exc.response.status_code
                raise NotOpenEnv(f"GET /ws answered HTTP {status} instead of a WebSocket upgrade") from None
            except InvalidURI as exc:
                raise NotOpenEnv(f"not a valid WebSocket URL ({type(exc).__name__})") from None
            except InvalidHandshake as exc:
                raise NotOpenEnv(f"the WebSocket handshake failed ({type(exc).__name__}: {exc})") from None
            except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
                reason = (
                    f"no connection within request_timeout_s={self.timeout:g}s"
                    if isinstance(exc, (asyncio.TimeoutError, TimeoutError))
                    else (exc.strerror or str(exc) or type(exc).__name__)
                )
                raise Unreachable(reason) from None
            return self

        async def _receive(self) -> dict[str, Any]:
            assert self._ws is not None
            try:
                raw = await within(self._ws.recv(), self._message_timeout)
            except (asyncio.TimeoutError, TimeoutError):
                raise Lost(f"no answer within request_timeout_s={self.timeout:g}s") from None
            except ConnectionClosed as exc:
                raise Lost(f"the connection closed ({close_reason(exc)})") from None
            try:
                frame = json.loads(raw)
            except (TypeError, ValueError):
                raise NotOpenEnv("the server sent a frame that is not JSON") from None
            if not isinstance(frame, dict) or "type" not in frame:
                raise NotOpenEnv("the server sent a JSON frame without a 'type' (not an OpenEnv /ws endpoint)")
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
                    raise Lost(f"the connection closed ({close_reason(exc)})") from None
                if isinstance(pending, dict) and pending.get("type") == "error":
                    raise ErrorFrame(pending.get("data") or {}) from None
                raise Lost(f"the connection closed ({close_reason(exc)})") from None
            frame = await self._receive()
            if frame.get("type") == "error":
                raise ErrorFrame(frame.get("data") or {})
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


def close_reason(exc: Any) -> str:
    rcvd = getattr(exc, "rcvd", None)
    if rcvd is None:
        return "no close frame: the server went away"
    return f"code {rcvd.code}" + (f", {rcvd.reason}" if rcvd.reason else "")
