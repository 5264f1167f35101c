"""Validation-time checks of what the gym algorithms will be fed.

- :func:`check_env` / :func:`check_parallel_env`: a custom env (``entrypoint``, ``factory``,
  ``path`` or ``custom: true``) is made once and exercised the way SB3's ``check_env`` and
  PettingZoo's ``parallel_api_test`` do: ``reset`` returns ``(obs, info)``, ``step`` returns five
  values, every observation lies inside the declared space (shape, dtype, bounds), a sampled
  action is accepted, rewards are finite numbers. Each failure is one :class:`Problem` under
  ``environment``, so an env whose observations do not match its space is refused at validation,
  not an hour into the run. ``validation.check_env: false`` in the manifest skips it.
- :func:`batch_problems`: a batch no larger than what one rollout (on-policy) or the replay buffer
  and the step budget (off-policy) can hold; a larger one never takes a gradient step.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from collections.abc import Mapping
from numbers import Real
from typing import TYPE_CHECKING, Any

from agilerl.errors import AgileRLError, Problem, closest
from agilerl_plugin_gym.masking import MASK_KEY, MaskSource, check_masking
from agilerl_plugin_gym.multi_agent.names import resolve_module_name
from agilerl_plugin_gym.sections import ReplayBufferSpec

if TYPE_CHECKING:
    from agilerl.models.base import AlgorithmSpec
    from agilerl.models.manifest import TrainingManifest

#: Steps taken by the check (resetting on episode end).
CHECK_STEPS = 8
_HINT = " (validation.check_env: false skips this check)"


class EnvCheckError(Exception):
    """One way a custom env breaks the gymnasium / PettingZoo API."""


def is_custom(env: Any) -> bool:
    return bool(getattr(env, "entrypoint", None) or getattr(env, "factory", None) or getattr(env, "custom", False))


def wants_check(manifest: TrainingManifest) -> bool:
    validation = getattr(manifest, "validation", None)
    return is_custom(manifest.environment) and (validation is None or validation.check_env)


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None:
        return f"{type(value).__name__} shape {tuple(shape)} dtype {dtype}"
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) < 60 else shown[:57] + '...'}"


def _check_obs(obs: Any, space: Any, where: str) -> None:
    import numpy as np
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        arr = obs if isinstance(obs, np.ndarray) else None
        if arr is None:
            raise EnvCheckError(f"{where} returned {_describe(obs)}; the observation space {space} needs a numpy array")
        if arr.shape != space.shape:
            raise EnvCheckError(
                f"{where} returned an observation of shape {arr.shape}; the space declares {space.shape}"
            )
        if arr.dtype != space.dtype:
            raise EnvCheckError(f"{where} returned dtype {arr.dtype}; the observation space declares {space.dtype}")
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            raise EnvCheckError(f"{where} returned a non-finite observation (NaN or inf)")
    if not space.contains(obs):
        raise EnvCheckError(f"{where} returned an observation outside the declared space {space}: {_describe(obs)}")


def _check_reward(reward: Any, where: str) -> None:
    import numpy as np

    if isinstance(reward, np.ndarray) and reward.shape == ():
        reward = reward.item()
    if isinstance(reward, bool) or not isinstance(reward, (Real, np.number)):
        raise EnvCheckError(f"{where} returned reward {_describe(reward)}; a reward is a float")
    if not math.isfinite(float(reward)):
        raise EnvCheckError(f"{where} returned a non-finite reward ({reward})")


def _check_flag(value: Any, name: str, where: str) -> None:
    import numpy as np

    if not isinstance(value, (bool, np.bool_)):
        raise EnvCheckError(f"{where} returned {name} {_describe(value)}; it must be a bool")


def check_env(env: Any, steps: int = CHECK_STEPS) -> None:
    """Exercise a ``gymnasium.Env``; raise :class:`EnvCheckError` at the first API break."""
    import gymnasium as gym

    obs_space, act_space = getattr(env, "observation_space", None), getattr(env, "action_space", None)
    if not isinstance(obs_space, gym.spaces.Space):
        raise EnvCheckError(f"observation_space is {_describe(obs_space)}; it must be a gymnasium.spaces.Space")
    if not isinstance(act_space, gym.spaces.Space):
        raise EnvCheckError(f"action_space is {_describe(act_space)}; it must be a gymnasium.spaces.Space")
    out = _call(lambda: env.reset(seed=0), "reset(seed=0)")
    if not (isinstance(out, tuple) and len(out) == 2):
        raise EnvCheckError(f"reset() returned {_describe(out)}; gymnasium's reset returns (observation, info)")
    obs, info = out
    if not isinstance(info, dict):
        raise EnvCheckError(f"reset() returned info {_describe(info)}; it must be a dict")
    _check_obs(obs, obs_space, "reset()")
    act_space.seed(0)
    for i in range(steps):
        action = act_space.sample()
        where = f"step() (step {i + 1}, a sampled action)"
        out = _call(lambda a=action: env.step(a), where)
        if not (isinstance(out, tuple) and len(out) == 5):
            raise EnvCheckError(
                f"{where} returned {_describe(out)}; gymnasium's step returns "
                "(observation, reward, terminated, truncated, info)"
            )
        obs, reward, terminated, truncated, info = out
        _check_obs(obs, obs_space, where)
        _check_reward(reward, where)
        _check_flag(terminated, "terminated", where)
        _check_flag(truncated, "truncated", where)
        if not isinstance(info, dict):
            raise EnvCheckError(f"{where} returned info {_describe(info)}; it must be a dict")
        if terminated or truncated:
            _call(lambda: env.reset(), "reset()")


def check_parallel_env(env: Any, steps: int = CHECK_STEPS) -> None:
    """Exercise a PettingZoo ``ParallelEnv`` (reset/step dicts keyed by the live agents)."""
    out = _call(lambda: env.reset(seed=0), "reset(seed=0)")
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(x, dict) for x in out)):
        raise EnvCheckError(f"reset() returned {_describe(out)}; a ParallelEnv's reset returns (observations, infos)")
    obs, _ = out
    agents = list(getattr(env, "agents", []) or [])
    if not agents:
        raise EnvCheckError("env.agents is empty after reset()")
    if set(obs) != set(agents):
        raise EnvCheckError(f"reset() returned observations for {sorted(obs)}; env.agents is {sorted(agents)}")
    for agent in agents:
        _check_obs(obs[agent], env.observation_space(agent), f"reset() for agent {agent!r}")
    for i in range(steps):
        agents = list(env.agents)
        if not agents:
            _call(lambda: env.reset(), "reset()")
            agents = list(env.agents)
        actions = {}
        for agent in agents:
            space = env.action_space(agent)
            space.seed(i)
            actions[agent] = space.sample()
        where = f"step() (step {i + 1}, sampled actions)"
        out = _call(lambda a=actions: env.step(a), where)
        if not (isinstance(out, tuple) and len(out) == 5 and all(isinstance(x, dict) for x in out)):
            raise EnvCheckError(
                f"{where} returned {_describe(out)}; a ParallelEnv's step returns five dicts "
                "(observations, rewards, terminations, truncations, infos)"
            )
        obs, rewards, terms, truncs, _ = out
        for agent, o in obs.items():
            _check_obs(o, env.observation_space(agent), f"{where} for agent {agent!r}")
        for agent, r in rewards.items():
            _check_reward(r, f"{where} for agent {agent!r}")
        if all(terms.get(a, False) or truncs.get(a, False) for a in agents):
            _call(lambda: env.reset(), "reset()")


def _call(fn: Any, where: str) -> Any:
    try:
        return fn()
    except EnvCheckError:
        raise
    except Exception as exc:
        raise EnvCheckError(f"{where} raised {type(exc).__name__}: {exc}") from exc


def env_problems(env: Any, *, multi_agent: bool = False) -> list[Problem]:
    """:func:`check_env` (or :func:`check_parallel_env`) as validation problems."""
    try:
        (check_parallel_env if multi_agent else check_env)(env)
    except EnvCheckError as exc:
        return [Problem("environment", f"the custom env fails the env API check: {exc}{_HINT}")]
    return []


def close_quietly(env: Any) -> None:
    """Close an env validation built; a failing ``close()`` is not what any check is about."""
    close = getattr(env, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            pass


def make_problem(exc: Exception) -> Problem:
    """The problem of a custom env that could not be made: a ``GymEnvError`` under the field it names,
    anything else (the env's own code, a PettingZoo maker) under ``environment``."""
    from agilerl_plugin_gym.envs import GymEnvError  # deferred: gymnasium, loaded only when validation builds an env

    if isinstance(exc, GymEnvError):
        path, sep, message = str(exc).partition(": ")
        return Problem(path, message) if sep and path.startswith("environment") else Problem("environment", str(exc))
    return Problem("environment", f"making the custom env raised {type(exc).__name__}: {exc}{_HINT}")


def built_env_problems(env: Any, manifest: TrainingManifest, *, multi_agent: bool) -> list[Problem]:
    """The checks of a custom env already made (the API check, then its action masks)."""
    problems = env_problems(env, multi_agent=multi_agent)
    return problems or (_agent_mask_problems(env, manifest) if multi_agent else _mask_problems(env, manifest))


def make_and_check(manifest: TrainingManifest, *, multi_agent: bool) -> list[Problem]:
    """Make the manifest's custom env once (as the run will) and check it; [] when not custom."""
    if not wants_check(manifest):
        return []
    from agilerl_plugin_gym.envs import (
        make_single_env,  # deferred: gymnasium, loaded only when validation builds an env
    )

    try:
        env = make_single_env(manifest.environment, multi_agent=multi_agent)  # type: ignore[arg-type]
    except Exception as exc:
        return [make_problem(exc)]
    try:
        return built_env_problems(env, manifest, multi_agent=multi_agent)
    finally:
        close_quietly(env)


# --------------------------------------------------------------------------------------------------
# environment.env_config of a registered env (a gymnasium id or a PettingZoo module)
# --------------------------------------------------------------------------------------------------


def _constructor(env_spec: Any, *, multi_agent: bool) -> tuple[Any, set[str]]:
    """The callable a registered env's ``env_config`` goes to, and the names ``gym.make`` itself takes
    (None when the env is custom or cannot be found: making it reports that)."""
    if is_custom(env_spec) or getattr(env_spec, "env_type", "gym") != "gym":
        return None, set()
    try:
        if multi_agent:
            module = importlib.import_module(resolve_module_name(str(env_spec.name)))
            return getattr(module, "raw_env", None) or getattr(module, "parallel_env", None), set()
        import gymnasium as gym
        from gymnasium.envs.registration import load_env_creator

        registered = gym.spec(env_spec.env_id)
        entry = registered.entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        return creator, set(inspect.signature(gym.make).parameters) - {"id", "kwargs"}
    except Exception:  # not found or not importable: making the env says so in its own words
        return None, set()


def _signature(fn: Any) -> dict[str, inspect.Parameter] | None:
    try:
        params = dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    params.pop("self", None)
    return params


def _type_mismatch(value: Any, param: inspect.Parameter) -> str | None:
    """What the parameter's default (or its annotation) asks for, when ``value`` is not of it (None: it
    is, or no rule here). An int default without an ``int`` annotation takes any number
    (``goal_velocity=0`` is a float option)."""
    default, annotation = param.default, param.annotation
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(default, int) and annotation in (int, "int"):
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if isinstance(default, (int, float)):
        return None if number else "a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "a string"
    return None


def env_option_problems(env_spec: Any, *, multi_agent: bool) -> list[Problem]:
    """``environment.env_config`` values of a registered env whose type differs from its
    constructor's default for that option (``max_cycles: twenty``, ``continuous_actions: "yes"``):
    the constructor takes them, and the run fails at its first step or runs what was not meant."""
    options = getattr(env_spec, "env_config", None)
    if not isinstance(options, Mapping) or not options:
        return []
    fn, _ = _constructor(env_spec, multi_agent=multi_agent)
    params = _signature(fn) if fn is not None else None
    if not params:
        return []
    label = _label(env_spec, multi_agent=multi_agent)
    problems = []
    for key, value in options.items():
        param = params.get(str(key))
        if param is None or param.default in (inspect.Parameter.empty, None):
            continue
        wanted = _type_mismatch(value, param)
        if wanted:
            problems.append(Problem(
                f"environment.env_config.{key}",
                f"{label} takes {wanted} here (its default is {param.default!r}); got {_describe(value)}",
            ))  # fmt: skip
    return problems


def option_hint(env_spec: Any, exc: BaseException, *, multi_agent: bool) -> str:
    """A did-you-mean (and the options there are) for the option a constructor refused by name."""
    match = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
    fn, make_names = _constructor(env_spec, multi_agent=multi_agent)
    params = _signature(fn) if fn is not None and match else None
    if not match or params is None:
        return ""
    names = sorted(
        {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} | make_names
    )  # fmt: skip
    hint = closest(match.group(1), names)
    return f"; did you mean {hint!r}?" if hint else (f"; its options are {', '.join(names)}" if names else "")


def _label(env_spec: Any, *, multi_agent: bool) -> str:
    return str(getattr(env_spec, "name", "") if multi_agent else getattr(env_spec, "env_id", "the env"))


def env_config_problem(env_spec: Any, exc: BaseException, *, multi_agent: bool) -> Problem:
    """``environment.env_config`` refused by the env's constructor, said at validation (at train it
    would be a worker's traceback): an unknown key (with did-you-mean), or a value of the wrong type."""
    cause = exc.__cause__ if isinstance(exc.__cause__, (TypeError, ValueError)) else exc
    message = str(cause).split(" was raised from the environment creator")[0]
    return Problem(
        "environment.env_config",
        f"{_label(env_spec, multi_agent=multi_agent)} does not take these options: {type(cause).__name__}: "
        f"{message}{option_hint(env_spec, cause, multi_agent=multi_agent)}",
    )


def first_steps_problem(env: Any, env_spec: Any, *, multi_agent: bool, steps: int = CHECK_STEPS) -> Problem | None:
    """A registered env built with ``env_config`` is reset and stepped a few times with sampled
    actions: an option whose value its constructor took but its ``reset``/``step`` cannot use fails
    here, at validation, instead of in a worker at train. None when it runs."""
    if not getattr(env_spec, "env_config", None) or is_custom(env_spec):
        return None
    where = "reset()"
    try:
        env.reset(seed=0)
        if multi_agent and not env.agents:
            return Problem("environment.env_config", f"{_label(env_spec, multi_agent=True)} has no agents after "
                                                     "reset() with these options; check env_config's values")  # fmt: skip
        for i in range(steps):
            where = f"step() {i + 1}"
            if multi_agent:
                if not env.agents:
                    env.reset()
                out = env.step({a: env.action_space(a).sample() for a in env.agents})
                done = not env.agents or all(out[2].get(a) or out[3].get(a) for a in out[2])
            else:
                out = env.step(env.action_space.sample())
                done = bool(out[2] or out[3])
            if done:
                where = "reset()"
                env.reset()
    except Exception as exc:
        return Problem(
            "environment.env_config",
            f"{_label(env_spec, multi_agent=multi_agent)} fails with these options: its {where} raised "
            f"{type(exc).__name__}: {exc}; check env_config's values (their types and ranges)",
        )
    return None


def _mask_problems(env: Any, manifest: TrainingManifest) -> list[Problem]:
    """The env's action masks and the algorithm's ``action_masking`` agree (masking.py), checked at
    validation rather than when training starts."""
    spec = manifest.algorithm
    obs, info = env.reset(seed=0)
    supported = "action_masking" in type(spec).model_fields
    try:
        check_masking(MaskSource.of(env, obs, info), bool(getattr(spec, "action_masking", False)), spec.name,
                      supported=supported)  # fmt: skip
    except AgileRLError as exc:
        return [Problem("algorithm.action_masking", str(exc).removeprefix("algorithm.action_masking: "))]
    return []


def _agent_mask_problems(env: Any, manifest: TrainingManifest) -> list[Problem]:
    """The PettingZoo env's per-agent masks (an observation's ``action_mask`` key or
    ``infos[agent]["action_mask"]``) and the algorithm's ``action_masking`` agree."""
    spec = manifest.algorithm
    obs, infos = env.reset(seed=0)
    kind = None
    for agent, value in obs.items():
        if isinstance(value, Mapping) and MASK_KEY in value:
            kind = "obs"
            break
        info = infos.get(agent) if isinstance(infos, Mapping) else None
        if isinstance(info, Mapping) and MASK_KEY in info:
            kind = "info"
    supported = getattr(type(spec), "masks_actions", False)  # MADDPG/MATD3 have the field only to refuse it
    try:
        check_masking(MaskSource(kind, vector=False), bool(getattr(spec, "action_masking", False)), spec.name,
                      supported=supported, masking_sibling="IPPO")  # fmt: skip
    except AgileRLError as exc:
        return [Problem("algorithm.action_masking", str(exc).removeprefix("algorithm.action_masking: "))]
    return []


def batch_problems(spec: AlgorithmSpec, manifest: TrainingManifest) -> list[Problem]:
    """A batch that one rollout (on-policy) or the buffer and step budget (off-policy) can fill."""
    regime = type(spec).regime
    batch = getattr(spec, "batch_size", None)
    if not isinstance(batch, int):  # an algorithm without minibatches (A2C refuses batch_size)
        return []
    if regime == "on_policy":
        learn_step = getattr(spec, "learn_step", None)
        if isinstance(learn_step, int) and batch > learn_step:
            return [Problem(
                "algorithm.batch_size",
                f"{batch} is larger than one rollout (algorithm.learn_step {learn_step} env steps); "
                "make batch_size <= learn_step",
            )]  # fmt: skip
    elif regime == "off_policy":
        buffer = manifest.replay_buffer or ReplayBufferSpec()
        if batch > buffer.max_size:
            return [Problem(
                "algorithm.batch_size",
                f"{batch} is larger than the replay buffer (replay_buffer.max_size {buffer.max_size}); "
                "no batch could ever be sampled",
            )]  # fmt: skip
        if batch > manifest.training.max_steps:
            return [Problem(
                "algorithm.batch_size",
                f"{batch} is larger than the whole step budget (training.max_steps {manifest.training.max_steps}); "
                "the buffer never holds a batch, so no gradient step would be taken",
            )]  # fmt: skip
    return []


__all__ = [
    "EnvCheckError",
    "batch_problems",
    "built_env_problems",
    "check_env",
    "check_parallel_env",
    "close_quietly",
    "env_config_problem",
    "env_option_problems",
    "env_problems",
    "first_steps_problem",
    "make_and_check",
    "make_problem",
]
