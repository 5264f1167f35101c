"""OpenEnv servers written directly against openenv-core's ``create_app`` (no agilerl code), as a user
would meet them: the three the tests train on,

* :class:`WordToolEnvironment`: an MCP tool env (tools ``submit(word)`` and ``hint()``);
* :class:`NumberEnvironment`: an integer action (``number: int``), so free text is rejected;
* :class:`GridEnvironment`: a multi-field observation (a grid, a position, a goal, legal moves, a
  message) and a choice action (``move: up | down | left | right``);

and two small ones for the source's own behaviour (:class:`GuessEnvironment`, :class:`SlowResetEnvironment`).

Rewards are dense on purpose: a tiny random policy must find some signal in a few GRPO steps.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Literal

from pydantic import Field

from agilerl_plugin_openenv._openenv import env_server

_s = env_server()


def letters_score(reply: str, target: str) -> float:
    """Half for the share of the reply made of the target's letters, half for whole copies of it."""
    text = reply.strip()
    if not text:
        return 0.0
    in_letters = sum(ch in set(target) for ch in text) / len(text)
    coverage = min(1.0, text.count(target) * len(target) / len(text))
    return 0.5 * in_letters + 0.5 * coverage


class _Stateful(_s.Environment):  # type: ignore[misc,name-defined]
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = _s.State(episode_id=None, step_count=0)

    @property
    def state(self) -> Any:
        return self._state


# --------------------------------------------------------------------------------------------------
# 1. an MCP tool env
# --------------------------------------------------------------------------------------------------


class PromptObservation(_s.Observation):  # type: ignore[misc,name-defined]
    prompt: str = ""


