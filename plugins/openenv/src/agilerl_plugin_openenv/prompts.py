"""What the policy reads: observations rendered as text, the system prompt, ``prompt_template``.

* Every field of an observation reaches the prompt. By default (:func:`render_observation`) a
  single text field is shown as it is, an MCP tool result as its text, and anything richer as one
  ``field: value`` line per field (boards and other lists of rows as rows); ``observation_field``
  picks one field instead.
* The default system prompt is the server's own (an observation field ``system_prompt``, if any)
  followed by the reply format read from the server's schema (:meth:`ActionFormat.instructions`),
  which lists MCP tools with their argument schemas.
* ``prompt_template`` (keys ``system_0``, ``user_1``, ``assistant_2``, as for dataset rows) is
  applied to env_url envs as to local ones: each value is a ``str.format`` template over the
  observation's fields plus ``observation`` (the default rendering), ``action_format`` and ``tools``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agilerl_plugin_openenv.actions import ActionFormat
from agilerl_plugin_openenv.errors import OpenEnvError, OpenEnvProtocolError

#: Observation fields that are the protocol's or the client's, not content for the policy.
HIDDEN_FIELDS = frozenset({"metadata", "reward", "done", "system_prompt", "info", "truncated"})


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(row, list) for row in value):
        return "\n".join(" ".join(str(c) for c in row) for row in value)  # a board: one row per line
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return ", ".join(str(v) for v in value)
    return json.dumps(value, sort_keys=True, default=str)


def render_tool_result(obs: dict[str, Any]) -> str:
    """An MCP ``CallToolObservation`` as text: the tool's text content, or its error."""
    error = obs.get("error")
    if error:
        return f"Tool error: {error.get('message', error) if isinstance(error, dict) else error}"
    result = obs.get("result")
    if isinstance(result, dict):
        texts = [
            c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict) and c.get("type") == "text"
        ]
        if texts:
            return "\n".join(texts)
        if "data" in result:
            result = result["data"]
    return result if isinstance(result, str) else json.dumps(result, sort_keys=True, default=str)


def render_observation(obs: dict[str, Any], field_name: str | None = None) -> str:
    """An OpenEnv observation dict as the text the policy reads (see the module docstring)."""
    if field_name:
        if field_name not in obs:
            raise OpenEnvProtocolError(
                f"the server's observation has no field {field_name!r} (environment.observation_field); "
                f"it has: {', '.join(sorted(obs)) or 'none'}"
            )
        return _value(obs[field_name])
    if "tool_name" in obs and "result" in obs:
        return render_tool_result(obs)
    shown = {k: v for k, v in obs.items() if k not in HIDDEN_FIELDS and v not in (None, "", [], {})}
    if len(shown) == 1 and isinstance(next(iter(shown.values())), str):
        return str(next(iter(shown.values())))
    lines = []
    for key, value in shown.items():
        text = _value(value)
        lines.append(f"{key}:\n{text}" if "\n" in text else f"{key}: {text}")
    return "\n".join(lines)


class _Fields(dict):  # type: ignore[type-arg]
    """``str.format`` mapping that names the missing field and the ones there are."""

    def __missing__(self, key: str) -> Any:
        raise KeyError(key)


@dataclass
class PromptRenderer:
    """System prompt and user messages for one source's episodes."""

    action_format: ActionFormat
    template: dict[str, Any] | None = None
    observation_field: str | None = None

    def _fields(self, obs: dict[str, Any]) -> dict[str, Any]:
        tools = "\n".join(f"- {t.signature()}" for t in self.action_format.tools.values())
        return _Fields(
            {
                **{k: _value(v) for k, v in obs.items()},
                "observation": render_observation(obs, self.observation_field),
                "action_format": self.action_format.instructions(),
                "tools": tools,
            }
        )

    def _format(self, key: str, obs: dict[str, Any]) -> str:
        assert self.template is not None
        try:
            return str(self.template[key]).format_map(self._fields(obs))
        except KeyError as exc:
            raise OpenEnvError(
                f"environment.prompt_template.{key}: the observation has no field {exc.args[0]!r} "
                f"(it has: {', '.join(sorted(obs))}; also available: observation, action_format, tools)"
            ) from None
        except (ValueError, IndexError) as exc:
            raise OpenEnvError(f"environment.prompt_template.{key}: not a valid format string ({exc})") from None

    def _keys(self, role: str) -> list[str]:
        keys = [k for k in self.template or {} if str(k).rpartition("_")[0] == role]
        return sorted(keys, key=lambda k: int(str(k).rpartition("_")[2]))

    def system(self, obs: dict[str, Any]) -> str | None:
        """The system prompt of an episode, from its first observation."""
        keys = self._keys("system")
        if keys:
            return "\n".join(self._format(k, obs) for k in keys)
        parts = [obs["system_prompt"]] if isinstance(obs.get("system_prompt"), str) and obs["system_prompt"] else []
        instructions = self.action_format.instructions()
        if instructions:
            parts.append(instructions)
        return "\n\n".join(parts) or None

    def user(self, obs: dict[str, Any]) -> str:
        """The user message for an observation (the first one, or any later one)."""
        keys = self._keys("user")
        if keys:
            return "\n".join(self._format(k, obs) for k in keys)
        return render_observation(obs, self.observation_field)

    def assistant_prefix(self, obs: dict[str, Any]) -> str | None:
        keys = self._keys("assistant")
        return "".join(self._format(k, obs) for k in keys) if keys else None


__all__ = ["HIDDEN_FIELDS", "PromptRenderer", "render_observation", "render_tool_result"]
