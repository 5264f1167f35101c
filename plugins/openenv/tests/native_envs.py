"""OpenEnv servers written directly against openenv-core (not our serve-env): a guessing game, an env
whose action takes an integer (so text can be rejected), and an MCP tool env."""

from __future__ import annotations

from typing import Any

from agilerl_plugin_openenv._openenv import env_server

_s = env_server()


class GuessAction(_s.Action):  # type: ignore[misc,name-defined]
    guess: str


class GuessObservation(_s.Observation):  # type: ignore[misc,name-defined]
    prompt: str = ""
    feedback: str = ""


class GuessEnvironment(_s.Environment):  # type: ignore[misc,name-defined]
    """Guess the animal; reward 1 for 'cat' (one turn)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = _s.State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        self._state = _s.State(episode_id=episode_id, step_count=0)
        return GuessObservation(prompt=f"Guess the animal (seed {seed}).", feedback="", done=False, reward=None)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        right = action.guess.strip() == "cat"
        return GuessObservation(
            prompt="", feedback="right" if right else "wrong", done=True, reward=1.0 if right else 0.0
        )

    @property
    def state(self) -> Any:
        return self._state


class NumberAction(_s.Action):  # type: ignore[misc,name-defined]
    number: int


class NumberObservation(_s.Observation):  # type: ignore[misc,name-defined]
    prompt: str = ""
    error: str = ""


class NumberEnvironment(_s.Environment):  # type: ignore[misc,name-defined]
    """Say a number; the action field is an int, so free text fails validation on the server."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = _s.State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> NumberObservation:
        return NumberObservation(prompt="Say 7.", done=False, reward=None)

    def step(self, action: NumberAction, timeout_s: float | None = None, **kwargs: Any) -> NumberObservation:
        if action.number < 0:  # a valid action the env refuses: it says so in its ``error`` field
            return NumberObservation(prompt="Say 7.", error="negative numbers are not allowed", done=False, reward=0.0)
        return NumberObservation(prompt="", done=True, reward=float(action.number == 7))

    @property
    def state(self) -> Any:
        return self._state


class PromptObservation(_s.Observation):  # type: ignore[misc,name-defined]
    prompt: str = ""


class WordToolEnvironment(_s.MCPEnvironment):  # type: ignore[misc,name-defined]
    """An MCP tool env: one tool, ``submit(word)``; reward 1 when the word is 'cat'."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        from fastmcp import FastMCP

        mcp = FastMCP("words")

        @mcp.tool()
        def submit(word: str) -> str:
            """Submit a word."""
            return "correct" if word.strip() == "cat" else f"{word!r} is wrong"

        super().__init__(mcp)
        self._state = _s.State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> PromptObservation:
        return PromptObservation(prompt="Call submit with the animal that says meow.", done=False, reward=None)

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        obs = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, _s.CallToolAction):  # the reward comes from the env, as in any MCP env
            obs.reward = 1.0 if action.arguments.get("word", "").strip() == "cat" else 0.0
            obs.done = True
        return obs

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        raise ValueError("only MCP actions")

    @property
    def state(self) -> Any:
        return self._state


def app(env_cls: Any, action_cls: Any, obs_cls: Any, max_concurrent_envs: int = 4) -> Any:
    return _s.create_app(
        env_cls, action_cls, obs_cls, env_name=env_cls.__name__, max_concurrent_envs=max_concurrent_envs
    )


class SlowResetEnvironment(GuessEnvironment):
    """Resets take a moment and record how many ran at once (for ``max_concurrent_resets``)."""

    lock = __import__("threading").Lock()
    running = 0
    most = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        cls = type(self)
        with cls.lock:
            cls.running += 1
            cls.most = max(cls.most, cls.running)
        try:
            __import__("time").sleep(0.05)  # long enough for concurrent resets to overlap
            return super().reset(seed=seed, episode_id=episode_id, **kwargs)
        finally:
            with cls.lock:
                cls.running -= 1
