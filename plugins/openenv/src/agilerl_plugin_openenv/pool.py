"""Replicas, their health, and the sessions this process holds on them.

* **Health.** A replica that fails is marked down with exponential backoff; new episodes go to the
  others. When its backoff ends it is *half-open*: exactly one episode tries it, and only an answered
  request (not a mere connection) marks it up again, so a server that accepts connections and then
  fails cannot reset its own backoff. Warnings name the replica and its last error and are
  rate-limited to one per replica per backoff period (the rest go to the debug log).
* **Sessions.** Sessions no episode uses right now stay open in a process-wide pool per server
  (:class:`SessionPool`) and are reused: several sources of one run share a server's sessions.
* **Capacity.** A server refusing a session with ``CAPACITY_REACHED`` tells us its limit. The pool
  never opens more than that; an episode that finds no room while this process's own episodes fill
  the server is deferred (:class:`~agilerl_plugin_llm.envs.EnvAtCapacity`), so the rollout plays it in
  a later wave. One warning per server says how to raise ``max_concurrent_envs``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from agilerl_plugin_openenv.errors import OpenEnvCapacityError, OpenEnvUnavailableError
from agilerl_plugin_openenv.session import EventLoop, Lost, NotOpenEnv, Unreachable, session_cls
from agilerl_plugin_openenv.urls import ReplicaURL, scrub

log = logging.getLogger("agilerl_plugin_openenv")

#: First and largest pause before retrying a replica that failed (doubling in between).
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.25, 30.0


@dataclass
class Replica:
    url: ReplicaURL
    index: int
    down_until: float = 0.0
    failures: int = 0
    last_error: str = ""
    #: No further warning about this replica before this time (one per backoff period).
    quiet_until: float = 0.0
    #: A half-open probe (the one episode allowed to try a replica after its backoff) is in flight.
    probing: bool = False
    #: Sessions the server accepts at once, once it has told us (``CAPACITY_REACHED``).
    capacity: int | None = None
    capacity_warned: bool = False

    def available(self, now: float) -> bool:
        return self.down_until <= now and not self.probing


class SessionPool:
    """The sessions this process holds, per server: every open one (``live``) and, among them, those no
    episode uses right now (``idle``, reused by the next episode). Shared by every source of the process."""

    lock = threading.Lock()
    idle: dict[str, list[Any]] = {}
    live: dict[str, dict[int, Any]] = {}

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
    def opened(cls, ws_url: str, session: Any) -> None:
        with cls.lock:
            cls.live.setdefault(ws_url, {})[id(session)] = session

    @classmethod
    def closed(cls, ws_url: str, session: Any) -> None:
        with cls.lock:
            cls.live.get(ws_url, {}).pop(id(session), None)

    @classmethod
    def count(cls, ws_url: str) -> tuple[int, int]:
        """``(open, idle)`` sessions of this process on a server."""
        with cls.lock:
            return len(cls.live.get(ws_url, ())), len(cls.idle.get(ws_url, ()))

    @classmethod
    def drain(cls, ws_url: str) -> list[Any]:
        """Forget the idle sessions on a server (the caller closes them)."""
        with cls.lock:
            stale = cls.idle.pop(ws_url, [])
            for session in stale:
                cls.live.get(ws_url, {}).pop(id(session), None)
            return stale

    @classmethod
    def close_all(cls) -> None:
        """Close every open session, idle or not (at exit: the servers see a clean close, not a dropped
        socket, and free the sessions at once)."""
        with cls.lock:
            stale = [s for sessions in cls.live.values() for s in sessions.values()]
            cls.idle.clear()
            cls.live.clear()
        if stale:
            EventLoop.get().run_all([s.disconnect() for s in stale], 2.0)


class AllFull(Exception):
    """Every replica is at its known capacity with this process's own busy sessions."""


