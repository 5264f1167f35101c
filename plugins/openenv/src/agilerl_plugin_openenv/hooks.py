"""Hook implementations of agilerl-plugin-openenv.

Cheap to import on purpose (agilerl loads every plugin's hooks for ``agilerl validate``): openenv-core,
fastapi, uvicorn and websockets are imported only when a run uses ``env_url`` or ``serve-env`` runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from agilerl.hookspecs import hookimpl
from agilerl_plugin_openenv.errors import ServeEnvError


@hookimpl(optionalhook=True)  # the LLM plugin defines this hook; without it, nothing to register
def agilerl_llm_register_rollout_sources(register: Any) -> None:
    register(
        "env_url",
        "agilerl_plugin_openenv.client:build_env_url_source",
        check="agilerl_plugin_openenv.checks:env_url_problems",
    )


@hookimpl
def agilerl_register_commands(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "serve-env",
        help="serve a text env as an OpenEnv server (WebSocket /ws)",
        description=(
            "Serve a text env (a class or factory with reset()/step(text)) as an OpenEnv server, one env "
            "per WebSocket session. Train against it with environment.env_url: http://HOST:PORT."
        ),
    )
    p.add_argument("entrypoint", metavar="ENTRYPOINT", help="'package.module:Class' or 'path/to/file.py:Class'")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one and prints it)")
    p.add_argument("--max-concurrent-envs", type=int, default=64, metavar="N", help="sessions at once (default 64)")
    p.add_argument("--env-config", metavar="JSON", help="keyword arguments for the entrypoint, as a JSON object")
    p.add_argument(
        "--execution",
        choices=["auto", "inline", "thread"],
        default="auto",
        help="where env calls run: inline on the server's event loop (no thread hops: fastest for cheap "
        "steps, but a slow step stalls other sessions), a worker thread per session, or auto (inline "
        "while steps stay under 0.5 ms on average, then a thread; default)",
    )
    p.add_argument(
        "--max-message-bytes", type=int, default=1024 * 1024, metavar="N",
        help="largest request body or WebSocket frame taken (default 1 MiB); a larger frame is answered with an "
        "error, one over 4x closes the connection",
    )  # fmt: skip
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(handler=_serve_env)


def _serve_env(args: argparse.Namespace) -> int:
    import json

    env_config: dict[str, Any] | None = None
    if args.env_config:
        try:
            env_config = json.loads(args.env_config)
        except json.JSONDecodeError as exc:
            raise ServeEnvError(f"--env-config is not valid JSON: {exc}") from None
        if not isinstance(env_config, dict):
            raise ServeEnvError("--env-config must be a JSON object of keyword arguments")
    if args.max_concurrent_envs < 1:
        raise ServeEnvError("--max-concurrent-envs must be at least 1")
    if args.max_message_bytes < 1024:
        raise ServeEnvError(f"--max-message-bytes must be at least 1024, got {args.max_message_bytes}")
    if not 0 <= args.port <= 65535:
        raise ServeEnvError(f"--port must be between 0 and 65535, got {args.port}")
    from agilerl_plugin_openenv.server import serve  # deferred: openenv-core (and gradio) load at its import

    serve(
        args.entrypoint,
        host=args.host,
        port=args.port,
        max_concurrent_envs=args.max_concurrent_envs,
        env_config=env_config,
        log_level=args.log_level,
        execution=args.execution,
        announce=lambda line: print(line, flush=True),
        max_message_bytes=args.max_message_bytes,
    )
    return 0
