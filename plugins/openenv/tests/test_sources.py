"""``env_url`` as a rollout source: our serve-env server, servers written against openenv-core, MCP tools."""

from __future__ import annotations

import pytest

from agilerl_plugin_openenv.errors import OpenEnvProtocolError
from agilerl_plugin_openenv.server import serve_in_thread


def test_serve_env_cli_serves_the_word_game_as_a_source(server_process, build) -> None:  # type: ignore[no-untyped-def]
    server = server_process("--max-concurrent-envs", "4", "--env-config", '{"turns": 2, "targets": ["yes", "cat"]}')
    make_env, max_turns = build(server.url, max_turns=2)
    assert max_turns == 2
    env = make_env()
    obs, info = env.reset(seed=3)
    target = info["target"]
    assert obs == f"Say {target}." and env.system_prompt == "Answer with the word you are asked for."
    obs, reward, terminated, truncated, _ = env.step(f"{target} {target}")
    assert obs == f"Again: say {target}." and reward == pytest.approx(2 * len(target) / (2 * len(target) + 1))
    assert not terminated and not truncated
    _, reward, terminated, truncated, _ = env.step("nothing")
    assert reward == 0.0 and terminated and not truncated
    # Same seed, same episode: reset(seed) reaches the server's env.
    assert make_env().reset(seed=3)[1]["target"] == target
    env.close()


def test_concurrent_sessions_are_independent(game_server, build) -> None:  # type: ignore[no-untyped-def]
    make_env, _ = build(game_server.url)
    envs = [make_env() for _ in range(6)]
    for env in envs:
        env.reset()
    # Half the envs finish their first turn; the others must still be at turn one.
    for env in envs[:3]:
        assert env.step("one")[0] == "Again: say one."
    for env in envs[3:]:
        assert env.step("no")[0] == "Again: say one."
    for env in envs:
        assert env.step("one")[2] is True
        env.close()


def test_max_turns_truncates_and_max_concurrent_resets_limits(game_server, build) -> None:  # type: ignore[no-untyped-def]
    make_env, max_turns = build(game_server.url, max_turns=1, max_concurrent_resets=1)
    assert max_turns == 1
    env = make_env()
    env.reset()
    _, _, terminated, truncated, _ = env.step("one")
    assert truncated and not terminated  # the game has 2 turns; the manifest allows 1


def test_server_written_against_openenv_core_works_as_a_source(native, build) -> None:  # type: ignore[no-untyped-def]
    with serve_in_thread(native.app(native.GuessEnvironment, native.GuessAction, native.GuessObservation)) as served:
        # action_field is found from the server's /schema (its only string field: guess).
        make_env, _ = build(served.url, observation_field="prompt")
        env = make_env()
        assert env.reset(seed=5)[0] == "Guess the animal (seed 5)."
        assert env.step("cat")[1:3] == (1.0, True)
        env.reset()
        assert env.step("dog")[1:3] == (0.0, True)
        # Without observation_field every non-empty field is shown (here only the prompt has text).
        make_env, _ = build(served.url)
        text, _ = make_env().reset(seed=1)
        assert text == "Guess the animal (seed 1)."


def test_mcp_tool_env_lists_its_tools_and_takes_tool_calls(servers, build) -> None:  # type: ignore[no-untyped-def]
    make_env, _ = build(servers["mcp"].url, max_turns=2, invalid_action_reward=-0.5)
    env = make_env()
    obs, info = env.reset()
    assert obs == "Which word? Say one." and info["env_name"] == "WordToolEnvironment"
    # The default system prompt states the reply format and lists every tool with its arguments.
    assert '{"tool": "<name>", "arguments"' in env.system_prompt
    assert "- submit(word: string): Submit your answer: a single word." in env.system_prompt
    assert "- hint(): A hint about the word." in env.system_prompt
    text, reward, terminated, _, info = env.step('{"tool": "hint", "arguments": {}}')
    assert (text, reward, terminated) == ("It is a number below two.", 0.0, False)
    text, reward, terminated, _, _ = env.step('<tool_call>{"name": "submit", "arguments": {"word": "one"}}</tool_call>')
    assert (text, reward, terminated) == ("correct", 1.0, True)
    env.reset()
    text, reward, terminated, truncated, info = env.step("one")  # two tools: plain text says which?
    assert reward == -0.5 and not terminated and not truncated and "expected a tool call" in text
    assert info["metrics"]["invalid_actions"] == 1
    text, reward, terminated, truncated, info = env.step('submit("one two")')  # the tool itself refuses
    assert "one word only" in text and reward == -0.5 and truncated and info["metrics"]["invalid_actions"] == 2
    # mcp_tool allows one tool only; then plain text is its single argument.
    make_env, _ = build(servers["mcp"].url, mcp_tool="submit", max_turns=1)
    env = make_env()
    env.reset()
    assert "hint" not in env.system_prompt
    assert env.step("one")[:3] == ("correct", 1.0, True)
    with pytest.raises(OpenEnvProtocolError, match=r"'nope' is not a tool of the server.*hint, submit"):
        build(servers["mcp"].url, mcp_tool="nope")


