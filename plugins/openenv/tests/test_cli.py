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
        (["no_such_module_xyz:Game"], "cannot import 'no_such_module_xyz'"),
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