class WordToolEnvironment(_s.MCPEnvironment):  # type: ignore[misc,name-defined]
    """Call ``submit(word)`` with the word ``one``; ``submit`` refuses words with spaces (a tool error)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        from fastmcp import FastMCP

        mcp = FastMCP("words")

        @mcp.tool()
        def submit(word: str) -> str:
            """Submit your answer: a single word."""
            if " " in word.strip():
                raise ValueError("one word only, without spaces")
            return "correct" if word.strip() == "one" else f"{word.strip()!r} is not it"

        @mcp.tool()
        def hint() -> str:
            """A hint about the word."""
            return "It is a number below two."

        super().__init__(mcp)
        self._state = _s.State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> PromptObservation:
        self._state = _s.State(episode_id=episode_id, step_count=0)
        return PromptObservation(prompt="Which word? Say one.", done=False, reward=None)

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        obs = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, _s.CallToolAction) and action.tool_name == "submit":
            # The reward comes from the env, as in any MCP env; none when the tool refused the call.
            obs.reward = None if obs.error else letters_score(str(action.arguments.get("word", "")), "one")
            obs.done = not obs.error
        return obs

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        raise ValueError("only MCP actions")

    @property
    def state(self) -> Any:
        return self._state


# --------------------------------------------------------------------------------------------------
# 2. an integer action
# --------------------------------------------------------------------------------------------------


class NumberAction(_s.Action):  # type: ignore[misc,name-defined]
    number: int = Field(le=1000)  # the client does not check bounds: 5000 is rejected by the server


class NumberObservation(_s.Observation):  # type: ignore[misc,name-defined]
    prompt: str = ""
    error: str = ""


class NumberEnvironment(_Stateful):
    """Say 7: reward 1 - |n - 7| / 10 (at least 0). Negative numbers are refused in ``error``."""

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> NumberObservation:
        self._state = _s.State(episode_id=episode_id, step_count=0)
        return NumberObservation(prompt="Say 7.", done=False, reward=None)

    def step(self, action: NumberAction, timeout_s: float | None = None, **kwargs: Any) -> NumberObservation:
        self._state.step_count += 1
        if action.number < 0:  # a valid action the env refuses: it says so in its ``error`` field
            return NumberObservation(prompt="Say 7.", error="negative numbers are not allowed", done=False, reward=0.0)
        return NumberObservation(prompt="", done=True, reward=max(0.0, 1.0 - abs(action.number - 7) / 10))


# --------------------------------------------------------------------------------------------------
# 3. a multi-field observation
# --------------------------------------------------------------------------------------------------


class GridAction(_s.Action):  # type: ignore[misc,name-defined]
    move: Literal["up", "down", "left", "right"]


class GridObservation(_s.Observation):  # type: ignore[misc,name-defined]
    grid: list[list[str]] = []
    position: list[int] = []
    goal: list[int] = []
    legal_moves: list[str] = []
    message: str = ""


class GridEnvironment(_Stateful):
    """A 3x3 grid: walk to the goal. Reward 1 for a step onto the goal, 0.5 closer, 0 otherwise."""

    MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

    def __init__(self) -> None:
        super().__init__()
        self.pos, self.goal = [1, 1], [0, 1]

    def _obs(self, message: str, reward: float | None, done: bool) -> GridObservation:
        grid = [["." for _ in range(3)] for _ in range(3)]
        grid[self.goal[0]][self.goal[1]] = "G"
        grid[self.pos[0]][self.pos[1]] = "@"
        legal = [m for m, (dr, dc) in self.MOVES.items() if 0 <= self.pos[0] + dr < 3 and 0 <= self.pos[1] + dc < 3]
        return GridObservation(grid=grid, position=list(self.pos), goal=list(self.goal), legal_moves=legal,
                               message=message, reward=reward, done=done)  # fmt: skip

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GridObservation:
        self._state = _s.State(episode_id=episode_id, step_count=0)
        self.pos, self.goal = [1, 1], [0, 1]  # the goal is straight up
        return self._obs("Walk to G.", None, False)

    def step(self, action: GridAction, timeout_s: float | None = None, **kwargs: Any) -> GridObservation:
        self._state.step_count += 1
        before = abs(self.pos[0] - self.goal[0]) + abs(self.pos[1] - self.goal[1])
        dr, dc = self.MOVES[action.move]
        self.pos = [min(2, max(0, self.pos[0] + dr)), min(2, max(0, self.pos[1] + dc))]
        after = abs(self.pos[0] - self.goal[0]) + abs(self.pos[1] - self.goal[1])
        if after == 0:
            return self._obs("You reached G.", 1.0, True)
        return self._obs("Keep going.", 0.5 if after < before else 0.0, False)


# --------------------------------------------------------------------------------------------------
# small ones
# --------------------------------------------------------------------------------------------------


class GuessAction(_s.Action):  # type: ignore[misc,name-defined]
    guess: str


class GuessObservation(_s.Observation):  # type: ignore[misc,name-defined]
    prompt: str = ""
    feedback: str = ""


class GuessEnvironment(_Stateful):
    """Guess the animal; reward 1 for 'cat' (one turn)."""

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        self._state = _s.State(episode_id=episode_id, step_count=0)
        return GuessObservation(prompt=f"Guess the animal (seed {seed}).", feedback="", done=False, reward=None)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        right = action.guess.strip() == "cat"
        return GuessObservation(prompt="", feedback="right" if right else "wrong", done=True, reward=float(right))


class SlowResetEnvironment(GuessEnvironment):
    """Resets take a moment and record how many ran at once (for ``max_concurrent_resets``)."""

    lock = threading.Lock()
    running = 0
    most = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        cls = type(self)
        with cls.lock:
            cls.running += 1
            cls.most = max(cls.most, cls.running)
        try:
            time.sleep(0.05)  # long enough for concurrent resets to overlap
            return super().reset(seed=seed, episode_id=episode_id, **kwargs)
        finally:
            with cls.lock:
                cls.running -= 1


class RequireAuth:
    """ASGI middleware: 403 unless the request carries ``Authorization: Bearer <token>`` or ``?token=``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers") or [])
            query = scope.get("query_string", b"").decode()
            if (
                headers.get(b"authorization", b"").decode() != f"Bearer {self.token}"
                and f"token={self.token}" not in query
            ):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.http.response.start", "status": 403, "headers": []})
                    await send({"type": "websocket.http.response.body", "body": b""})
                else:
                    await send({"type": "http.response.start", "status": 403, "headers": []})
                    await send({"type": "http.response.body", "body": b""})
                return
        await self.app(scope, receive, send)


def app(env_cls: Any, action_cls: Any, obs_cls: Any, max_concurrent_envs: int = 4) -> Any:
    return _s.create_app(
        env_cls, action_cls, obs_cls, env_name=env_cls.__name__, max_concurrent_envs=max_concurrent_envs
    )


#: The three servers the training tests use: name -> (environment, action, observation).
SERVERS: dict[str, tuple[Any, Any, Any]] = {
    "mcp": (WordToolEnvironment, _s.CallToolAction, PromptObservation),
    "integer": (NumberEnvironment, NumberAction, NumberObservation),
    "multi_field": (GridEnvironment, GridAction, GridObservation),
}


def server_app(name: str, max_concurrent_envs: int = 4) -> Any:
    env_cls, action_cls, obs_cls = SERVERS[name]
    return app(env_cls, action_cls, obs_cls, max_concurrent_envs)
