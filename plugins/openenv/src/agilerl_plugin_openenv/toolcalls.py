"""Turning a policy's text into an MCP tool call (``CallToolAction``) for ``mcp_tool`` envs.

Accepted forms, tried in order (inside ``<tool_call>...</tool_call>`` or a code fence if present):

1. JSON: ``{"name": "guess", "arguments": {"word": "cat"}}`` (also ``tool_name``/``tool`` and
   ``args``/``parameters``), or a bare JSON object of arguments: ``{"word": "cat"}``;
2. a call: ``guess(word="cat")`` or ``guess("cat")`` (positional arguments follow the tool's schema);
3. plain text, when the tool takes exactly one required argument (or exactly one argument):
   ``cat`` -> ``{"word": "cat"}``.

A reply that fits none of them is a :class:`ToolCallParseError` whose message is fed back to the
policy as the next observation: a malformed call is the policy's mistake to learn from, not a crash.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_FENCE = re.compile(r"```(?:json|python)?\s*(.*?)```", re.S)


class ToolCallParseError(ValueError):
    """The policy's reply is not a call of the configured tool."""


def _params(schema: dict[str, Any]) -> tuple[list[str], list[str]]:
    props = list((schema or {}).get("properties", {}) or {})
    required = [p for p in (schema or {}).get("required", []) or [] if p in props] or []
    return props, required


def parse_tool_call(text: str, tool: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``arguments`` for calling ``tool``, parsed from ``text`` (see the module docstring)."""
    body = text.strip()
    m = _TAG.search(body) or _FENCE.search(body)
    if m:
        body = m.group(1).strip()
    props, required = _params(schema or {})

    if body.startswith("{"):
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ToolCallParseError(f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})") from None
        if not isinstance(obj, dict):
            raise ToolCallParseError("the tool call must be a JSON object")
        name = obj.get("name", obj.get("tool_name", obj.get("tool")))
        if name is not None:
            if name != tool:
                raise ToolCallParseError(f"unknown tool {name!r}; the tool is {tool!r}")
            args = obj.get("arguments", obj.get("args", obj.get("parameters", {})))
            if isinstance(args, str):  # OpenAI style: arguments as a JSON string
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    raise ToolCallParseError("the tool call's arguments are not a JSON object") from None
            if not isinstance(args, dict):
                raise ToolCallParseError("the tool call's arguments must be a JSON object")
            return args
        return obj

    call = re.match(r"^([A-Za-z_][\w.]*)\s*\((.*)\)\s*$", body, re.S)
    if call:
        name = call.group(1)
        if name != tool:
            raise ToolCallParseError(f"unknown tool {name!r}; the tool is {tool!r}")
        try:
            node = ast.parse(body, mode="eval").body
            assert isinstance(node, ast.Call)
            args = [ast.literal_eval(a) for a in node.args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
        except (SyntaxError, ValueError, AssertionError):
            raise ToolCallParseError(f"the arguments of {tool}(...) must be Python literals") from None
        if len(args) > len(props):
            raise ToolCallParseError(f"{tool} takes {len(props)} argument(s), got {len(args)} positional")
        kwargs.update(dict(zip(props, args, strict=False)))
        return kwargs

    single = required if len(required) == 1 else props if len(props) == 1 else []
    if single and body:
        return {single[0]: body}
    raise ToolCallParseError(
        f"expected a call of the tool {tool!r}, e.g. "
        + (f"{tool}({', '.join(f'{p}=...' for p in props)})" if props else f'{{"name": "{tool}", "arguments": {{}}}}')
    )
