"""An MCP tool environment written directly against openenv-core (no agilerl code), for
``mcp_tool_env.yaml``: one tool, ``submit(word)``; reward is the word game's score of the word.

    python examples/openenv/mcp_word_server.py --port 8001
"""

from __future__ import annotations

import argparse
from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server import CallToolAction, MCPEnvironment, Observation, State, create_app


class PromptObservation(Observation):
    prompt: str = ""


class WordToolEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    TARGET = "one"

    def __init__(self) -> None:
        mcp = FastMCP("word-game")

        @mcp.tool()
        def submit(word: str) -> str:
            """Submit your word."""
            return "correct" if word.strip() == self.TARGET else "try again"

        super().__init__(mcp)
        self._state = State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> PromptObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        return PromptObservation(prompt=f"Call submit with the word {self.TARGET}.", done=False, reward=None)

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        obs = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction):
            word = str(action.arguments.get("word", "")).strip()
            letters = sum(ch in self.TARGET for ch in word) / len(word) if word else 0.0
            obs.reward = 0.5 * letters + 0.5 * (word == self.TARGET)
            obs.done = True
        return obs

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        raise ValueError("this environment only takes tool calls")

    @property
    def state(self) -> Any:
        return self._state


app = create_app(WordToolEnvironment, CallToolAction, PromptObservation, env_name="word_tools", max_concurrent_envs=64)

if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
