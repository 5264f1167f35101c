"""``agilerl validate`` on an ``env_url`` manifest (issue 27): each URL is checked for scheme, host,
port and set ``${VARIABLE}``s without contacting anything; then, unless ``validation.check_env:
false``, each server once (``GET /schema``, a 3 s timeout): unreachable servers and ``action_field``
/ ``observation_field`` / ``mcp_tool`` the live schema rules out are refused before any model loads.
Real servers on 127.0.0.1 (openenv-core's ``create_app`` and ``agilerl serve-env``'s)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest


def _manifest(model: Path, url: Any, **env: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "GRPO", "max_output_tokens": 4},
        "network": {"pretrained_model_name_or_path": str(model), "max_context_length": 64},
        "environment": {"env_type": "rollout", "env_url": url, "max_turns": 1, **env},
        "training": {"max_steps": 1, "progress": False},
    }


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"url": "integer", "action_field": "num"}, ("environment.action_field", "'num' is not a field", "number")),
        ({"url": "multi_field", "observation_field": "board"}, ("environment.observation_field", "'board'", "grid")),
        ({"url": "integer", "mcp_tool": "submit"}, ("environment.mcp_tool", "not an MCP tool environment")),
        ({"url": "mcp", "action_field": "word"}, ("environment.action_field", "is an MCP tool environment")),
    ],
)
def test_fields_the_live_schema_rules_out_are_refused(
    servers: dict[str, Any], tiny_model_dir: Path, write_manifest: Any, run_cli: Any, env: dict[str, Any],
    needles: tuple[str, ...],
) -> None:  # fmt: skip
    fields = dict(env)
    url = servers[fields.pop("url")].url
    code, out, err = run_cli("validate", write_manifest(_manifest(tiny_model_dir, url, **fields)))
    assert code == 1, out + err
    for needle in needles:
        assert needle in out + err, out + err
    assert "Traceback" not in out + err
    # Valid names pass, and the opt-out skips the server entirely.
    good = {"action_field": "number"} if "action_field" in fields and "integer" in env["url"] else {}
    if good:
        assert run_cli("validate", write_manifest(_manifest(tiny_model_dir, url, **good)))[0] == 0


def test_an_unreachable_server_is_refused_unless_check_env_is_false(
    tiny_model_dir: Path, write_manifest: Any, run_cli: Any
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    code, out, err = run_cli("validate", write_manifest(_manifest(tiny_model_dir, [url])))
    assert code == 1
    assert f"environment.env_url: the OpenEnv server at {url} is not reachable" in out + err
    assert "validation: {check_env: false}" in out + err
    manifest = {**_manifest(tiny_model_dir, url), "validation": {"check_env": False}}
    code, out, err = run_cli("validate", write_manifest(manifest))
    assert code == 0, out + err


def test_one_bad_replica_in_a_list_is_named_by_its_index(
    game_server: Any, tiny_model_dir: Path, write_manifest: Any, run_cli: Any
) -> None:
    urls = [game_server.url, f"http://127.0.0.1:{_closed_port()}"]
    code, out, err = run_cli("validate", write_manifest(_manifest(tiny_model_dir, urls)))
    assert code == 1 and "environment.env_url[1]: the OpenEnv server at" in out + err, out + err
    assert "env_url[0]" not in out + err
    assert run_cli("validate", write_manifest(_manifest(tiny_model_dir, urls[:1])))[0] == 0
