"""URL redaction and tool-call parsing (pure functions)."""

from __future__ import annotations

import pytest

from agilerl_plugin_openenv.toolcalls import ToolCallParseError, parse_tool_call
from agilerl_plugin_openenv.urls import parse_replica, redact, scrub


def test_urls_keep_credentials_for_connecting_and_hide_them_when_shown() -> None:
    rep = parse_replica("https://alice:s3cr3t-pw@env.example.com:8443/base/?token=tok-123456")
    assert rep.ws == "wss://alice:s3cr3t-pw@env.example.com:8443/base/ws?token=tok-123456"
    assert rep.http == "https://alice:s3cr3t-pw@env.example.com:8443/base?token=tok-123456"
    assert rep.display == "https://***@env.example.com:8443/base?token=***"
    text = scrub(f"failed to reach {rep.ws}; auth s3cr3t-pw rejected, token tok-123456", rep)
    assert "s3cr3t" not in text and "tok-123456" not in text and "alice" not in text
    assert redact("127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert parse_replica("ws://127.0.0.1:1/ws").ws == "ws://127.0.0.1:1/ws"
    with pytest.raises(ValueError, match="scheme"):
        parse_replica("ftp://host")


SCHEMA = {"properties": {"word": {"type": "string"}, "times": {"type": "integer"}}, "required": ["word"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>{"name": "say", "arguments": {"word": "cat"}}</tool_call>', {"word": "cat"}),
        ('{"tool_name": "say", "arguments": "{\\"word\\": \\"dog\\"}"}', {"word": "dog"}),
        ('{"word": "cow", "times": 2}', {"word": "cow", "times": 2}),
        ('say("sun", times=3)', {"word": "sun", "times": 3}),
        ("```python\nsay(word='sea')\n```", {"word": "sea"}),
        ("  moon ", {"word": "moon"}),
    ],
)
def test_tool_calls_parse(text: str, expected: dict) -> None:  # type: ignore[type-arg]
    assert parse_tool_call(text, "say", SCHEMA) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"name": "shout", "arguments": {}}', "unknown tool 'shout'"),
        ('{"name": "say", "arguments": [1]}', "JSON object"),
        ("{not json", "not valid JSON"),
        ("say(word=open('x'))", "Python literals"),
    ],
)
def test_bad_tool_calls_say_why(text: str, match: str) -> None:
    with pytest.raises(ToolCallParseError, match=match):
        parse_tool_call(text, "say", SCHEMA)
    with pytest.raises(ToolCallParseError, match="expected a call"):
        parse_tool_call("", "say", {"properties": {"a": {}, "b": {}}})
