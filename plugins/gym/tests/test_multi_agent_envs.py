"""Vectorised PettingZoo envs: sync vs async (fork and spawn) agree step for step; agents that leave
early, agents with different spaces, AEC conversion and bad env names are handled."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

from agilerl.errors import AgileRLError
from agilerl_plugin_gym.multi_agent.vec_env import (
    AsyncPettingZooVecEnv,
    PettingZooEnvError,
    SyncPettingZooVecEnv,
    make_pz_env,
    make_single_pz_env,
)

HERE = Path(__file__).resolve().parent
RUNNERS = ("runner_0", "runner_1")


class RelayEnv(ParallelEnv):  # type: ignore[misc]
    """Two runners (Box obs, Discrete moves) race to position 4 and leave the episode when they get
    there; a coach (Discrete obs, Box action) stays until both arrive or time runs out."""

    metadata = {"name": "relay_v0"}

    def __init__(self, max_steps: int = 6) -> None:
        self.max_steps = max_steps
        self.possible_agents = [*RUNNERS, "coach_0"]
        self._obs_spaces: dict[str, spaces.Space] = {r: spaces.Box(-10, 10, (2,), np.float32) for r in RUNNERS}
        self._obs_spaces["coach_0"] = spaces.Discrete(4)
        self._act_spaces: dict[str, spaces.Space] = {r: spaces.Discrete(3) for r in RUNNERS}
        self._act_spaces["coach_0"] = spaces.Box(-1, 1, (2,), np.float32)
        self.rng = np.random.default_rng(0)

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_spaces[agent]

    def _observe(self) -> dict[str, Any]:
        obs: dict[str, Any] = {r: np.array([self.pos[r], self.t], np.float32) for r in RUNNERS if r in self.agents}
        if "coach_0" in self.agents:
            obs["coach_0"] = sum(r in self.agents for r in RUNNERS) + (self.t % 2)
        return obs

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        self.pos = {r: float(self.rng.integers(0, 3)) for r in RUNNERS}
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        rewards, terms, truncs = {}, {}, {}
        for r in RUNNERS:
            if r in self.agents:
                self.pos[r] += int(actions[r]) - 1
                rewards[r] = -abs(self.pos[r] - 4.0)
                terms[r] = self.pos[r] >= 4
        if "coach_0" in self.agents:
            rewards["coach_0"] = -float(np.abs(actions["coach_0"]).sum())
            terms["coach_0"] = all(terms.get(r, r not in self.agents) for r in RUNNERS)
        for a in self.agents:
            truncs[a] = self.t >= self.max_steps and not terms[a]
        obs = self._observe()
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, {a: {} for a in obs}


def relay_spec(**kw: Any) -> SimpleNamespace:
    base = {"name": "relay", "entrypoint": "test_multi_agent_envs:RelayEnv", "path": str(HERE), "env_config": {}}
    return SimpleNamespace(**{**base, **kw})


def _random_actions(env: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = env.num_envs
    out: dict[str, np.ndarray] = {}
    for a in env.possible_agents:
        space = env.action_space(a)
        if isinstance(space, spaces.Discrete):
            out[a] = rng.integers(0, space.n, size=n)
        else:
            out[a] = rng.uniform(-1, 1, size=(n, *space.shape)).astype(np.float32)
    return out


def _trace(env: Any, steps: int, seed: int = 3) -> list[Any]:
    rng = np.random.default_rng(seed)
    out: list[Any] = [env.reset(seed=seed)]
    for _ in range(steps):
        out.append(env.step(_random_actions(env, rng)))
    return out


def _assert_same(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        np.testing.assert_array_equal(a, b, err_msg=where)


def test_relay_sync_semantics() -> None:
    """Early leavers: zero obs, no action taken, acted False until their copy resets."""
    with make_pz_env(relay_spec(), num_envs=4, sync=True) as env:
        assert env.obs_shapes == {"runner_0": (2,), "runner_1": (2,), "coach_0": (4,)}
        obs, infos = env.reset(seed=1)
        assert obs["coach_0"].sum(axis=1).tolist() == [1.0] * 4  # one-hot Discrete observation
        rng = np.random.default_rng(0)
        saw_early_exit = saw_reset = False
        prev_active = infos["active"]
        for _ in range(60):
            obs, rew, term, _, infos = env.step(_random_actions(env, rng))
            for a in env.possible_agents:
                # Only agents alive before the step acted; dead ones earn nothing.
                np.testing.assert_array_equal(infos["acted"][a], prev_active[a])
                assert (rew[a][~infos["acted"][a]] == 0).all()
            for r in RUNNERS:
                left = term[r] & ~infos["episode_done"]
                if left.any():
                    saw_early_exit = True
                    # The runner's last observation comes with its exit; then it is inactive.
                    assert (obs[r][left][:, 0] >= 4).all()
                    assert not infos["active"][r][left].any()
                gone = ~infos["acted"][r] & ~infos["active"][r]
                assert (obs[r][gone] == 0).all()  # absent agents get zero observations
            if infos["episode_done"].any():
                saw_reset = True
                done = infos["episode_done"]
                for a in env.possible_agents:
                    assert infos["active"][a][done].all()  # new episode: everyone back
                assert (infos["final_obs"]["coach_0"][done].sum(axis=1) == 1).all()
            prev_active = infos["active"]
        assert saw_early_exit and saw_reset


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_async_matches_sync(context: str) -> None:
    """The async env (worker processes, shared memory) reproduces the sync env exactly; under
    ``spawn`` the spec is pickled and the env module re-imported in each worker."""
    with make_pz_env(relay_spec(), num_envs=5, sync=True) as sync_env:
        expected = _trace(sync_env, 40)
    env = make_pz_env(relay_spec(), num_envs=5, sync=False, context=context)
    assert isinstance(env, AsyncPettingZooVecEnv)
    with env:
        got = _trace(env, 40)
    _assert_same(expected, got)


def test_mpe_async_fork_matches_sync() -> None:
    spec = SimpleNamespace(name="mpe2.simple_speaker_listener_v4", env_config={"max_cycles": 10})
    with make_pz_env(spec, num_envs=3, sync=True) as env:
        assert isinstance(env, SyncPettingZooVecEnv)
        expected = _trace(env, 25)
        assert env.observation_spaces["speaker_0"].shape == (3,)
        assert env.observation_spaces["listener_0"].shape == (11,)
    with make_pz_env(spec, num_envs=3, sync=False, context="fork") as env:
        got = _trace(env, 25)
    _assert_same(expected, got)
    assert expected[10][4]["episode_done"].all()  # max_cycles=10: every copy ends at step 10


def test_aec_env_is_converted_to_parallel() -> None:
    spec = SimpleNamespace(name="ssl-aec", entrypoint="mpe2.simple_speaker_listener_v4:env", env_config={})
    env = make_single_pz_env(spec)
    assert isinstance(env, ParallelEnv)
    with make_pz_env(spec, num_envs=2, sync=True) as venv:
        obs, _ = venv.reset(seed=0)
        assert obs["listener_0"].shape == (2, 11)


def test_unknown_module_names_the_closest() -> None:
    spec = SimpleNamespace(name="mpe2.simple_speaker_listner_v4", env_config={})
    with pytest.raises(PettingZooEnvError, match=r"(?i)did you mean .mpe2.simple_speaker_listener_v4."):
        make_pz_env(spec, num_envs=2)


def test_bad_env_config_is_a_clear_error() -> None:
    spec = SimpleNamespace(name="mpe2.simple_speaker_listener_v4", env_config={"max_cycle": 5})
    with pytest.raises(AgileRLError, match="env_config"):
        make_pz_env(spec, num_envs=2, sync=False)


def test_env_config_files_read_as_for_gym_envs(tmp_path: Path) -> None:
    """One env_config loader for both makers: a JSON file is read as JSON, a missing file or one
    that does not parse is an error naming the field (the PettingZoo maker used to read every file as
    YAML and fail on a missing one with a bare FileNotFoundError)."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"max_cycles": 3}')
    env = make_single_pz_env(SimpleNamespace(name="mpe2.simple_speaker_listener_v4", env_config=str(cfg)))
    env.reset(seed=0)
    steps = 0
    while env.agents:
        env.step({a: env.action_space(a).sample() for a in env.agents})
        steps += 1
    assert steps == 3
    for bad, message in (
        (tmp_path / "missing.yaml", "neither a mapping nor an existing"),
        (tmp_path / "b.json", "parsed"),
    ):
        if bad.name == "b.json":
            bad.write_text("{not json")
        spec = SimpleNamespace(name="mpe2.simple_speaker_listener_v4", env_config=str(bad))
        with pytest.raises(PettingZooEnvError, match=f"environment.env_config: .*{message}"):
            make_single_pz_env(spec)


