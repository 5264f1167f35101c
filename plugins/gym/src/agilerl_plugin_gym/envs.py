"""Environment construction from a :class:`GymEnvSpec` (public API).

* :func:`make_gym_env` — a gymnasium vector env (``AsyncVectorEnv`` unless ``sync: true``).
* :func:`make_single_env` — one (non-vectorised) env; a PettingZoo ``ParallelEnv`` with
  ``multi_agent=True``.
* :func:`make_env` — the factory registered for ``env_type: gym``; ``multi_agent=True`` hands over to
  ``agilerl_plugin_gym.multi_agent.vec_env:make_pz_env``.

Vector envs use Gymnasium 1.x's default *next-step* autoreset: the step after an episode ends
returns the reset observation (reward 0) and ignores the action. The algorithms in this plugin drop
that transition (:class:`agilerl_plugin_gym.buffers.RolloutBuffer` masks it; off-policy collection
does not store it).

Every problem with the spec is raised here, in the main process and before any worker starts, as
:class:`GymEnvError` naming the manifest field and the fix.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from agilerl.errors import AgileRLError, closest
from agilerl.imports import import_object
from agilerl_plugin_gym.env_config import add_env_path, load_env_config, resolve_wrappers
from agilerl_plugin_gym.env_spec import GymEnvSpec, cpu_cores
from agilerl_plugin_gym.multi_agent.vec_env import make_single_pz_env

log = logging.getLogger("agilerl.gym.envs")  # under "agilerl": the CLI shows it

__all__ = ["GymEnvError", "check_gym_id", "make_env", "make_gym_env", "make_single_env", "resolve_import"]


class GymEnvError(AgileRLError):
    """The environment section names something that cannot be made."""


def resolve_import(path: str, field: str) -> Any:
    """Import ``module:attr`` or ``module.attr``; a :class:`GymEnvError` naming ``field`` if it fails."""
    return import_object(
        path, what=field, error=GymEnvError, dotted_ok=True,
        hint="Check the spelling, that the package is installed, or set environment.path to its directory.",
    )  # fmt: skip


def check_gym_id(env_id: str, field: str = "environment.name") -> None:
    """Raise :class:`GymEnvError` with a did-you-mean when ``env_id`` is not in gymnasium's registry."""
    if ":" in env_id:  # "module:EnvId" imports the module that registers the id first
        module_name, _, bare = env_id.partition(":")
        resolve_import(f"{module_name}:__name__", field)
        env_id = bare
    if env_id in gym.registry:
        return
    if _is_pettingzoo_module(env_id):
        raise GymEnvError(
            f"{field}: {env_id!r} is a PettingZoo (multi-agent) environment, not a gymnasium one; "
            "train it with a multi-agent algorithm (IPPO, MADDPG, MATD3), or give a gymnasium id "
            "for this single-agent algorithm."
        )
    ids = list(gym.registry)
    hint = closest(env_id, ids, cutoff=0.5)
    msg = f"{field}: {env_id!r} is not a registered gymnasium environment"
    msg += f"; did you mean {hint!r}?" if hint else "."
    msg += " For your own env class set environment.entrypoint: 'module:Class' (and custom: true)."
    raise GymEnvError(msg)


def _is_pettingzoo_module(name: str) -> bool:
    """``name`` is an importable module with ``parallel_env()`` (e.g. ``mpe2.simple_speaker_listener_v4``).

    Only dotted names of identifiers are tried (a gym id such as ``CartPol-v1`` is never imported),
    and any failure to import counts as "no": this only chooses which error message to give.
    """
    if "." not in name or not all(part.isidentifier() for part in name.split(".")):
        return False
    try:
        if importlib.util.find_spec(name) is None:
            return False
        module = importlib.import_module(name)
    except Exception:  # a missing parent package, or anything the module raises while importing
        return False
    return callable(getattr(module, "parallel_env", None))


