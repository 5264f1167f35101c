"""Conversational rows, as TRL reads them: a column holding a list of ``{"role", "content"}`` messages.

TRL's two dataset forms are *standard* (text columns) and *conversational* (message lists, rendered
with the tokenizer's chat template). This module says which form a value is and checks a
conversation's shape, so every consumer (the dataset env, the rollout source, validation) refuses
the same things with the same words, naming the row: a message that is not ``{role, content}``, a
role outside :data:`ROLES`, a system message after the start, two user or two assistant messages
in a row. A conversation is never turned into text by anything but a chat template (invariant 14).

Standard library only: ``agilerl validate`` imports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agilerl.errors import AgileRLError

#: The roles a conversational row may use (TRL's, and what chat templates render).
ROLES = ("system", "user", "assistant", "tool")


class ConversationError(AgileRLError):
    """A conversational value is malformed (names the row, the message and the fix)."""


def plain(value: Any) -> Any:
    """``value`` with array-likes (pandas/pyarrow give numpy arrays for list columns) as lists."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


def is_conversational(value: Any) -> bool:
    """Whether ``value`` is a message list (a non-empty list whose items are mappings with a ``role``)."""
    value = plain(value)
    return isinstance(value, list) and bool(value) and all(isinstance(m, Mapping) and "role" in m for m in value)


def looks_like_json_messages(value: Any) -> bool:
    """Whether ``value`` is text holding a JSON message list (a CSV cell cannot hold a list)."""
    if not isinstance(value, str) or not value.lstrip().startswith("[{"):
        return False
    try:
        return is_conversational(json.loads(value))
    except ValueError:
        return False


def conversation_problem(messages: Any, *, first: int = 0) -> str | None:
    """Why ``messages`` is not a well-formed conversation (None when it is). ``first``: the number of
    the first message in what the caller shows (a completion continues its prompt's numbering)."""
    messages = plain(messages)
    if not isinstance(messages, list) or not messages:
        return f"expected a non-empty list of {{role, content}} messages, got {_show(messages)}"
    previous: str | None = None
    for i, message in enumerate(messages, start=first):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            return f"message {i} is {_show(message)}, not a {{role, content}} mapping"
        role, content = message["role"], message["content"]
        if role not in ROLES:
            return f"message {i} has role {role!r}; roles are {', '.join(ROLES)}"
        if not isinstance(content, (str, list)):
            return f"message {i} ({role}) has content {_show(content)}; give text"
        if role == "system" and previous is not None:
            return f"message {i} is a system message after the start; a system message may only come first"
        if role in ("user", "assistant") and role == previous:
            return (f"messages {i - 1} and {i} are both {role} messages; user and assistant turns alternate "
                    "(merge the two, or put the missing turn between them)")  # fmt: skip
        if role == "tool" and previous not in ("assistant", "tool"):
            return f"message {i} is a tool message that follows {previous or 'nothing'}; tool results follow an assistant turn"
        previous = role
    return None


def check_conversation(messages: Any, where: str, *, first: int = 0) -> list[dict[str, Any]]:
    """``messages`` as a list of dicts, or :class:`ConversationError` naming ``where``."""
    why = conversation_problem(messages, first=first)
    if why:
        raise ConversationError(f"{where}: {why}")
    return [dict(m) for m in plain(messages)]


def prompt_messages(value: Any, where: str) -> list[dict[str, Any]] | None:
    """A rollout prompt as messages (None for a standard prompt: text, or a list holding no mapping, such
    as a column of numbers a ``prompt_template`` formats). A list with a mapping in it is a
    conversation, checked as one. Generation follows it, so it must end with a user (or tool)
    message; text holding a JSON message list is refused."""
    if looks_like_json_messages(value):
        raise ConversationError(
            f"{where} is text holding a JSON list of messages (a CSV cell cannot hold a list, and the policy would "
            "read the list as text); store conversational rows as .jsonl, .parquet or a save_to_disk directory"
        )
    value = plain(value)
    if not isinstance(value, list) or not any(isinstance(m, Mapping) for m in value):
        return None  # text, or a list of plain values (Countdown's numbers): a standard prompt's column
    messages = check_conversation(value, where)
    if messages[-1]["role"] not in ("user", "tool"):
        raise ConversationError(
            f"{where}: the prompt ends with a {messages[-1]['role']} message; a rollout prompt ends with the user "
            "message the policy answers"
        )
    return messages


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) < 60 else text[:57] + '...'}"


__all__ = [
    "ROLES",
    "ConversationError",
    "check_conversation",
    "conversation_problem",
    "is_conversational",
    "looks_like_json_messages",
    "plain",
    "prompt_messages",
]
