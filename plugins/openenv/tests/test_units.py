"""Pure functions: URL redaction, text -> action from a schema, observation rendering, validation checks."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from agilerl_plugin_openenv.actions import ActionFormat, ActionParseError, Tool
from agilerl_plugin_openenv.checks import env_url_problems, url_credentials
from agilerl_plugin_openenv.prompts import PromptRenderer, render_observation
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


class Move(str, Enum):
    up = "up"
    down = "down"


class MoveAction(BaseModel):
    metadata: dict[str, Any] = {}
    move: Move


class CellAction(BaseModel):
    row: int
    col: int
    note: str = ""


class NumberAction(BaseModel):
    number: int


class ChoiceAction(BaseModel):
    side: Literal["left", "right"]


@pytest.mark.parametrize(
    ("schema", "text", "expected"),
    [
        (NumberAction, " 7 ", {"number": 7}),
        (NumberAction, "```\n42\n```", {"number": 42}),
        (NumberAction, '{"number": -3}', {"number": -3}),
        (NumberAction, "I pick 5.", {"number": 5}),  # exactly one integer in the reply
        (MoveAction, " UP\n", {"move": "up"}),
        (MoveAction, "I go down", {"move": "down"}),  # exactly one of the choices, as a word
        (ChoiceAction, "right", {"side": "right"}),
        (CellAction, '```json\n{"row": 1, "col": "2"}\n```', {"row": 1, "col": 2}),
    ],
)
def test_text_becomes_the_servers_action(schema: Any, text: str, expected: dict[str, Any]) -> None:
    assert ActionFormat.for_fields(schema.model_json_schema()).parse(text) == expected


@pytest.mark.parametrize(
    ("schema", "text", "match"),
    [
        (NumberAction, "seven", "must be an integer"),
        (NumberAction, "3 or 4", "must be an integer"),
        (MoveAction, "sideways", 'one of "up", "down"'),
        (MoveAction, "up or down", 'one of "up", "down"'),
        (CellAction, '{"row": 1}', "missing col"),
        (CellAction, '{"row": 1, "col": 2, "x": 0}', "no field 'x'"),
        (CellAction, "{row: 1", "not valid JSON"),
    ],
)
def test_text_that_is_no_action_says_why(schema: Any, text: str, match: str) -> None:
    with pytest.raises(ActionParseError, match=match):
        ActionFormat.for_fields(schema.model_json_schema()).parse(text)


def test_the_reply_format_comes_from_the_schema() -> None:
    assert ActionFormat.for_fields(NumberAction.model_json_schema()).instructions() == (
        "Reply with a single integer (number: integer)."
    )
    assert (
        ActionFormat.for_fields(MoveAction.model_json_schema()).instructions() == "Reply with exactly one of: up, down."
    )
    assert (
        "row: integer; col: integer; note: string (optional)"
        in ActionFormat.for_fields(CellAction.model_json_schema()).instructions()
    )
    # One text field: free text, nothing to explain; action_field picks one field of several.
    assert ActionFormat.for_fields({"properties": {"message": {"type": "string"}}}).instructions() == ""
    fmt = ActionFormat.for_fields(CellAction.model_json_schema(), "note")
    assert fmt.parse("  hello ") == {"note": "hello"}


TOOLS = [
    Tool.from_listing({"name": "say", "description": "Say a word.", "input_schema": {
        "properties": {"word": {"type": "string"}, "times": {"type": "integer"}}, "required": ["word"]}}),
    Tool.from_listing({"name": "hint", "description": "Get a hint.", "input_schema": {"properties": {}}}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"tool": "say", "arguments": {"word": "cat"}}', ("say", {"word": "cat"})),
        ('<tool_call>{"name": "say", "arguments": {"word": "cat"}}</tool_call>', ("say", {"word": "cat"})),
        ('{"tool_name": "say", "arguments": "{\\"word\\": \\"dog\\"}"}', ("say", {"word": "dog"})),
        ('{"function": {"name": "hint", "arguments": "{}"}}', ("hint", {})),
        ('say("sun", times="3")', ("say", {"word": "sun", "times": 3})),
        ("```python\nsay(word='sea')\n```", ("say", {"word": "sea"})),
        ("hint()", ("hint", {})),
        ('[TOOL_CALLS] [{"name": "say", "arguments": {"word": "sky"}}]', ("say", {"word": "sky"})),  # Mistral
        ('<|python_tag|>{"name": "say", "parameters": {"word": "sea"}}', ("say", {"word": "sea"})),  # Llama 3.1
    ],
)
def test_tool_calls_parse(text: str, expected: tuple[str, dict[str, Any]]) -> None:
    data = ActionFormat.for_tools(TOOLS).parse(text)
    assert (data["type"], data["tool_name"], data["arguments"]) == ("call_tool", *expected)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"tool": "shout", "arguments": {}}', "unknown tool 'shout'; the tools are say, hint"),
        ('{"tool": "say", "arguments": [1]}', "JSON object"),
        ('{"tool": "say", "arguments": {"times": 2}}', "missing word"),
        ("{not json", "not valid JSON"),
        ("say(word=open('x'))", "must be literals"),
        ("moon", "expected a tool call"),  # plain text: only when one tool is allowed
    ],
)
def test_bad_tool_calls_say_why(text: str, match: str) -> None:
    with pytest.raises(ActionParseError, match=match):
        ActionFormat.for_tools(TOOLS).parse(text)


def test_one_allowed_tool_takes_plain_text_and_the_prompt_lists_tools() -> None:
    only = ActionFormat.for_tools(TOOLS, only_tool="say")
    assert only.parse("  moon ")["arguments"] == {"word": "moon"}
    with pytest.raises(ActionParseError, match="unknown tool 'hint'"):
        only.parse('{"tool": "hint", "arguments": {}}')
    text = ActionFormat.for_tools(TOOLS).instructions()
    assert '{"tool": "<name>", "arguments"' in text
    assert "- say(word: string, times: integer (optional)): Say a word." in text and "- hint(): Get a hint." in text


def test_every_observation_field_is_rendered() -> None:
    obs = {"board": [[".", "X"], ["O", "."]], "legal_moves": ["a1", "b2"], "message": "Your move.", "turn": 3,
           "info": {"hidden": 1}, "system_prompt": "Play.", "empty": ""}  # fmt: skip
    assert render_observation(obs) == "board:\n. X\nO .\nlegal_moves: a1, b2\nmessage: Your move.\nturn: 3"
    assert render_observation({"prompt": "Say 7.", "error": ""}) == "Say 7."  # one text field: as is
    assert render_observation(obs, "message") == "Your move."
    tool = {"tool_name": "say", "result": {"content": [{"type": "text", "text": "ok"}]}, "error": None}
    assert render_observation(tool) == "ok"


def test_prompt_template_formats_observation_fields() -> None:
    fmt = ActionFormat.for_fields(NumberAction.model_json_schema())
    plain = PromptRenderer(fmt)
    assert plain.system({"system_prompt": "Guess."}) == "Guess.\n\nReply with a single integer (number: integer)."
    template = {
        "system_0": "You play a game. {action_format}",
        "user_1": "Turn {turn}: {message}",
        "assistant_2": "My guess:",
    }
    renderer = PromptRenderer(fmt, template)
    obs = {"turn": 2, "message": "higher"}
    assert renderer.system(obs) == "You play a game. Reply with a single integer (number: integer)."
    assert renderer.user(obs) == "Turn 2: higher" and renderer.assistant_prefix(obs) == "My guess:"
    from agilerl_plugin_openenv.errors import OpenEnvError

    with pytest.raises(OpenEnvError, match=r"prompt_template.user_1: the observation has no field 'turn'"):
        renderer.user({"message": "x"})


class _Spec:
    def __init__(self, env_url: Any, max_turns: int | None = 1, prompt_template: Any = None) -> None:
        self.env_url, self.max_turns, self.prompt_template = env_url, max_turns, prompt_template


def test_validation_wants_max_turns_and_no_written_out_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_url_problems(_Spec("http://127.0.0.1:8000")) == []
    for name in ("U", "PW", "TOKEN", "GAME"):
        monkeypatch.setenv(name, name.lower())  # ${VARIABLE}s must be set (issue 27)
    assert env_url_problems(_Spec("http://${U}:${PW}@h:1/?token=${TOKEN}&env=${GAME}")) == []
    problems = dict(env_url_problems(_Spec(["http://h:1", "http://trainer:hunter2@h:2/?api_key=abc123"], None)))
    assert "required with env_url" in problems["max_turns"]
    assert "a password and the query parameter 'api_key'" in problems["env_url[1]"]
    assert "hunter2" not in str(problems) and "abc123" not in str(problems)
    # Every user-info part and every query value may be a secret (a token as the user name, a
    # password under any key): written out, each is refused by name, never shown.
    assert url_credentials("http://s3cr3tT0ken@h:1/") == ["the user name"]
    assert url_credentials("http://h:1/?pw=hunter2&code=0xbeef") == ["the query parameter 'pw'",
                                                                    "the query parameter 'code'"]  # fmt: skip
    assert url_credentials("http://user@h:1/?mode=fast") == ["the user name", "the query parameter 'mode'"]
    assert url_credentials("http://${USER}@h:1/?mode=${MODE}&${FLAG}&${KEY}=&") == []
    # All query text is written out: a bare part or a key with an empty value may be the token
    # itself, so it is named by its position, never by its text.
    assert url_credentials("http://h:1/?SECRETBAREQ") == ["query part 1 (text with no '=')"]
    assert url_credentials("http://h:1/?mode=${MODE}&SECRETKEY=") == ["query part 2 (a key with an empty value)"]
    problems = dict(env_url_problems(_Spec("http://h:1/?SECRETBAREQ&x=${U}&SECRETKEY=")))
    assert "query part 1 (text with no '=') and query part 3 (a key with an empty value)" in problems["env_url"]
    assert "SECRET" not in str(problems) and "${VARIABLE}" in problems["env_url"]
    assert (
        "keys are <role>_<position>"
        in dict(env_url_problems(_Spec("http://h:1", 1, {"prompt": "x"})))["prompt_template"]
    )
