"""From the server's schema to an action: what the policy's text becomes before it is sent.

:class:`ActionFormat` is built once per source from the server's ``/schema`` (its ``action`` JSON
schema) and, for MCP tool environments, its tool list (``list_tools``). ``parse(text)`` turns a
reply into the ``data`` of a ``step`` frame, or raises :class:`ActionParseError` saying why and
what was expected (the client feeds that back to the policy; the episode goes on).

What is accepted, after stripping whitespace, ``<tool_call>`` tags and code fences:

* one text field (``{"message": str}``): the text itself;
* one integer / number / boolean field: the bare value (``7``, ``0.5``, ``true``), or a JSON object;
* one field with choices (``enum`` / ``Literal``): one of them (case-insensitive);
* several fields: a JSON object of them (required ones present, no unknown ones);
* MCP tools: ``{"tool": "name", "arguments": {...}}`` (also ``name``/``tool_name`` and
  ``args``/``parameters``; OpenAI-style arguments as a JSON string), the chat-template form
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` (also Mistral's ``[TOOL_CALLS] [{...}]`` and
  Llama 3.1's ``<|python_tag|>{...}``), a call ``name(word="cat")`` /
  ``name("cat")``, or, when only one tool is allowed and it takes one argument, plain text.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_FENCE = re.compile(r"```[\w-]*\s*(.*?)(?:```|$)", re.S)
_INTS = re.compile(r"(?<![\w.])[+-]?\d+(?![\w]|\.\d)")
#: Action fields an OpenEnv server commonly takes the agent's text in (when several are strings).
TEXT_FIELD_NAMES = ("text", "message", "content", "action", "response", "answer", "command", "code")
#: Fields every OpenEnv Action/Observation carries that are not the agent's to fill / read.
PROTOCOL_FIELDS = ("metadata",)


class ActionParseError(ValueError):
    """The reply is not an action the server takes; the message says what is expected."""


#: Markers chat templates put before a tool call (Mistral, Llama 3.1, ...), dropped before parsing.
_CALL_PREFIXES = ("[TOOL_CALLS]", "<|python_tag|>", "<tool_call>")


def strip_reply(text: str) -> str:
    """The reply without surrounding whitespace, ``<tool_call>`` tags, tool-call markers or a code fence."""
    body = text.strip()
    m = _TAG.search(body) or _FENCE.search(body)
    body = m.group(1).strip() if m else body
    for prefix in _CALL_PREFIXES:
        if body.startswith(prefix):
            body = body[len(prefix) :].strip()
    return body


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow ``$ref`` and single-member ``allOf``/``anyOf`` (pydantic's Optional/enum shapes)."""
    seen = 0
    while isinstance(schema, dict) and seen < 16:
        seen += 1
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part, {}) if isinstance(target, dict) else {}
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            continue
        for key in ("allOf", "anyOf", "oneOf"):
            options = [o for o in schema.get(key) or [] if isinstance(o, dict) and o.get("type") != "null"]
            if key in schema and len(options) == 1:
                schema = {**{k: v for k, v in schema.items() if k != key}, **options[0]}
                break
        else:
            return schema
    return schema if isinstance(schema, dict) else {}


