"""``agilerl serve-env``: registered by the plugin, bad input gets a one-line error (no traceback)."""

from __future__ import annotations

import pytest


def test_serve_env_is_an_agilerl_command(run_cli) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exit_info:
        run_cli("serve-env", "--help")
    assert exit_info.value.code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no_such_module_xyz:Game"], "cannot import module 'no_such_module_xyz'"),
        (["examples/openenv/word_game.py:NoSuchGame"], "has no attribute 'NoSuchGame'"),
        (["examples/openenv/word_game.py"], "is not of the form"),
        (["examples/openenv/word_game.py:SayWordGame", "--env-config", "{turns: 2"], "--env-config is not valid JSON"),
        (["examples/openenv/word_game.py:SayWordGame", "--env-config", '{"turns": 0}'], "creating the text env"),
        (["examples/openenv/word_game.py:SayWordGame", "--max-concurrent-envs", "0"], "at least 1"),
    ],
)
def test_bad_serve_env_input_is_a_clear_error(run_cli, args, message, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    code, _out, err = run_cli("serve-env", *args, "--port", "0")
    assert code == 1 and message in err and "Traceback" not in err, err


def test_serve_env_binds_loopback_by_default_and_warns_for_a_public_address() -> None:
    from agilerl_plugin_openenv.server import is_loopback, startup_lines

    first, *rest = startup_lines("game.py:Game", "127.0.0.1", 8000, 8)
    assert "http://127.0.0.1:8000" in first and "8 sessions max" in first and "--max-concurrent-envs" in first
    assert rest == [] and startup_lines("g:G", "::1", 1, 1)[1:] == [] and is_loopback("localhost")
    for host in ("0.0.0.0", "192.168.1.5", "env.example.com"):
        lines = startup_lines("g:G", host, 1, 1)
        assert len(lines) == 2 and lines[1].startswith(f"warning: listening on {host}, reachable from other machines")
    import argparse

    from agilerl_plugin_openenv.hooks import agilerl_register_commands

    parser = argparse.ArgumentParser()
    agilerl_register_commands(parser.add_subparsers())
    assert parser.parse_args(["serve-env", "x:Y"]).host == "127.0.0.1"


def test_serve_env_sets_episode_ids_a_reset_reward_and_names_the_env(game) -> None:  # type: ignore[no-untyped-def]
    import json
    import urllib.request

    from agilerl_plugin_openenv._openenv import generic_client_cls
    from agilerl_plugin_openenv.server import serve_in_thread

    with serve_in_thread(game, max_concurrent_envs=3) as served:
        with generic_client_cls()(base_url=served.url).sync() as client:
            result = client.reset()
            assert result.reward == 0.0 and result.done is False  # OpenEnv's env template: reset reward 0
            first = client.state()["episode_id"]
            client.reset()
            second = client.state()["episode_id"]
            assert first and second and first != second  # a fresh id per episode when the client sends none
            client.reset(episode_id="mine-1")
            assert client.state()["episode_id"] == "mine-1"
        with urllib.request.urlopen(served.url + "/metadata", timeout=30) as resp:
            meta = json.loads(resp.read())
    assert meta["name"] == "SayWordGame"
    assert "at most 3 concurrent sessions" in meta["description"] and "--max-concurrent-envs" in meta["description"]
