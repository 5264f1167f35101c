"""Faults and bad input: clear errors, no hangs, truncation instead of a crash, no leaked credentials."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from typing import Any

import pytest

from agilerl_plugin_openenv.errors import (
    OpenEnvCapacityError,
    OpenEnvProtocolError,
    OpenEnvUnavailableError,
)
from agilerl_plugin_openenv.server import serve_in_thread

SECRETS = ("hunter2-pw", "tok-abcdef123", "trainer", "SECRETBAREQ", "SECRETKEY")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with_credentials(url: str) -> str:
    return url.replace("http://", "http://trainer:hunter2-pw@") + "/?token=tok-abcdef123"


def _assert_no_secrets(*texts: Any) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in str(text), f"credential {secret!r} leaked into: {text}"


def test_unreachable_url_is_a_clear_error_naming_it_without_credentials(build) -> None:  # type: ignore[no-untyped-def]
    port = _free_port()
    with pytest.raises(OpenEnvUnavailableError) as err:
        build(_with_credentials(f"http://127.0.0.1:{port}"), request_timeout_s=2)
    message = str(err.value)
    assert f"127.0.0.1:{port}" in message and "not reachable" in message and "serve-env" in message
    _assert_no_secrets(message)


def test_a_server_speaking_another_protocol_is_named(build) -> None:  # type: ignore[no-untyped-def]
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(OpenEnvProtocolError, match=r"does not speak the OpenEnv protocol.*/ws"):
            build(f"http://127.0.0.1:{httpd.server_address[1]}", request_timeout_s=2)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_websocket_server_that_is_not_openenv_is_named(build) -> None:  # type: ignore[no-untyped-def]
    from websockets.sync.server import serve

    def echo(ws: Any) -> None:
        for message in ws:
            ws.send(message)

    with serve(echo, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        with pytest.raises(OpenEnvProtocolError, match=r"does not speak the OpenEnv protocol.*'state'"):
            build(f"http://127.0.0.1:{port}", request_timeout_s=2)
        server.shutdown()


def test_rejected_actions_are_feedback_and_the_episode_goes_on(native, build) -> None:  # type: ignore[no-untyped-def]
    app = native.app(native.NumberEnvironment, native.NumberAction, native.NumberObservation)
    with serve_in_thread(app) as served:
        with pytest.raises(OpenEnvProtocolError, match=r"'text' is not a field of the action.*number"):
            build(served.url, action_field="text")
        make_env, _ = build(served.url, observation_field="prompt")
        env = make_env()
        env.reset()
        text, reward, terminated, truncated, info = env.step("5000")  # rejected by the server (VALIDATION_ERROR)
        assert text.startswith("Invalid action") and "number" in info["action_error"]
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert env.step("7")[1:3] == (1.0, True)
        # An env reporting a refused action in its own observation field (action_error_field): shown too.
        make_env, _ = build(served.url, observation_field="prompt", action_error_field="error")
        env = make_env()
        env.reset()
        text, reward, terminated, _, info = env.step("-3")
        assert info["action_error"] == "negative numbers are not allowed" and "negative numbers" in text
        assert (reward, terminated) == (0.0, False) and info["metrics"]["invalid_actions"] == 1
        assert env.step("7")[1:3] == (1.0, True)


def test_a_full_server_queues_this_runs_episodes_and_names_other_clients(game, build, caplog) -> None:  # type: ignore[no-untyped-def]
    from agilerl_plugin_llm.envs import EnvAtCapacity
    from agilerl_plugin_openenv._openenv import generic_client_cls

    caplog.set_level(logging.WARNING, logger="agilerl_plugin_openenv")
    with serve_in_thread(game, max_concurrent_envs=2) as served:
        make_env, _ = build(served.url, max_turns=1)
        first, second, third = make_env(), make_env(), make_env()
        first.reset()
        second.reset()
        # Both sessions are this run's: the third episode waits (the rollout plays it in a later wave).
        with pytest.raises(EnvAtCapacity):
            third.reset()
        assert "accepts 2 concurrent session(s)" in caplog.text and "--max-concurrent-envs N" in caplog.text
        assert caplog.text.count("accepts 2 concurrent") == 1
        first.step("one")  # the episode ends: its session serves the waiting one
        assert third.reset()[0] == "Say one."
        for env in (second, third):
            env.close()
        # Sessions held by another client: a clear error at build time, not a hang.
        others = [generic_client_cls()(base_url=served.url).sync() for _ in range(2)]
        from agilerl_plugin_openenv.pool import SessionPool

        SessionPool.close_all()  # this process's idle sessions (what runs at exit)
        try:
            for client in others:
                client.connect()
                client.reset()
            with pytest.raises(OpenEnvCapacityError) as err:
                build(served.url, max_turns=1)
            assert "CAPACITY_REACHED" in str(err.value) and "--max-concurrent-envs" in str(err.value)
        finally:
            for client in others:
                client.close()


def test_server_dying_mid_episode_truncates_then_reports_unavailable(game, build, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="agilerl_plugin_openenv")
    with serve_in_thread(game) as served:
        url = _with_credentials(served.url)
        make_env, _ = build(url, request_timeout_s=1)
        env = make_env()
        env.reset()
        served.stop()
        _, reward, terminated, truncated, info = env.step("one")
        assert (reward, terminated, truncated) == (0.0, False, True) and "openenv_error" in info
        with pytest.raises(OpenEnvUnavailableError) as err:
            env.reset()
    assert served.url.split("//")[1] in str(err.value) and "checkpoint" in str(err.value)
    assert "truncated" in caplog.text
    _assert_no_secrets(err.value, caplog.text, info)


def test_replica_hanging_then_dying_the_run_continues_on_the_survivor(server_process, game, build, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="agilerl_plugin_openenv")
    victim = server_process("--max-concurrent-envs", "8")
    with serve_in_thread(game, max_concurrent_envs=8) as survivor:
        victim_url = _with_credentials(victim.url)
        make_env, _ = build([victim_url, survivor.url], request_timeout_s=1)
        victim_shown = f"http://***@{victim.url.split('//')[1]}?token=***"
        envs = [make_env() for _ in range(4)]
        placed = [env.reset()[1]["env_url"] for env in envs]
        assert sorted(placed) == sorted([victim_shown, survivor.url] * 2)  # round-robin

        victim.stop_process()  # hung: connection open, no answers
        results = [env.step("one") for env in envs]
        for where, (_, reward, terminated, truncated, info) in zip(placed, results, strict=True):
            if where == victim_shown:
                assert truncated and not terminated and "request_timeout_s" in info["openenv_error"]
            else:
                assert not truncated and reward > 0
        # New episodes all go to the survivor while the victim backs off.
        assert {env.reset()[1]["env_url"] for env in envs} == {survivor.url}

        victim.kill()  # and now dead
        for _ in range(3):
            for env in envs:
                _, info = env.reset()
                assert info["env_url"] == survivor.url
                assert env.step("one")[1] == pytest.approx(1.0)
    assert f"OpenEnv replica {victim_shown} failed" in caplog.text and "truncated" in caplog.text
    _assert_no_secrets(caplog.text, results)


def test_a_restarted_server_is_reconnected_after_backoff(game, build, caplog) -> None:  # type: ignore[no-untyped-def]
    from agilerl_plugin_openenv.server import ServedEnv, make_app

    caplog.set_level(logging.INFO, logger="agilerl_plugin_openenv")
    first = ServedEnv(make_app(game)).start()
    make_env, _ = build(first.url, request_timeout_s=2)
    env = make_env()
    env.reset()
    first.stop()
    assert env.step("one")[3] is True  # truncated: the server went away mid-episode
    second = ServedEnv(make_app(game), port=first.port).start()  # back on the same address
    try:
        obs, info = env.reset()  # waits out the backoff, then reconnects
        assert obs == "Say one." and info["env_url"] == first.url
        assert env.step("one")[1] == pytest.approx(1.0)
    finally:
        second.stop()
    assert f"OpenEnv replica {first.url} answers again; reconnected" in caplog.text


def test_half_open_probes_do_not_reset_backoff_and_warnings_are_rate_limited(game, caplog) -> None:  # type: ignore[no-untyped-def]
    """A replica that accepts connections and then drops every request (what a crashing server behind
    a load balancer looks like): a successful connect must not count as recovery."""
    import time

    from websockets.sync.server import serve

    from agilerl_plugin_openenv.client import OpenEnvSource, OpenEnvTextEnv, SourceConfig
    from agilerl_plugin_openenv.urls import parse_replica

    def accept_then_drop(ws: Any) -> None:
        ws.recv()
        ws.close()

    caplog.set_level(logging.DEBUG, logger="agilerl_plugin_openenv")
    with serve(accept_then_drop, "127.0.0.1", 0) as broken, serve_in_thread(game) as good:
        threading.Thread(target=broken.serve_forever, daemon=True).start()
        bad_url = f"http://127.0.0.1:{broken.socket.getsockname()[1]}"
        source = OpenEnvSource(
            SourceConfig(replicas=[parse_replica(bad_url), parse_replica(good.url)], request_timeout_s=1)
        )
        bad = source.replicas[0]
        failures = []
        start = time.monotonic()
        episodes = 0
        while time.monotonic() - start < 2.5:  # bounded: ~2.5 s of episodes
            env = OpenEnvTextEnv(source)
            assert env.reset()[1]["env_url"] == good.url  # every episode lands on the good replica
            assert env.step("one")[1] == pytest.approx(1.0)
            failures.append(bad.failures)
            episodes += 1
        broken.shutdown()
    assert failures == sorted(failures) and failures[-1] >= 3, failures  # backoff kept growing: 0.25, 0.5, 1 s
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and bad_url in r.getMessage()]
    assert 1 <= len(warnings) <= failures[-1], [r.getMessage() for r in warnings]  # <= one per backoff period
    assert all("failed:" in r.getMessage() and "the connection closed" in r.getMessage() for r in warnings)
    assert episodes > 10


def test_credentials_are_read_from_the_environment_and_never_shown(native, game, build, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    from agilerl_plugin_openenv.errors import OpenEnvError
    from agilerl_plugin_openenv.server import ServedEnv, make_app

    caplog.set_level(logging.DEBUG, logger="agilerl_plugin_openenv")
    token = "tok-abcdef123"
    monkeypatch.setenv("W19_AUTH", f"Bearer {token}")
    monkeypatch.setenv("W19_TOKEN", token)
    served = ServedEnv(native.RequireAuth(make_app(game), token)).start()
    try:
        with pytest.raises(OpenEnvProtocolError, match="HTTP 403") as denied:
            build(served.url, max_turns=1, request_timeout_s=2)
        # A header read from an environment variable ...
        make_env, _ = build(served.url, max_turns=1, env_url_headers_from_env={"Authorization": "W19_AUTH"})
        env = make_env()
        assert env.reset()[0] == "Say one."
        # ... or ${VAR} in the URL, expanded when the run starts; the manifest only holds the name.
        make_env, _ = build(served.url + "/?token=${W19_TOKEN}", max_turns=1, request_timeout_s=1)
        other = make_env()
        _, info = other.reset()
        assert info["env_url"] == served.url + "?token=***"
        with pytest.raises(OpenEnvError, match="W19_MISSING is not set"):
            build(served.url, max_turns=1, env_url_headers_from_env={"Authorization": "W19_MISSING"})
    finally:
        served.stop()
    _, _, _, truncated, step_info = other.step("one")  # the server is gone: the error names it, not the token
    assert truncated
    _assert_no_secrets(denied.value, caplog.text, info, step_info)


def test_validate_refuses_written_out_credentials_and_missing_max_turns_without_showing_them(  # type: ignore[no-untyped-def]
    write_manifest, run_cli, tiny_model_dir, monkeypatch
) -> None:
    def manifest(env: dict[str, Any]) -> Any:
        return write_manifest({
            "algorithm": {"name": "GRPO"},
            "network": {"pretrained_model_name_or_path": str(tiny_model_dir)},
            "environment": {"env_type": "rollout", **env},
            "training": {"max_steps": 1},
            "validation": {"check_env": False},  # no server at port 9: only the manifest is checked
        })  # fmt: skip

    code, out, err = run_cli("validate", manifest({"env_url": _with_credentials("http://127.0.0.1:9")}))
    assert code == 1 and "environment.env_url" in out + err and "${VARIABLE}" in out + err
    assert "environment.max_turns" in out + err and "required with env_url" in out + err
    _assert_no_secrets(out, err)
    # A token as the user name, secrets under keys no pattern knows: refused by name, never shown,
    # by validate and by validate --json.
    # All query text counts: a bare query (?SECRETBAREQ) and a key with an empty value (SECRETKEY=)
    # are named by their position.
    named = {
        "http://tok-abcdef123@127.0.0.1:9": "the user name",
        "http://127.0.0.1:9/?pw=hunter2-pw&code=tok-abcdef123": "the query parameter 'code'",
        "http://127.0.0.1:9/?SECRETBAREQ": "query part 1 (text with no '=')",
        "http://127.0.0.1:9/?mode=${W19_MODE}&SECRETKEY=": "query part 2 (a key with an empty value)",
    }
    monkeypatch.setenv("W19_MODE", "fast")
    for url, part in named.items():
        for json_flag in ((), ("--json",)):
            code, out, err = run_cli("validate", manifest({"env_url": url, "max_turns": 1}), *json_flag)
            assert code == 1 and "${VARIABLE}" in out + err, out + err
            assert part in out + err, out + err
            _assert_no_secrets(out, err)
    ok = {"env_url": "http://${W19_USER}:${W19_PW}@127.0.0.1:9/?token=${W19_TOKEN}", "max_turns": 1}
    code, out, err = run_cli("validate", manifest(ok))
    assert code == 1 and "uses ${W19_PW}, but the environment variable W19_PW is not set" in out + err
    monkeypatch.setenv("W19_USER", "trainer-from-env")
    monkeypatch.setenv("W19_PW", "pw-from-env")
    monkeypatch.setenv("W19_TOKEN", "token-from-env")
    code, out, err = run_cli("validate", manifest(ok))
    assert code == 0, out + err


def test_clients_close_their_sessions_at_exit(native, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A training process that ends without closing its envs still says goodbye to the server."""
    import subprocess
    import sys
    import time

    frames: list[str] = []

    class RecordCloses:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            async def recorded() -> Any:
                message = await receive()
                if message.get("type") == "websocket.receive" and '"close"' in (message.get("text") or ""):
                    frames.append("close")
                if message.get("type") == "websocket.disconnect":
                    frames.append("disconnect")
                return message

            await self.app(scope, recorded, send)

    from agilerl_plugin_openenv.server import ServedEnv

    app = native.app(native.GuessEnvironment, native.GuessAction, native.GuessObservation)
    served = ServedEnv(RecordCloses(app)).start()
    try:
        script = tmp_path / "client.py"
        script.write_text(
            "from agilerl_plugin_llm.specs import LLMEnvSpec\n"
            "from agilerl_plugin_openenv.client import build_env_url_source\n"
            f"make_env, _ = build_env_url_source(LLMEnvSpec(env_type='rollout', env_url={served.url!r}, max_turns=1))\n"
            "envs = [make_env() for _ in range(3)]\n"
            "for env in envs:\n    env.reset()\n"
            "envs[0].step('cat')\n"  # one episode ends (its session goes idle), two stay open
            "print('done', flush=True)\n",
            encoding="utf-8",
        )
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and "done" in out.stdout, out.stderr
        for _ in range(200):  # bounded wait for the server to see the last frames
            if frames.count("close") >= 4:
                break
            time.sleep(0.01)
    finally:
        served.stop()
    # The probe's session and all three of the envs' sessions ended with a close frame.
    assert frames.count("close") == 4, frames
    assert "Traceback" not in out.stderr, out.stderr


def test_a_pooled_session_the_server_closed_is_replaced_without_blaming_the_replica(game, build, caplog) -> None:  # type: ignore[no-untyped-def]
    """Servers may close idle sessions (openenv-core's idle-session reaper): reusing one must not mark
    a healthy replica down."""
    import time

    from agilerl_plugin_openenv.pool import SessionPool

    caplog.set_level(logging.WARNING, logger="agilerl_plugin_openenv")
    with serve_in_thread(game) as served:
        make_env, _ = build(served.url, max_turns=1)
        env = make_env()
        env.reset()
        env.step("one")  # the episode ends: its session waits in the pool
        ws_url = served.url.replace("http://", "ws://") + "/ws"
        idle = SessionPool.idle[ws_url][-1]
        env._source.loop.loop.call_soon_threadsafe(idle._ws.transport.abort)  # the server side went away
        for _ in range(200):  # bounded: until the client has noticed
            if idle._ws.state.name != "OPEN":
                break
            time.sleep(0.01)
        assert env.reset()[0] == "Say one."
        assert env._source.replicas[0].failures == 0 and "failed" not in caplog.text