def test_seed_api_routes_to_make_pz_env() -> None:
    """``agilerl.models.make_pz_env`` and ``make_env(..., multi_agent=True)`` build this vec env from a GymEnvSpec."""
    from agilerl.models import make_env
    from agilerl.models import make_pz_env as seed_make_pz_env
    from agilerl.registry import ENV_TYPES
    from agilerl_plugin_gym.multi_agent.vec_env import PettingZooVecEnv

    spec = ENV_TYPES.spec_class("gym").model_validate(
        {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 2, "sync": True, "env_config": {"max_cycles": 5}}
    )
    for env in (seed_make_pz_env(spec), make_env(spec, multi_agent=True, seed=0)):
        with env:
            assert isinstance(env, PettingZooVecEnv) and env.num_envs == 2
            obs, _ = env.reset(seed=0)
            assert obs["speaker_0"].shape == (2, 3)


def test_make_single_env_multi_agent_uses_the_pettingzoo_builder(tmp_path: Path) -> None:
    """``make_single_env(spec, multi_agent=True)``: one ParallelEnv with env_config and env_wrappers
    applied (AEC entrypoints converted); a bad ``path`` is an error naming the field."""
    from agilerl.models import GymEnvSpec
    from agilerl.models.env import make_single_env

    spec = GymEnvSpec(name="mpe2.simple_speaker_listener_v4", env_config={"max_cycles": 4})
    env = make_single_env(spec, multi_agent=True)
    assert isinstance(env, ParallelEnv) and env.possible_agents == ["speaker_0", "listener_0"]
    env.reset(seed=0)
    steps, done = 0, False
    while not done and steps < 10:
        _, _, term, trunc, _ = env.step({a: env.action_space(a).sample() for a in env.agents})
        steps += 1
        done = all(term[a] or trunc[a] for a in term)
    assert steps == 4  # env_config reached parallel_env()
    aec = GymEnvSpec(name="ssl", entrypoint="mpe2.simple_speaker_listener_v4:env", custom=True)
    assert isinstance(make_single_env(aec, multi_agent=True), ParallelEnv)
    with pytest.raises(AgileRLError, match=r"environment\.path"):
        make_single_env(GymEnvSpec(name="ssl", path=str(tmp_path / "nope")), multi_agent=True)
