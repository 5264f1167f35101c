"""``agilerl serve-env`` under hostile or confused clients: size limits, frames that are not protocol
messages, ``step`` before ``reset``. Each is answered with a clear error; the session goes on."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from agilerl_plugin_openenv.server import ServedEnv, make_app

LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def served(game: str) -> Iterator[ServedEnv]:
    """The word game behind a server with a 64 KiB message limit."""
    server = ServedEnv(make_app(game, max_concurrent_envs=4, env_config={"turns": 2}), max_message_bytes=LIMIT)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _ws(served: ServedEnv) -> Any:
    from websockets.sync.client import connect

    return connect(served.url.replace("http://", "ws://") + "/ws", max_size=None, open_timeout=10)


def _ask(ws: Any, frame: Any) -> dict[str, Any]:
    ws.send(frame)
    reply: dict[str, Any] = json.loads(ws.recv(timeout=10))
    return reply


def test_bad_frames_are_protocol_errors_and_the_session_goes_on(served: ServedEnv) -> None:
    with _ws(served) as ws:
        assert _ask(ws, json.dumps({"type": "reset", "data": {}}))["type"] == "observation"
        binary = _ask(ws, b"\x00\x01binary")
        assert binary["type"] == "error" and "binary frames are not part of the protocol" in binary["data"]["message"]
        listed = _ask(ws, json.dumps([{"type": "step"}]))
        assert listed["type"] == "error" and "got a JSON list" in listed["data"]["message"]
        number = _ask(ws, "5")
        assert number["type"] == "error" and "got a JSON int" in number["data"]["message"]
        big = _ask(ws, json.dumps({"type": "step", "data": {"text": "x" * (2 * LIMIT)}}))
        assert big["type"] == "error" and f"limit of {LIMIT} bytes" in big["data"]["message"]
        # the same session, its episode intact
        step = _ask(ws, json.dumps({"type": "step", "data": {"text": "one"}}))
        assert step["type"] == "observation", step


def test_a_frame_far_over_the_limit_closes_the_connection(served: ServedEnv) -> None:
    from websockets.exceptions import ConnectionClosed

    with _ws(served) as ws:
        ws.send(json.dumps({"type": "step", "data": {"text": "x" * (5 * LIMIT)}}))
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=10)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1009  # message too big


def test_step_before_reset_is_an_error(served: ServedEnv) -> None:
    with _ws(served) as ws:
        early = _ask(ws, json.dumps({"type": "step", "data": {"text": "one"}}))
        assert early["type"] == "error" and "step before reset" in early["data"]["message"], early
        assert _ask(ws, json.dumps({"type": "reset", "data": {}}))["type"] == "observation"
        assert _ask(ws, json.dumps({"type": "step", "data": {"text": "one"}}))["type"] == "observation"


def test_a_request_body_over_the_limit_is_refused(served: ServedEnv) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        conn.request(
            "POST", "/reset", body=b"{" + b" " * (2 * LIMIT) + b"}", headers={"Content-Type": "application/json"}
        )
        reply = conn.getresponse()
        assert reply.status == 413 and f"limit of {LIMIT} bytes" in reply.read().decode()

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams in
            for _ in range(4):
                yield b" " * LIMIT

        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        conn.request("POST", "/reset", body=chunks(), headers={"Content-Type": "application/json"},
                     encode_chunked=True)  # fmt: skip
        reply = conn.getresponse()
        assert reply.status == 413
        reply.read()
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200  # the server is fine
    finally:
        conn.close()


def _post(served: ServedEnv, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        status, text = reply.status, reply.read().decode()
    finally:
        conn.close()
    assert reply.getheader("content-type", "").startswith("application/json"), text
    return status, json.loads(text)


def test_step_over_http_is_an_error_not_a_server_fault(
    served: ServedEnv, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # HTTP requests are stateless (each gets a fresh env): a step there has no episode to step.
    status, reply = _post(served, "/step", json.dumps({"action": {"text": "one"}}).encode())
    assert status == 409, reply
    assert "step before reset" in reply["detail"] and "/ws" in reply["detail"], reply
    # reset over HTTP still answers (one fresh episode per request), and the server is fine
    status, reply = _post(served, "/reset", b"{}")
    assert status == 200 and "observation" in reply, reply
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err + caplog.text


@pytest.mark.parametrize("path", ["/reset", "/step"])
@pytest.mark.parametrize(("body", "kind"), [(b"[1, 2]", "list"), (b"5", "int"), (b'"reset"', "str")])
def test_a_body_that_is_not_a_json_object_is_a_protocol_error(
    served: ServedEnv, path: str, body: bytes, kind: str
) -> None:
    status, reply = _post(served, path, body)
    assert status == 400, reply
    assert "a request body is a JSON object" in reply["detail"] and f"got a JSON {kind}" in reply["detail"], reply