def test_integer_action_from_text_and_invalid_replies_are_survived(servers, build) -> None:  # type: ignore[no-untyped-def]
    make_env, _ = build(servers["integer"].url, max_turns=3, invalid_action_reward=-0.25, action_error_field="error")
    env = make_env()
    assert env.reset()[0] == "Say 7." and env.system_prompt == "Reply with a single integer (number: integer)."
    text, reward, terminated, truncated, info = env.step("seven")  # not an integer: never sent
    assert text.startswith("Invalid action: number must be an integer") and "Reply with a single integer" in text
    assert (reward, terminated, truncated) == (-0.25, False, False)
    text, reward, terminated, _, info = env.step("5000")  # an integer the server's schema refuses
    assert "Invalid action" in text and "number" in text and reward == -0.25 and not terminated
    assert info["metrics"]["invalid_actions"] == 2
    _, reward, terminated, truncated, info = env.step("```\n7\n```")
    assert (reward, terminated, truncated) == (1.0, True, False) and info["metrics"]["invalid_actions"] == 2


def test_multi_field_observation_is_rendered_whole(servers, build) -> None:  # type: ignore[no-untyped-def]
    make_env, _ = build(servers["multi_field"].url, max_turns=2)
    env = make_env()
    obs, _ = env.reset()
    assert obs == (
        "grid:\n. G .\n. @ .\n. . .\nposition: 1, 1\ngoal: 0, 1\nlegal_moves: up, down, left, right\n"
        "message: Walk to G."
    )
    assert env.system_prompt == "Reply with exactly one of: up, down, left, right."
    text, reward, terminated, _, info = env.step("left")
    assert reward == 0.0 and not terminated and "position: 1, 0" in text and info["openenv_done"] is False
    assert env.step("I go right")[1:4] == (0.5, False, True)  # closer again; max_turns reached
    # prompt_template formats the fields; the default rendering is there as {observation}.
    template = {"system_0": "Grid game. {action_format}", "user_1": "You are at {position}; goal {goal}. {message}"}
    make_env, _ = build(servers["multi_field"].url, max_turns=1, prompt_template=template)
    env = make_env()
    assert env.reset()[0] == "You are at 1, 1; goal 0, 1. Walk to G."
    assert env.system_prompt == "Grid game. Reply with exactly one of: up, down, left, right."
    assert env.step("up")[1:3] == (1.0, True)


def test_example_mcp_server_works_as_a_source(build) -> None:  # type: ignore[no-untyped-def]
    """``examples/openenv/mcp_word_server.py`` (openenv-core only, no agilerl code) with ``mcp_tool``."""
    import importlib.util
    from pathlib import Path

    from agilerl_plugin_openenv._openenv import import_openenv

    import_openenv()  # the example imports openenv.core itself; import it without gradio first
    path = Path(__file__).resolve().parents[3] / "examples" / "openenv" / "mcp_word_server.py"
    spec = importlib.util.spec_from_file_location("openenv_example_mcp_word_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with serve_in_thread(module.app) as served:
        make_env, _ = build(served.url, mcp_tool="submit", max_turns=1)
        env = make_env()
        assert env.reset()[0] == "Call submit with the word one."
        assert env.step("submit(word='one')")[:3] == ("correct", 1.0, True)
        env.reset()
        text, reward, _, _, _ = env.step("on")
        assert text == "try again" and reward == 0.5


def test_max_concurrent_resets_bounds_resets_in_flight(native, build) -> None:  # type: ignore[no-untyped-def]
    import threading

    env_cls = native.SlowResetEnvironment
    with serve_in_thread(
        native.app(env_cls, native.GuessAction, native.GuessObservation, max_concurrent_envs=8)
    ) as served:
        for limit in (1, 2):
            make_env, _ = build(served.url, observation_field="prompt", max_concurrent_resets=limit)
            envs = [make_env() for _ in range(6)]
            env_cls.most = 0
            threads = [threading.Thread(target=env.reset) for env in envs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert 1 <= env_cls.most <= limit
            for env in envs:
                env.close()


def test_mcp_tools_reach_the_models_chat_template(servers, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A chat template that announces tools (as Qwen's, Llama's, Mistral's do) gets the server's tools."""
    from transformers import AutoTokenizer

    from agilerl_plugin_llm.rollout.env import make_rollout_env_factory
    from agilerl_plugin_llm.specs import LLMEnvSpec
    from agilerl_plugin_llm.testing import CHAT_TEMPLATE, build_tiny_model

    template = tmp_path / "tools.jinja"
    template.write_text(
        "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}({{ t.function.parameters.properties | list"
        " | join(',') }});{% endfor %}</tools>{% endif %}" + CHAT_TEMPLATE,
        encoding="utf-8",
    )
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "model"))
    for only, shown in ((None, "<tools>submit(word);hint();</tools>"), ("submit", "<tools>submit(word);</tools>")):
        spec = LLMEnvSpec(
            env_type="rollout", env_url=servers["mcp"].url, max_turns=1, chat_template_path=str(template), mcp_tool=only
        )
        factory, _ = make_rollout_env_factory(spec, tokenizer, max_model_len=1024, max_output_tokens=4)
        harness = factory()
        assert shown in tokenizer.decode(harness.reset(seed=0))
        harness.close()
