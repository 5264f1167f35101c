"""Fixtures: real OpenEnv servers on 127.0.0.1, free ports, started and stopped by the tests."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
GAME = f"{REPO / 'examples' / 'openenv' / 'word_game.py'}:SayWordGame"
_HERE = Path(__file__).resolve().parent


def env_spec(url: Any, **fields: Any) -> Any:
    """A validated rollout ``LLMEnvSpec`` with ``env_url`` (the LLM plugin's real spec class)."""
    from agilerl_plugin_llm.specs import LLMEnvSpec

    return LLMEnvSpec(env_type="rollout", env_url=url, **fields)


class ServerProcess:
    """``agilerl serve-env`` in a child process (so a test can SIGSTOP or SIGKILL it)."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "AGILERL_LOAD_PLUGINS": "openenv", "PYTHONUNBUFFERED": "1"}
        code = "import sys; from agilerl.cli import main; sys.exit(main())"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, "serve-env", GAME, "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=REPO,
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(lines,), daemon=True).start()
        self.output: list[str] = []
        while True:  # bounded by the process: it prints the line or exits (stdout closes)
            line = lines.get(timeout=300)
            self.output.append(line)
            match = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            if match:
                self.url = match.group(1)
                break
            if line == "":
                raise RuntimeError("serve-env exited:\n" + "".join(self.output))

    def _pump(self, lines: queue.Queue[str]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            lines.put(line)
        lines.put("")

    def stop_process(self) -> None:  # SIGSTOP: the server hangs (TCP stays open, nothing answers)
        self.proc.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def server_process() -> Iterator[Any]:
    started: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        proc = ServerProcess(*args)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture(scope="module")
def game_server() -> Iterator[Any]:
    """The word game served in a background thread of this process (8 sessions)."""
    from agilerl_plugin_openenv.server import serve_in_thread

    with serve_in_thread(GAME, max_concurrent_envs=8, env_config={"turns": 2}) as served:
        yield served


@pytest.fixture(scope="session")
def native() -> Any:
    """``native_envs.py`` (servers written directly against openenv-core), imported by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("openenv_native_test_envs", _HERE / "native_envs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def servers(native: Any) -> Iterator[dict[str, Any]]:
    """The three servers written with openenv-core's ``create_app`` (MCP tools, an integer action,
    a multi-field observation), each on its own ephemeral port on 127.0.0.1, 8 sessions each."""
    from contextlib import ExitStack

    from agilerl_plugin_openenv.server import serve_in_thread

    with ExitStack() as stack:
        yield {name: stack.enter_context(serve_in_thread(native.server_app(name, 8))) for name in native.SERVERS}


@pytest.fixture(scope="session")
def game() -> str:
    return GAME


@pytest.fixture
def build() -> Any:
    """``build(url, **fields) -> (make_env, max_turns)`` through the LLM plugin's source table,
    exactly as a run resolves ``environment.env_url``."""

    def _build(url: Any, **fields: Any) -> tuple[Any, Any]:
        from agilerl_plugin_llm.rollout.sources import build_source

        make_env, max_turns, field = build_source(env_spec(url, **fields), seed=0)
        assert field == "env_url"
        return make_env, max_turns

    return _build
