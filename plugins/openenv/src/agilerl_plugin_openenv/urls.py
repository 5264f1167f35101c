"""Replica URLs: normalising them for OpenEnv's ``/ws`` route and keeping credentials out of logs.

A URL may carry credentials (``https://user:token@host`` or ``?token=...``). They are used to
connect and never shown: :func:`redact` is what every log line and error message prints, and
:func:`scrub` removes the secret parts from any text (an exception message from a library, say)
before it is shown.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

_WS_SCHEMES = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}


@dataclass(frozen=True)
class ReplicaURL:
    """One replica's address in the three forms we need."""

    raw: str
    """As the manifest gave it (may hold credentials: never log this)."""
    ws: str
    """The WebSocket session URL (``.../ws``), credentials kept (for connecting)."""
    http: str
    """The HTTP base URL (for ``/schema`` and ``/health``), credentials kept."""
    display: str
    """Safe to print: credentials and query values replaced by ``***``."""
    secrets: tuple[str, ...] = field(default=())
    """The secret substrings, for :func:`scrub`."""


def parse_replica(url: str) -> ReplicaURL:
    """Split ``url`` into the connect/display forms. Raises ``ValueError`` for a malformed URL."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in _WS_SCHEMES:
        raise ValueError(f"unsupported scheme {parts.scheme!r} (use http, https, ws or wss)")
    if not parts.hostname:
        raise ValueError("no host name")
    try:
        parts.port  # noqa: B018  (raises ValueError for a non-numeric port)
    except ValueError as exc:
        raise ValueError(f"bad port: {exc}") from None
    secrets: list[str] = []
    # Passwords always count as secret; user names and query values only when long enough that
    # scrubbing them cannot mangle unrelated text (a ``?v=1`` must not turn every "1" into ***).
    if parts.username and len(parts.username) >= 3:
        secrets += [parts.username, unquote(parts.username)]
    if parts.password:
        secrets += [parts.password, unquote(parts.password)]
    query = parse_qsl(parts.query, keep_blank_values=True)
    secrets += [v for _, v in query if len(v) >= 4]
    path = parts.path.rstrip("/")
    if path.endswith("/ws"):
        path = path[: -len("/ws")]
    http_scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    ws = urlunsplit((_WS_SCHEMES[scheme], parts.netloc, path + "/ws", parts.query, ""))
    http = urlunsplit((http_scheme, parts.netloc, path, parts.query, ""))
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    userinfo = "***@" if (parts.username or parts.password) else ""
    shown_query = urlencode([(k, "***") for k, _ in query], safe="*")
    display = urlunsplit((http_scheme, userinfo + host, path, shown_query, ""))
    return ReplicaURL(
        raw=url,
        ws=ws,
        http=http,
        display=display,
        secrets=tuple(sorted({s for s in secrets if s}, key=len, reverse=True)),
    )


_SCHEME_WITHOUT_SLASHES = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/?(?!/)")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot address an OpenEnv server (scheme, host, port), or None. ``${VARIABLE}``
    parts must be expanded first. The one URL check: validation and the run both use it."""
    text = url.strip()
    if not text:
        return "an empty URL"
    if any(ch.isspace() for ch in text):
        return "a URL cannot contain spaces"
    if "://" not in text and (
        "//" in text or (_SCHEME_WITHOUT_SLASHES.match(text) and not re.match(r"^[^:/]+:\d+(/|$)", text))
    ):
        return "malformed: a scheme needs '://'"
    try:
        rep = parse_replica(text)
        port = urlsplit(rep.http).port
    except ValueError as exc:
        return str(exc)
    if port == 0:
        return "port 0 is not a server's port (use 1-65535)"
    return None


def http_get_json(rep: ReplicaURL, path: str, headers: dict[str, str], timeout: float) -> Any:
    """GET ``path`` from a replica as JSON; credentials go as headers, never in the URL printed.
    Raises ``urllib.error.URLError``/``OSError``/``ValueError``."""
    parts = urlsplit(rep.http)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    url = urlunsplit((parts.scheme, netloc, parts.path + path, parts.query, ""))
    req = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    if parts.username is not None:
        token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    proxies = urllib.request.ProxyHandler({}) if parts.hostname in LOOPBACK else urllib.request.ProxyHandler()
    with urllib.request.build_opener(proxies).open(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode("utf-8"))


def shown(url: str) -> str:
    """``url`` as an error message may show it: redacted, or as written when it holds no secret part."""
    if "@" not in url and "?" not in url:
        return repr(url)
    display = redact(url)
    return "<a URL with credentials>" if display == "<unparseable URL>" else repr(display)


def redact(url: str) -> str:
    """``url`` with credentials and query values replaced by ``***`` (best effort for bad URLs)."""
    try:
        return parse_replica(url).display
    except ValueError:
        return "<unparseable URL>"


def scrub(text: str, replicas: ReplicaURL | list[ReplicaURL] | tuple[ReplicaURL, ...]) -> str:
    """Remove every replica's secret substrings (and raw URLs) from ``text``."""
    items = [replicas] if isinstance(replicas, ReplicaURL) else list(replicas)
    for rep in items:
        for raw in (rep.raw, rep.ws, rep.http):
            text = text.replace(raw, rep.display)
        for secret in rep.secrets:
            text = text.replace(secret, "***")
    return text