class ReplicaSet:
    """The replicas of one ``env_url``: health, choosing one for a new episode, its sessions."""

    def __init__(self, urls: list[ReplicaURL], timeout: float, headers: dict[str, str] | None = None) -> None:
        self.replicas = [Replica(url, i) for i, url in enumerate(urls)]
        self.urls = urls
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._rr = itertools.count()
        self._lock = threading.Lock()
        self.loop = EventLoop.get()

    def scrub(self, text: str) -> str:
        return scrub(text, self.urls)

    def new_session(self, rep: Replica) -> Any:
        return session_cls()(rep.url, self.timeout, self.headers)

    # -- health ------------------------------------------------------------------------------------

    def mark_down(self, rep: Replica, reason: str, *, truncated: bool = False) -> None:
        reason = self.scrub(reason)
        now = time.monotonic()
        with self._lock:
            rep.probing = False
            rep.last_error = reason
            if rep.down_until > now:
                # Already backing off: other episodes on it failing now is the same outage, not a
                # failed retry, so the backoff does not grow (and nothing more is said).
                log.debug("OpenEnv replica %s (backing off): %s", rep.url.display, reason)
                return
            rep.failures += 1
            wait = min(BACKOFF_FIRST_S * 2 ** (rep.failures - 1), BACKOFF_MAX_S)
            rep.down_until = now + wait
            speak = now >= rep.quiet_until
            if speak:
                rep.quiet_until = rep.down_until
        for session in SessionPool.drain(rep.url.ws):  # idle sessions on a dead replica are dead too
            self.loop.fire(session.disconnect())
        others = len(self.replicas) - 1
        msg = (
            f"OpenEnv replica {rep.url.display} failed: {reason}; "
            + ("episodes on it end as truncated (the run goes on); " if truncated else "")
            + (f"new episodes go to the other {others} replica(s); " if others else "")
            + f"retrying it in {wait:.2f}s (backoff, failure {rep.failures})"
        )
        (log.warning if speak else log.debug)(msg)

    def mark_up(self, rep: Replica) -> None:
        """A request on ``rep`` was answered: it is healthy (ends a half-open probe)."""
        with self._lock:
            was_down = rep.failures > 0
            rep.failures, rep.down_until, rep.probing, rep.quiet_until = 0, 0.0, False, 0.0
        if was_down:
            log.warning("OpenEnv replica %s answers again; reconnected", rep.url.display)

    def note_capacity(self, rep: Replica, data: dict[str, Any]) -> None:
        """The server refused a session (``CAPACITY_REACHED``): remember its limit, say so once."""
        held, _ = SessionPool.count(rep.url.ws)
        limit = data.get("max_sessions")
        with self._lock:
            rep.probing = False
            rep.capacity = int(limit) if isinstance(limit, int) and limit > 0 else max(held, 1)
            warn = not rep.capacity_warned
            rep.capacity_warned = True
        if warn:
            log.warning(
                "OpenEnv server %s accepts %d concurrent session(s) (its max_concurrent_envs) and this run wants more "
                "at once: the extra episodes wait and are played in later waves (slower). To play them all at once, "
                "raise it on the server (agilerl serve-env --max-concurrent-envs N, or "
                "create_app(..., max_concurrent_envs=N)) or add replicas to environment.env_url.",
                rep.url.display,
                rep.capacity,
            )

    # -- sessions ----------------------------------------------------------------------------------

    def _order(self) -> list[Replica]:
        """Replicas in round-robin order starting at the next one, those marked down last."""
        start = next(self._rr) % len(self.replicas)
        order = self.replicas[start:] + self.replicas[:start]
        now = time.monotonic()
        return [r for r in order if r.down_until <= now] + sorted(
            (r for r in order if r.down_until > now), key=lambda r: r.down_until
        )

    def _claim(self, rep: Replica) -> bool:
        """Whether this episode may use ``rep`` now (claiming the half-open probe if it is one)."""
        with self._lock:
            if not rep.available(time.monotonic()):
                return False
            if rep.failures > 0:
                rep.probing = True
            return True

    def _room(self, rep: Replica) -> tuple[Any | None, bool]:
        """``(idle session, may open another)`` on ``rep``."""
        while (session := SessionPool.take(rep.url.ws)) is not None:
            ws = getattr(session, "_ws", None)
            if ws is not None and getattr(getattr(ws, "state", None), "name", "OPEN") == "OPEN":
                session.reused = True  # see ReplicaSet.stale
                return session, True
            self.discard(rep, session)  # closed while idle (a server's idle-session reaper, say)
        held, _ = SessionPool.count(rep.url.ws)
        return None, rep.capacity is None or held < rep.capacity

    async def open_session(self, deadline: float) -> tuple[Replica, Any]:
        """A connected session on a live replica (reconnecting with backoff until ``deadline``).

        Raises :class:`AllFull` when every live replica is at capacity with this process's sessions.
        """
        while True:
            order = self._order()
            now = time.monotonic()
            full = 0
            for rep in order:
                if not rep.available(now):
                    continue
                session, room = self._room(rep)
                if session is None and not room:
                    full += 1
                    continue
                if not self._claim(rep):
                    if session is not None:
                        SessionPool.put(rep.url.ws, session)
                    continue
                if session is not None:
                    session.timeout = session._message_timeout = session._connect_timeout = self.timeout
                    return rep, session
                session = self.new_session(rep)
                try:
                    await session.connect()
                except (Unreachable, Lost, NotOpenEnv) as exc:
                    self.mark_down(rep, str(exc))
                    continue
                SessionPool.opened(rep.url.ws, session)
                return rep, session
            live = [r for r in self.replicas if r.down_until <= time.monotonic()]
            if full and full >= len(live):
                raise AllFull()
            now = time.monotonic()
            if now >= deadline:
                break
            # Every replica is backing off (or being probed): wait for the first to come due.
            due = min((r.down_until for r in self.replicas if r.down_until > now), default=now + 0.05)
            await asyncio.sleep(max(0.01, min(due, deadline) - now))
        details = "; ".join(f"{r.url.display}: {r.last_error or 'not tried'}" for r in self.replicas)
        raise OpenEnvUnavailableError(
            f"no OpenEnv replica answered within the reconnect budget ({details}). "
            "Check that the server(s) in environment.env_url are running and reachable; the last checkpoint is kept "
            "(resume with agilerl train --resume)."
        )

    @staticmethod
    def stale(session: Any) -> bool:
        """Whether a failed request was on a session reused from the pool (which the server may have
        closed while it sat idle: a reason to retry on a fresh one, not a sign the replica is down)."""
        return bool(getattr(session, "reused", False))

    def release(self, rep: Replica, session: Any) -> None:
        """An episode is done with ``session``: keep it open for the next one (cheaper than reconnecting)."""
        if rep.down_until <= time.monotonic():
            SessionPool.put(rep.url.ws, session)
        else:
            self.discard(rep, session)

    def discard(self, rep: Replica, session: Any) -> None:
        SessionPool.closed(rep.url.ws, session)
        self.loop.fire(session.disconnect())

    def capacity_message(self, data: dict[str, Any]) -> str:
        shown = ", ".join(
            f"{r.url.display} ({data.get('active_sessions', '?')}/{r.capacity or data.get('max_sessions', '?')} sessions)"
            for r in self.replicas
        )
        held = sum(SessionPool.count(r.url.ws)[0] for r in self.replicas)
        return (
            f"every OpenEnv replica refused a new session: CAPACITY_REACHED at {shown}, and this process holds {held} "
            "of them, so waiting for its own episodes cannot help: other clients hold the rest. Start the server with "
            "more sessions (agilerl serve-env ... --max-concurrent-envs N, or create_app(..., max_concurrent_envs=N)), "
            "add replicas to environment.env_url, or stop the other clients."
        )


def capacity_error(replicas: ReplicaSet, data: dict[str, Any]) -> OpenEnvCapacityError:
    return OpenEnvCapacityError(replicas.capacity_message(data))


__all__ = ["AllFull", "Replica", "ReplicaSet", "SessionPool", "capacity_error"]