def _maker(spec: GymEnvSpec) -> Callable[[], gym.Env[Any, Any]]:
    """A zero-argument function that makes one raw env, after checking every name it uses."""
    add_env_path(spec, GymEnvError)
    cfg = load_env_config(spec, GymEnvError)
    if spec.factory:
        fn = resolve_import(spec.factory, "environment.factory")
        return partial(fn, spec.entrypoint, **cfg) if spec.entrypoint else partial(fn, **cfg)
    if spec.entrypoint:
        if ":" in spec.entrypoint or (spec.custom and "." in spec.entrypoint):
            cls = resolve_import(spec.entrypoint, "environment.entrypoint")
            return partial(cls, **cfg)
        check_gym_id(spec.entrypoint, "environment.entrypoint")
        return partial(gym.make, spec.entrypoint, **cfg)
    if spec.custom:
        raise GymEnvError("environment.entrypoint: a custom env needs entrypoint: 'module:Class' (or a factory)")
    check_gym_id(spec.env_id)
    return partial(gym.make, spec.env_id, **cfg)


_mujoco_routed = False


def _uses_mujoco(spec: GymEnvSpec) -> bool:
    """Whether the env is a MuJoCo one (its registered entry point, or the import path given)."""
    target = spec.factory or spec.entrypoint or spec.env_id
    if ":" not in target and "." not in target:
        try:
            target = str(gym.spec(target).entry_point)
        except Exception:
            return False
    return "mujoco" in target.lower()


def _route_mujoco_warnings(spec: GymEnvSpec) -> None:
    """MuJoCo's default warning handler appends to ``MUJOCO_LOG.TXT`` in the working directory (a
    deprecated XML attribute in a gymnasium model is enough): send its warnings to the log instead."""
    global _mujoco_routed
    if _mujoco_routed or not _uses_mujoco(spec) or importlib.util.find_spec("mujoco") is None:
        return
    import mujoco

    mujoco.set_mju_user_warning(lambda msg: log.warning("MuJoCo: %s", str(msg).strip()))
    _mujoco_routed = True


class CastObservation(gym.ObservationWrapper):  # type: ignore[type-arg]
    """Cast a float ``Box`` observation to ``environment.default_type`` (float32 by default).

    gymnasium's ``DtypeObservation`` builds the new space from the float64 bounds, and ``Box`` then
    warns on every env made (``Box low's precision lowered by casting to float32``: every MuJoCo env,
    on every validate and train). The bounds are cast here first, so the space is built in its own
    dtype and says nothing; what the cast does to values is the same."""

    def __init__(self, env: gym.Env[Any, Any], dtype: np.dtype[Any]) -> None:
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Box)
        self.dtype = np.dtype(dtype)
        with np.errstate(over="ignore"):  # a finite float64 bound beyond float32's range becomes inf
            low, high = space.low.astype(self.dtype), space.high.astype(self.dtype)
        self.observation_space = gym.spaces.Box(low, high, space.shape, self.dtype)

    def observation(self, observation: Any) -> Any:
        return np.asarray(observation, dtype=self.dtype)


def _single(
    spec: GymEnvSpec,
    make_raw: Callable[[], gym.Env[Any, Any]],
    wrappers: list[tuple[Callable[..., Any], dict[str, Any]]],
) -> gym.Env[Any, Any]:
    _route_mujoco_warnings(spec)
    env = make_raw()
    if not isinstance(env, gym.Env):
        raise GymEnvError(
            f"environment: the entrypoint/factory returned {type(env).__name__}, not a gymnasium.Env "
            "(for PettingZoo envs use a multi-agent algorithm)"
        )
    obs_space = env.observation_space
    want = np.dtype(spec.default_type)
    if isinstance(obs_space, gym.spaces.Box) and obs_space.dtype.kind == "f" and obs_space.dtype != want:
        env = CastObservation(env, want)
    for wrapper, kwargs in wrappers:
        env = wrapper(env, **kwargs)
    return env


def make_single_env(spec: GymEnvSpec, *, multi_agent: bool = False) -> Any:
    """Create a single (non-vectorised) environment: a ``gymnasium.Env`` (or a PettingZoo
    ``ParallelEnv`` when ``multi_agent``), wrapped with ``env_wrappers``."""
    if multi_agent:
        return _make_pz_single(spec)
    make_raw = _maker(spec)
    return _single(spec, make_raw, resolve_wrappers(spec.env_wrappers, "environment.env_wrappers", GymEnvError))


