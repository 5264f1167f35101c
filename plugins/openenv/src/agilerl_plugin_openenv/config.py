"""The ``LLMEnvSpec`` fields the ``env_url`` source honours, resolved: URLs (with ``${VAR}`` expanded
from the environment), headers read from the environment, timeouts, field names, the penalty."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from agilerl_plugin_openenv.errors import OpenEnvError
from agilerl_plugin_openenv.urls import ReplicaURL, parse_replica, url_problem

DEFAULT_REQUEST_TIMEOUT_S = 30.0
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env_vars(text: str, where: str) -> tuple[str, list[str]]:
    """``text`` with ``${NAME}`` replaced by environment variables, and the values substituted."""
    values: list[str] = []

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in os.environ:
            raise OpenEnvError(f"{where} uses ${{{name}}} but the environment variable {name} is not set")
        values.append(os.environ[name])
        return os.environ[name]

    return _VAR.sub(sub, text), values


@dataclass
class SourceConfig:
    """The ``LLMEnvSpec`` fields this source honours, resolved."""

    replicas: list[ReplicaURL]
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    max_concurrent_resets: int | None = None
    max_turns: int | None = None
    observation_field: str | None = None
    action_field: str | None = None
    action_error_field: str = ""
    mcp_tool: str | None = None
    invalid_action_reward: float = 0.0
    prompt_template: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: Any) -> SourceConfig:
        headers: dict[str, str] = {}
        secrets: list[str] = []
        for header, var in (getattr(spec, "env_url_headers_from_env", None) or {}).items():
            if var not in os.environ:
                raise OpenEnvError(
                    f"environment.env_url_headers_from_env.{header}: the environment variable {var} is not set"
                )
            headers[str(header)] = os.environ[var]
            secrets.append(os.environ[var])
        urls = spec.env_url if isinstance(spec.env_url, (list, tuple)) else [spec.env_url]
        replicas: list[ReplicaURL] = []
        for i, url in enumerate(urls):
            where = "environment.env_url" + (f"[{i}]" if len(urls) > 1 else "")
            text, values = expand_env_vars(str(url), where)
            why = url_problem(text)
            if why:
                raise OpenEnvError(f"{where} is not a usable URL: {why}. Use e.g. http://127.0.0.1:8000")
            rep = parse_replica(text)
            extra = [v for v in [*values, *secrets] if len(v) >= 3]
            rep = replace(rep, raw=text, secrets=tuple(sorted({*rep.secrets, *extra}, key=len, reverse=True)))
            if values:  # what the manifest said is safe to show with the variables unexpanded
                rep = replace(rep, display=parse_replica(_VAR.sub("VAR", str(url))).display)
            replicas.append(rep)
        if not replicas:
            raise OpenEnvError("environment.env_url is an empty list: give at least one OpenEnv server URL")
        timeout = getattr(spec, "request_timeout_s", None)
        return cls(
            replicas=replicas,
            # 0 would mean "never wait"; treat it (and None) as the default rather than fail every request.
            request_timeout_s=float(timeout) if timeout else DEFAULT_REQUEST_TIMEOUT_S,
            max_concurrent_resets=getattr(spec, "max_concurrent_resets", None),
            max_turns=getattr(spec, "max_turns", None),
            observation_field=getattr(spec, "observation_field", None) or None,
            action_field=getattr(spec, "action_field", None) or None,
            action_error_field=getattr(spec, "action_error_field", "") or "",
            mcp_tool=getattr(spec, "mcp_tool", None) or None,
            invalid_action_reward=float(getattr(spec, "invalid_action_reward", 0.0) or 0.0),
            prompt_template=getattr(spec, "prompt_template", None) or None,
            headers=headers,
        )


__all__ = ["DEFAULT_REQUEST_TIMEOUT_S", "SourceConfig", "expand_env_vars"]
