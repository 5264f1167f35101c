"""What the envs of one ``env_url`` share: the replicas, and what the server's schema says.

:meth:`OpenEnvSource.probe` checks every replica once (reachable, speaks OpenEnv, not full with other
clients' sessions), then reads the first one's ``/schema``, ``/metadata`` and (MCP tool envs)
``list_tools`` into the :class:`~agilerl_plugin_openenv.actions.ActionFormat` and the
:class:`~agilerl_plugin_openenv.prompts.PromptRenderer` every env of the source uses.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import time
import urllib.error
from typing import Any

from agilerl_plugin_openenv.actions import ActionFormat, Tool, is_mcp_action, params_of
from agilerl_plugin_openenv.config import SourceConfig
from agilerl_plugin_openenv.errors import OpenEnvProtocolError, OpenEnvUnavailableError
from agilerl_plugin_openenv.pool import Replica, ReplicaSet, SessionPool, capacity_error
from agilerl_plugin_openenv.prompts import PromptRenderer
from agilerl_plugin_openenv.session import ErrorFrame, Lost, NotOpenEnv, Unreachable
from agilerl_plugin_openenv.urls import ReplicaURL, http_get_json

log = logging.getLogger("agilerl_plugin_openenv")

_EXIT_HOOKED = threading.Event()


class OpenEnvSource:
    """Everything the envs of one ``env_url`` share: replicas, settings, the action format, prompts."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.pool = ReplicaSet(config.replicas, config.request_timeout_s, config.headers)
        self.loop = self.pool.loop
        n = config.max_concurrent_resets
        self._reset_slots = asyncio.Semaphore(n) if n else None
        self.action_format = ActionFormat.for_fields({}, config.action_field)
        self.prompts = PromptRenderer(self.action_format, config.prompt_template, config.observation_field)
        self.env_name: str | None = None
        if not _EXIT_HOOKED.is_set():
            _EXIT_HOOKED.set()
            atexit.register(SessionPool.close_all)  # servers see sessions closed, not dropped

    @property
    def timeout(self) -> float:
        return self.config.request_timeout_s

    @property
    def replicas(self) -> list[Replica]:
        return self.pool.replicas

    def scrub(self, text: str) -> str:
        return self.pool.scrub(text)

    def budget(self) -> float:
        """Seconds a reset may take: one request timeout per replica (a hung one costs a full
        timeout to notice) plus one, plus the backoff waits in between."""
        return self.timeout * (len(self.replicas) + 1) + 1.0

    def outer_limit(self) -> float:
        """Seconds after which a reset or step is given up for good: its budget, plus one last
        connection attempt that may start just before the deadline. Only a wedged loop reaches it."""
        return self.budget() + self.timeout + 5.0

    # -- probing at build time -----------------------------------------------------------------------

    def _http_json(self, rep: ReplicaURL, path: str) -> Any:
        """GET ``path`` from a replica (credentials sent as headers, never in the URL printed)."""
        return http_get_json(rep, path, self.config.headers, self.timeout)

    async def _check_replica(self, rep: Replica) -> None:
        session = self.pool.new_session(rep)
        display = rep.url.display
        try:
            await session.connect()
            # A session costs the server one env; "state" is the cheapest frame that proves the
            # endpoint is OpenEnv's and that it had room (CAPACITY_REACHED arrives first otherwise).
            frame = await session._send_and_receive({"type": "state"})
            if frame.get("type") != "state" or not isinstance(frame.get("data"), dict):
                raise NotOpenEnv(
                    f"/ws answered a state request with a {frame.get('type')!r} frame, not OpenEnv's 'state'"
                )
        except Unreachable as exc:
            raise OpenEnvUnavailableError(
                f"the OpenEnv server at {display} is not reachable: {self.scrub(str(exc))}. "
                "Start it (e.g. `agilerl serve-env module:TextEnv --port N`) or fix environment.env_url."
            ) from None
        except NotOpenEnv as exc:
            raise OpenEnvProtocolError(
                f"{display} does not speak the OpenEnv protocol: {self.scrub(str(exc))}. "
                "environment.env_url must point at an OpenEnv server (its WebSocket route is /ws)."
            ) from None
        except Lost as exc:
            raise OpenEnvUnavailableError(
                f"the OpenEnv server at {display} accepted a connection but {self.scrub(str(exc))}. "
                "Is it overloaded or hung? Raise environment.request_timeout_s or restart it."
            ) from None
        except ErrorFrame as exc:
            if exc.code == "CAPACITY_REACHED":
                if not SessionPool.count(rep.url.ws)[0]:  # full, and not with this process's sessions
                    raise capacity_error(self.pool, exc.data) from None
                self.pool.note_capacity(rep, exc.data)  # full with ours: the run queues its episodes
            # EXECUTION_ERROR here only means "state before reset" failed: the endpoint is OpenEnv.
        finally:
            await session.disconnect()

    async def _list_tools(self) -> list[Tool]:
        rep, session = await self.pool.open_session(time.monotonic() + self.timeout)
        try:
            frame = await session._send_and_receive({"type": "step", "data": {"type": "list_tools"}})
        except ErrorFrame as exc:
            raise OpenEnvProtocolError(
                f"the server at {rep.url.display} takes MCP tool calls but refused list_tools: "
                f"{self.scrub(exc.message or exc.code)}"
            ) from None
        except (Lost, Unreachable, NotOpenEnv) as exc:
            raise OpenEnvUnavailableError(
                f"listing the tools of {rep.url.display} failed: {self.scrub(str(exc))}"
            ) from None
        finally:
            self.pool.discard(rep, session)
        listing = ((frame.get("data") or {}).get("observation") or {}).get("tools") or []
        return [Tool.from_listing(t) for t in listing if isinstance(t, dict) and t.get("name")]

    def probe(self) -> None:
        """Check every replica before training (reachable, speaks OpenEnv), then read the first one's
        schema and metadata: the action format, the tools, the prompt."""
        for rep in self.replicas:
            self.loop.run(self._check_replica(rep), self.timeout * 2 + 1.0)
        first = self.replicas[0].url
        schema: dict[str, Any] = {}
        try:
            schema = self._http_json(first, "/schema") or {}
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.info("could not read %s/schema (%s); actions are sent as text", first.display, self.scrub(str(exc)))
        try:
            meta = self._http_json(first, "/metadata") or {}
            self.env_name = str(meta.get("name")) if isinstance(meta, dict) and meta.get("name") else None
        except (urllib.error.URLError, OSError, ValueError):
            pass
        self._set_format(schema)

    def _set_format(self, schema: dict[str, Any]) -> None:
        where = self.replicas[0].url.display
        action = schema.get("action") or {}
        obs_fields = {p.name for p in params_of(schema.get("observation") or {}, skip=("metadata", "reward", "done"))}
        field_name = self.config.action_field
        if is_mcp_action(action):
            if field_name:
                raise OpenEnvProtocolError(
                    f"the server at {where} is an MCP tool environment (its action is a tool call); remove "
                    "environment.action_field (set mcp_tool to allow only one tool)"
                )
            tools = self.loop.run(self._list_tools(), self.timeout * 2 + 1.0)
            if self.config.mcp_tool and self.config.mcp_tool not in {t.name for t in tools}:
                raise OpenEnvProtocolError(
                    f"environment.mcp_tool {self.config.mcp_tool!r} is not a tool of the server at {where} "
                    f"(its tools: {', '.join(sorted(t.name for t in tools)) or 'none'})."
                )
            fmt = ActionFormat.for_tools(tools, self.config.mcp_tool)
        else:
            if self.config.mcp_tool and action:
                raise OpenEnvProtocolError(
                    f"environment.mcp_tool is set but the server at {where} is not an MCP tool environment (its "
                    f"action has the fields {', '.join(p.name for p in params_of(action)) or 'none'}). Unset mcp_tool."
                )
            names = [p.name for p in params_of(action)]
            if field_name and names and field_name not in names:
                raise OpenEnvProtocolError(
                    f"environment.action_field {field_name!r} is not a field of the action the server at {where} "
                    f"takes (its fields: {', '.join(sorted(names))}). Set action_field to the one that should receive "
                    "the policy's text, or remove it to fill every field from the reply."
                )
            fmt = ActionFormat.for_fields(action, field_name)
        obs = self.config.observation_field
        if obs and obs_fields and obs not in obs_fields:
            raise OpenEnvProtocolError(
                f"environment.observation_field {obs!r} is not a field of the server's observation (at {where}; "
                f"its fields: {', '.join(sorted(obs_fields))})."
            )
        self.action_format = fmt
        self.prompts = PromptRenderer(fmt, self.config.prompt_template, obs)


__all__ = ["OpenEnvSource"]