def _make_pz_single(spec: GymEnvSpec) -> Any:
    # One builder of single PettingZoo envs, shared with the vector env; imported here so that
    # single-agent use never imports the multi-agent package.

    add_env_path(spec, GymEnvError)  # checks that environment.path is a directory (a GymEnvError naming the field)
    return make_single_pz_env(spec)


def make_gym_env(
    spec: GymEnvSpec,
    extra_wrappers: list[type] | None = None,
    wrappers: Sequence[tuple[Any, dict[str, Any]] | str | Callable[..., Any]] | None = None,
) -> gym.vector.VectorEnv[Any, Any, Any]:
    """Instantiate the vectorised gym environment.

    :param spec: the environment section.
    :param extra_wrappers: wrapper classes applied (without arguments) to each env, after the
        manifest's ``env_wrappers``.
    :param wrappers: more wrappers, each ``(class_or_path, kwargs)``, an import path or a callable,
        applied after ``env_wrappers`` and before ``extra_wrappers``.
    :returns: ``SyncVectorEnv`` when ``spec.use_sync`` else ``AsyncVectorEnv`` (next-step autoreset).
    """
    make_raw = _maker(spec)
    wrapper_list = resolve_wrappers(spec.env_wrappers, "environment.env_wrappers", GymEnvError)
    wrapper_list += resolve_wrappers(wrappers, "wrappers", GymEnvError)
    wrapper_list += [(w, {}) for w in extra_wrappers or ()]
    thunk = partial(_single, spec, make_raw, wrapper_list)
    # Make one env here first: a constructor or wrapper that fails does so in this process with a
    # readable error, not inside a worker.
    try:
        probe = thunk()
    except AgileRLError:
        raise
    except Exception as exc:
        raise GymEnvError(f"environment {spec.label!r}: creating the env failed: {type(exc).__name__}: {exc}") from exc
    fns = [thunk] * spec.num_envs
    if spec.sync is None and spec.use_sync and spec.num_envs > 1:
        log.info(
            "environment: %d envs step in one process (SyncVectorEnv): more envs than this machine's %d CPU "
            "cores; set environment.sync: false for a process per env",
            spec.num_envs, cpu_cores(),
        )  # fmt: skip
    if spec.use_sync:
        # Reuse the probe as the first env instead of throwing it away.
        return gym.vector.SyncVectorEnv([lambda: probe, *fns[1:]])
    probe.close()
    return gym.vector.AsyncVectorEnv([partial(_in_worker, thunk)] * spec.num_envs, shared_memory=True)


def _in_worker(thunk: Callable[[], Any]) -> Any:
    """Make an env inside an ``AsyncVectorEnv`` worker that ignores Ctrl-C.

    A terminal's Ctrl-C reaches the whole process group; the training loop defers it to a
    consistent point (and writes a checkpoint) only if the workers keep stepping until then.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return thunk()


def make_env(
    spec: GymEnvSpec,
    *,
    multi_agent: bool = False,
    seed: int | None = None,
    extra_wrappers: list[type] | None = None,
    wrappers: Sequence[Any] | None = None,
    **kwargs: Any,
) -> Any:
    """The ``env_type: gym`` factory behind :func:`agilerl.models.env.make_env`.

    ``multi_agent=True`` builds the PettingZoo vector env (``make_pz_env``). ``seed`` seeds the
    action space; episodes are seeded by the first ``reset(seed=...)``, which the strategies do.
    """
    if multi_agent:
        import inspect

        from agilerl.registry import resolve

        make_pz_env = resolve("agilerl_plugin_gym.multi_agent.vec_env:make_pz_env", "make_pz_env")
        given = {"extra_wrappers": extra_wrappers, "wrappers": wrappers, "seed": seed, **kwargs}
        params = inspect.signature(make_pz_env).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            given = {k: v for k, v in given.items() if k in params}
        return make_pz_env(spec, **given)
    env = make_gym_env(spec, extra_wrappers=extra_wrappers, wrappers=wrappers)
    if seed is not None:
        env.action_space.seed(seed)
    return env