@dataclass(frozen=True)
class Param:
    """One field of an action (or one argument of a tool)."""

    name: str
    type: str  # "string", "integer", "number", "boolean", "object", "array", or "" (anything)
    required: bool
    choices: tuple[Any, ...] = ()
    description: str = ""

    def describe(self) -> str:
        kind = " | ".join(json.dumps(c) for c in self.choices) if self.choices else (self.type or "any")
        text = f"{self.name}: {kind}" + ("" if self.required else " (optional)")
        return text + (f" ({self.description})" if self.description else "")

    def coerce(self, value: Any) -> Any:
        """``value`` (from JSON, or a bare string) as this field's type; ``ActionParseError`` if not."""
        if self.choices:
            if value in self.choices:
                return value
            if isinstance(value, str):
                folded = {str(c).lower(): c for c in self.choices}
                if value.strip().lower() in folded:
                    return folded[value.strip().lower()]
                # A sentence naming exactly one of the choices ("I go left") means that choice.
                words = set(re.findall(r"[\w-]+", value.lower()))
                named = [c for key, c in folded.items() if key in words]
                if len(named) == 1:
                    return named[0]
            raise ActionParseError(f"{self.name} must be one of {', '.join(json.dumps(c) for c in self.choices)}")
        kind = self.type
        if kind == "integer":
            if isinstance(value, bool):
                raise ActionParseError(f"{self.name} must be an integer")
            if isinstance(value, int):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str):
                found = _INTS.findall(value)
                if len(found) == 1:  # "7", "7.", "I pick 7": exactly one integer in the reply
                    return int(found[0])
            raise ActionParseError(f"{self.name} must be an integer (one, e.g. 3)")
        if kind == "number":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return value
            if isinstance(value, str):
                try:
                    return float(value.strip())
                except ValueError:
                    pass
            raise ActionParseError(f"{self.name} must be a number, e.g. 0.5")
        if kind == "boolean":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
                return value.strip().lower() in ("true", "yes")
            raise ActionParseError(f"{self.name} must be true or false")
        if kind == "string":
            if isinstance(value, str):
                return value
            raise ActionParseError(f"{self.name} must be a string")
        if kind in ("object", "array"):
            want, what = (dict, "a JSON object") if kind == "object" else (list, "a JSON list")
            if isinstance(value, str):
                value = _json(value, f"{self.name} must be {what}")
            if not isinstance(value, want):
                raise ActionParseError(f"{self.name} must be {what}")
        return value


def _json(text: str, message: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ActionParseError(f"{message} (not valid JSON: {exc.msg} at character {exc.pos})") from None


def params_of(schema: dict[str, Any] | None, *, skip: tuple[str, ...] = PROTOCOL_FIELDS) -> list[Param]:
    """The fields of an object JSON schema, in declaration order."""
    root = schema or {}
    props = root.get("properties") or {}
    required = set(root.get("required") or [])
    out = []
    for name, raw in props.items():
        if name in skip:
            continue
        sub = _resolve(raw if isinstance(raw, dict) else {}, root)
        choices: tuple[Any, ...] = tuple(sub.get("enum") or ())
        if not choices and "const" in sub:
            choices = (sub["const"],)
        kind = sub.get("type", "")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "")
        has_default = "default" in (raw if isinstance(raw, dict) else {})
        out.append(Param(str(name), str(kind), name in required and not has_default, choices,
                         str(sub.get("description") or "")))  # fmt: skip
    return out


@dataclass(frozen=True)
class Tool:
    """One MCP tool the server lists."""

    name: str
    description: str
    params: tuple[Param, ...]
    schema: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_listing(cls, raw: dict[str, Any]) -> Tool:
        schema = raw.get("input_schema") or raw.get("inputSchema") or {}
        return cls(str(raw.get("name")), str(raw.get("description") or ""), tuple(params_of(schema, skip=())), schema)

    def function_schema(self) -> dict[str, Any]:
        """The tool as chat templates take it (``apply_chat_template(tools=[...])``, OpenAI's shape)."""
        params = self.schema or {"type": "object", "properties": {}}
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": params}}  # fmt: skip

    def signature(self) -> str:
        args = ", ".join(p.describe() for p in self.params)
        return f"{self.name}({args})" + (f": {self.description}" if self.description else "")


def is_mcp_action(schema: dict[str, Any] | None) -> bool:
    """Whether an action schema is OpenEnv's MCP ``CallToolAction`` (a tool name plus arguments)."""
    props = (schema or {}).get("properties") or {}
    return "tool_name" in props and "arguments" in props


class ActionFormat:
    """How text becomes an action for one server (see the module docstring)."""

    def __init__(
        self,
        params: list[Param],
        *,
        tools: list[Tool] | None = None,
        only_tool: str | None = None,
        text_field: str | None = None,
    ) -> None:
        self.params = params
        self.tools = {t.name: t for t in tools or []}
        self.only_tool = only_tool
        self.text_field = text_field
        self.is_mcp = tools is not None

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def for_fields(cls, schema: dict[str, Any] | None, action_field: str | None = None) -> ActionFormat:
        """A plain (non-MCP) action. ``action_field`` names the field that takes the whole reply
        when the action has several (the others keep their defaults)."""
        params = params_of(schema)
        if action_field:
            chosen = [p for p in params if p.name == action_field] or [Param(action_field, "", True)]
            return cls(chosen, text_field=action_field)
        if not params:  # no schema (or an action with no fields): send the text as "text"
            return cls([Param("text", "string", True)], text_field="text")
        required = [p for p in params if p.required]
        if len(params) == 1 or len(required) == 1:  # the others keep their defaults
            one = params[0] if len(params) == 1 else required[0]
            return cls([one], text_field=one.name)
        if not required:
            strings = [p for p in params if p.type == "string" and not p.choices]
            named = [p for p in strings if p.name in TEXT_FIELD_NAMES]
            if len(strings) == 1 or named:
                one = strings[0] if len(strings) == 1 else named[0]
                return cls([one], text_field=one.name)
        return cls(params)

    @classmethod
    def for_tools(cls, tools: list[Tool], only_tool: str | None = None) -> ActionFormat:
        return cls([], tools=tools, only_tool=only_tool)

    # -- describing ------------------------------------------------------------------------------
    def allowed_tools(self) -> list[Tool]:
        return [self.tools[self.only_tool]] if self.only_tool in self.tools else list(self.tools.values())

    def instructions(self) -> str:
        """What the default system prompt says about the reply's format."""
        if self.is_mcp:
            allowed = self.allowed_tools()
            lines = ["Reply with exactly one tool call, as JSON: "
                     '{"tool": "<name>", "arguments": {<argument>: <value>, ...}}. Tools:']  # fmt: skip
            lines += [f"- {t.signature()}" for t in allowed]
            return "\n".join(lines)
        if self.text_field is not None and len(self.params) == 1:
            p = self.params[0]
            if p.choices:
                return f"Reply with exactly one of: {', '.join(str(c) for c in p.choices)}."
            if p.type == "integer":
                return f"Reply with a single integer ({p.describe()})."
            if p.type == "number":
                return f"Reply with a single number ({p.describe()})."
            if p.type == "boolean":
                return "Reply with true or false."
            if p.type in ("object", "array"):
                return f"Reply with JSON ({p.describe()})."
            return ""  # free text: nothing to say
        fields = "; ".join(p.describe() for p in self.params)
        return f"Reply with a JSON object with the fields: {fields}."

    # -- parsing ---------------------------------------------------------------------------------
    def parse(self, text: str) -> dict[str, Any]:
        """The ``data`` of the ``step`` frame for this reply."""
        if self.is_mcp:
            name, args = self._tool_call(text)
            return {"type": "call_tool", "tool_name": name, "arguments": args}
        if self.text_field is not None and len(self.params) == 1:
            p = self.params[0]
            body = strip_reply(text)
            if p.type in ("string", "") and not p.choices:
                return {p.name: body}  # free text
            if body.startswith("{") and p.type != "object":
                obj = _json(body, f"expected {p.describe()}")
                if isinstance(obj, dict) and p.name in obj and len(obj) == 1:
                    body = obj[p.name]
            return {p.name: p.coerce(body)}
        return self._object(strip_reply(text), self.params, "the action")

    def _object(self, body: str | dict[str, Any], params: list[Param] | tuple[Param, ...], what: str) -> dict[str, Any]:
        obj = body if isinstance(body, dict) else _json(body, f"{what} must be a JSON object")
        if not isinstance(obj, dict):
            raise ActionParseError(f"{what} must be a JSON object with {', '.join(p.name for p in params)}")
        by_name = {p.name: p for p in params}
        unknown = [k for k in obj if k not in by_name]
        if unknown and by_name:
            raise ActionParseError(f"{what} has no field {unknown[0]!r} (its fields: {', '.join(by_name)})")
        missing = [p.name for p in params if p.required and p.name not in obj]
        if missing:
            raise ActionParseError(f"{what} is missing {', '.join(missing)}")
        return {k: by_name[k].coerce(v) if k in by_name else v for k, v in obj.items()}

    def _tool_call(self, text: str) -> tuple[str, dict[str, Any]]:
        body = strip_reply(text)
        allowed = [self.only_tool] if self.only_tool else list(self.tools)
        example = f'{{"tool": "{allowed[0]}", "arguments": {{...}}}}' if allowed else "a tool call"
        if body.startswith("[") and body.rstrip().endswith("]"):  # Mistral: a list of calls
            calls = _json(body, f"expected a tool call such as {example}")
            if not (isinstance(calls, list) and len(calls) == 1 and isinstance(calls[0], dict)):
                raise ActionParseError(f"make exactly one tool call, e.g. {example}")
            body = json.dumps(calls[0])
        if body.startswith("{"):
            obj = _json(body, f"expected a tool call such as {example}")
            if not isinstance(obj, dict):
                raise ActionParseError(f"expected a tool call such as {example}")
            name = obj.get("tool", obj.get("name", obj.get("tool_name")))
            if name is None and "function" in obj and isinstance(obj["function"], dict):  # OpenAI shape
                obj = obj["function"]
                name = obj.get("name")
            if name is None:
                if len(allowed) != 1:
                    raise ActionParseError(f"say which tool to call, e.g. {example}")
                return allowed[0], self._args(allowed[0], obj)
            args = obj.get("arguments", obj.get("args", obj.get("parameters", {})))
            if isinstance(args, str):
                args = _json(args, "the tool call's arguments must be a JSON object")
            if not isinstance(args, dict):
                raise ActionParseError("the tool call's arguments must be a JSON object")
            return self._check_name(str(name), allowed), self._args(str(name), args)
        call = re.match(r"^([A-Za-z_][\w.]*)\s*\((.*)\)\s*$", body, re.S)
        if call:
            name = self._check_name(call.group(1), allowed)
            try:
                node = ast.parse(body, mode="eval").body
                assert isinstance(node, ast.Call)
                pos = [ast.literal_eval(a) for a in node.args]
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
            except (SyntaxError, ValueError, AssertionError):
                raise ActionParseError(f"the arguments of {name}(...) must be literals") from None
            params = self.tools[name].params if name in self.tools else ()
            if len(pos) > len(params):
                raise ActionParseError(f"{name} takes {len(params)} argument(s), got {len(pos)} positional")
            kwargs.update({p.name: v for p, v in zip(params, pos, strict=False)})
            return name, self._args(name, kwargs)
        if len(allowed) == 1 and allowed[0] in self.tools:
            tool = self.tools[allowed[0]]
            required = [p for p in tool.params if p.required]
            single = required if len(required) == 1 else list(tool.params) if len(tool.params) == 1 else []
            if single and body:
                return tool.name, self._args(tool.name, {single[0].name: body})
        raise ActionParseError(f"expected a tool call such as {example}")

    def _check_name(self, name: str, allowed: list[str]) -> str:
        if name not in allowed:
            raise ActionParseError(f"unknown tool {name!r}; the tools are {', '.join(allowed) or 'none'}")
        return name

    def _args(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        tool = self.tools.get(name)
        if tool is None or not tool.params:
            return dict(args)
        return self._object(args, tool.params, f"the arguments of {name}")


__all__ = ["ActionFormat", "ActionParseError", "Param", "Tool", "is_mcp_action", "params_of", "strip_reply"]
