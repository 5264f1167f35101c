"""Vectorised PettingZoo parallel environments: ``num_envs`` copies stepped as one.

Every call takes and returns per-agent arrays with a leading ``num_envs`` axis, for every agent in
``possible_agents`` whether or not it is alive in a given copy:

* ``reset(seed=None) -> (obs, infos)``
* ``step(actions) -> (obs, rewards, terminations, truncations, infos)``

``obs[agent]`` is float32 ``(num_envs, *obs_shape)`` (Discrete observations one-hot, other
non-Box spaces flattened); ``rewards[agent]`` float32 ``(num_envs,)``; ``terminations`` /
``truncations`` bool ``(num_envs,)``. Agents that left an episode early get zero observations,
zero rewards and ``acted`` False until their copy resets. ``infos`` holds arrays, not PettingZoo's
per-agent info dicts (the async workers do not ship those):

* ``acted[agent]`` (step only): the agent was alive and acted in this step (store its transition);
* ``active[agent]``: the agent is alive in the returned observation (it acts next step);
* ``episode_done`` (num_envs,): the copy's episode ended in this step and the copy was reset, so
  ``obs`` already holds the first observation of the next episode;
* ``final_obs[agent]``: the last observation of the episode that ended, where ``episode_done``;
* ``action_mask[agent]`` (num_envs, actions) bool, only when the env reports action masks (the
  ``action_mask`` key of a Dict observation, PettingZoo's convention, or ``infos[agent]["action_mask"]``):
  the actions allowed in the returned observation (all of them for an agent that reported none,
  e.g. one out of the episode). :attr:`PettingZooVecEnv.mask_kind` says which source, if any.

Observations with an ``action_mask`` key reach the policy without it (``{"observation", "action_mask"}``
becomes the ``observation`` part alone: :func:`agilerl_plugin_gym.masking.policy_space`), and
``observation_spaces`` describes them so.

Two implementations share that contract and the per-copy logic (:class:`_Slot`):
:class:`SyncPettingZooVecEnv` steps the copies in this process; :class:`AsyncPettingZooVecEnv`
steps them in worker processes (several copies per worker, so a small machine is not drowned in
processes), with observations, rewards, flags and actions in shared memory: the pipe carries only a
one-word command per step. Both ``fork`` and ``spawn`` start methods work; under ``spawn`` the env
spec and wrappers are pickled to the workers, so custom factories and wrappers must be importable.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from agilerl.errors import AgileRLError, closest
from agilerl.imports import import_object
from agilerl_plugin_gym.env_config import add_env_path, load_env_config, resolve_wrappers
from agilerl_plugin_gym.masking import MASK_KEY, policy_observation, policy_space
from agilerl_plugin_gym.multi_agent.names import resolve_module_name

WrapperLike = tuple[Any, dict[str, Any]] | str | Callable[..., Any]


class PettingZooEnvError(AgileRLError):
    """A PettingZoo environment could not be found, imported or built."""


# --------------------------------------------------------------------------------------------------
# One environment
# --------------------------------------------------------------------------------------------------


def _import_attr(path: str, what: str) -> Any:
    return import_object(path, what=what, error=PettingZooEnvError)


def _module_candidates(name: str) -> list[str]:
    """PettingZoo-style env modules next to ``name`` (for did-you-mean hints)."""
    import pkgutil

    parent = name.rpartition(".")[0]
    pkgs = [parent] if parent else ["mpe2", "pettingzoo.butterfly", "pettingzoo.classic", "pettingzoo.sisl"]
    out: list[str] = []
    for pkg in pkgs:
        try:
            mod = importlib.import_module(pkg)
        except Exception:
            continue
        for info in pkgutil.iter_modules(getattr(mod, "__path__", [])):
            if info.name[-3:-1] == "_v" or info.name.rsplit("_v", 1)[-1].isdigit():
                out.append(f"{pkg}.{info.name}")
    return out


def _to_parallel(env: Any, where: str) -> Any:
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    if isinstance(env, ParallelEnv):
        return env
    if isinstance(env, AECEnv):
        from pettingzoo.utils.conversions import aec_to_parallel

        try:
            return aec_to_parallel(env)
        except Exception as exc:  # PettingZoo refuses AEC envs that are not parallelisable
            raise PettingZooEnvError(
                f"{where} is an AEC (turn-based) environment that PettingZoo cannot convert to a parallel one: "
                f"{exc}. Multi-agent algorithms here need simultaneous moves."
            ) from exc
    if hasattr(env, "possible_agents") and hasattr(env, "step") and hasattr(env, "reset"):
        return env  # duck-typed parallel env
    raise PettingZooEnvError(f"{where} returned {type(env).__name__}, not a PettingZoo ParallelEnv or AECEnv")


def _apply_wrappers(env: Any, wrappers: Sequence[WrapperLike] | None) -> Any:
    for w, kwargs in resolve_wrappers(wrappers, "environment.env_wrappers", PettingZooEnvError):
        try:
            env = w(env, **kwargs)
        except Exception as exc:
            raise PettingZooEnvError(f"wrapper {getattr(w, '__name__', w)!r} failed on the env: {exc}") from exc
    return env


def make_single_pz_env(spec: Any, wrappers: Sequence[WrapperLike] | None = None) -> Any:
    """One PettingZoo parallel env from a ``GymEnvSpec`` (the spec's wrappers, then ``wrappers``).

    ``name`` is a module with ``parallel_env(**env_config)`` (or an AEC ``env(**env_config)``,
    converted); ``entrypoint: module:callable`` builds a custom env, through ``factory`` when given
    (``factory(entrypoint, **env_config)``).
    """
    add_env_path(spec, PettingZooEnvError)
    cfg = load_env_config(spec, PettingZooEnvError)
    entrypoint = getattr(spec, "entrypoint", None)
    factory = getattr(spec, "factory", None)
    name = str(getattr(spec, "name", ""))
    if factory:
        fn = _import_attr(factory, "environment.factory")
        where = f"environment.factory {factory!r}"
        env = fn(entrypoint, **cfg) if entrypoint else fn(**cfg)
    elif entrypoint:
        where = f"environment.entrypoint {entrypoint!r}"
        env = _import_attr(entrypoint, "environment.entrypoint")(**cfg)
    else:
        where = f"environment.name {name!r}"
        try:
            module = importlib.import_module(resolve_module_name(name))
        except ImportError as exc:
            hint = closest(name, _module_candidates(name))
            raise PettingZooEnvError(
                f"unknown PettingZoo environment module {name!r} ({exc})."
                + (f" Did you mean {hint!r}?" if hint else "")
                + " Give a module with parallel_env(), e.g. mpe2.simple_speaker_listener_v4, or set "
                "environment.entrypoint: 'module:callable'."
            ) from None
        if hasattr(module, "parallel_env"):
            make = module.parallel_env
        elif hasattr(module, "env"):
            make = module.env
        else:
            raise PettingZooEnvError(f"{where}: module has neither parallel_env() nor env(); is it a PettingZoo env?")
        try:
            env = make(**cfg)
        except TypeError as exc:
            raise PettingZooEnvError(f"{where}: environment.env_config {cfg} was rejected: {exc}") from exc
    env = _to_parallel(env, where)
    wrappers_all = list(getattr(spec, "env_wrappers", None) or []) + list(wrappers or [])
    return _apply_wrappers(env, wrappers_all)


# --------------------------------------------------------------------------------------------------
# Array layout and per-copy stepping (shared by the sync and async versions)
# --------------------------------------------------------------------------------------------------


def _obs_shape(space: spaces.Space) -> tuple[int, ...]:
    if isinstance(space, spaces.Box):
        return tuple(space.shape)
    if isinstance(space, spaces.Discrete):
        return (int(space.n),)
    return (int(spaces.flatdim(space)),)


def _encode_obs(space: spaces.Space, value: Any, out: np.ndarray) -> None:
    if isinstance(space, spaces.Box):
        out[...] = value
    elif isinstance(space, spaces.Discrete):
        out[...] = 0.0
        out[int(value) - int(space.start)] = 1.0
    else:
        out[...] = spaces.flatten(space, value)


def _act_shape(space: spaces.Space) -> tuple[int, ...]:
    if isinstance(space, spaces.Discrete):
        return ()
    if isinstance(space, spaces.Box):
        return tuple(space.shape)
    if isinstance(space, spaces.MultiDiscrete):
        return tuple(space.shape)
    raise PettingZooEnvError(f"action space {space} is not supported (Discrete, MultiDiscrete or Box)")


def _mask_dim(space: spaces.Space) -> int:
    """Columns of an action mask of ``space`` (0: its actions are not maskable)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    return 0


def _reported_mask(obs: Any, info: Any) -> Any:
    """One agent's mask from its raw observation or its info dict (None: it reports none)."""
    if isinstance(obs, Mapping) and MASK_KEY in obs:
        return obs[MASK_KEY]
    if isinstance(info, Mapping) and MASK_KEY in info:
        return info[MASK_KEY]
    return None


def _decode_action(space: spaces.Space, value: np.ndarray) -> Any:
    if isinstance(space, spaces.Discrete):
        return int(value) + int(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        return value.astype(np.int64)
    return value.astype(space.dtype if space.dtype is not None else np.float32)


class _Layout:
    """Array shapes of one vec env; ``arrays(E)`` allocates, ``views(buffers)`` maps shared memory."""

    def __init__(self, agents: list[str], obs_spaces: dict[str, spaces.Space], act_spaces: dict[str, spaces.Space]):
        self.agents = list(agents)
        #: What the policies see: a Dict observation's ``action_mask`` key taken out (masking.py).
        self.obs_spaces = {a: policy_space(obs_spaces[a]) for a in agents}
        #: The agents whose observations carry their action mask.
        self.masks_in_obs = {a: policy_space(obs_spaces[a]) is not obs_spaces[a] for a in agents}
        self.act_spaces = act_spaces
        self.obs_shapes = {a: _obs_shape(self.obs_spaces[a]) for a in agents}
        self.act_shapes = {a: _act_shape(act_spaces[a]) for a in agents}
        self.mask_dims = {a: _mask_dim(act_spaces[a]) for a in agents}

    def specs(self, n: int) -> dict[str, tuple[tuple[int, ...], str]]:
        """name -> (shape, dtype char) of every array, ``n`` copies."""
        out: dict[str, tuple[tuple[int, ...], str]] = {}
        k = len(self.agents)
        for i, a in enumerate(self.agents):
            out[f"obs{i}"] = ((n, *self.obs_shapes[a]), "f")
            out[f"final{i}"] = ((n, *self.obs_shapes[a]), "f")
            out[f"act{i}"] = ((n, *self.act_shapes[a]), "f")
            if self.mask_dims[a]:
                out[f"mask{i}"] = ((n, self.mask_dims[a]), "b")
        for name in ("rew",):
            out[name] = ((n, k), "f")
        for name in ("term", "trunc", "acted", "active", "masked"):
            out[name] = ((n, k), "b")
        out["done"] = ((n,), "b")
        return out

    def arrays(self, n: int) -> dict[str, np.ndarray]:
        return {
            key: np.zeros(shape, dtype=np.float32 if c == "f" else np.bool_)
            for key, (shape, c) in self.specs(n).items()
        }


class _Slot:
    """One env copy writing its results into row ``row`` of the arrays."""

    def __init__(self, env: Any, layout: _Layout, arrays: dict[str, np.ndarray], row: int) -> None:
        self.env, self.layout, self.a, self.row = env, layout, arrays, row

    def _write_obs(self, obs: dict[str, Any], key: str) -> None:
        r = self.row
        for i, agent in enumerate(self.layout.agents):
            dst = self.a[f"{key}{i}"][r]
            if agent in obs:
                _encode_obs(self.layout.obs_spaces[agent], policy_observation(obs[agent]), dst)
            else:
                dst[...] = 0.0

    def _write_masks(self, obs: Mapping[str, Any], infos: Any) -> None:
        """Each agent's action mask for its next action (all allowed where it reports none) and
        whether it reported one (``masked``)."""
        r = self.row
        infos = infos if isinstance(infos, Mapping) else {}
        for i, agent in enumerate(self.layout.agents):
            if not self.layout.mask_dims[agent]:
                continue
            raw = _reported_mask(obs.get(agent), infos.get(agent))
            self.a["masked"][r, i] = raw is not None
            self.a[f"mask{i}"][r] = True if raw is None else np.asarray(raw).astype(bool).reshape(-1)

    def reset(self, seed: int | None) -> None:
        obs, infos = self.env.reset(seed=seed)
        self._write_obs(obs, "obs")
        self._write_masks(obs, infos)
        alive = set(getattr(self.env, "agents", obs.keys()))
        self.a["active"][self.row] = [a in alive and a in obs for a in self.layout.agents]
        self.a["done"][self.row] = False

    def step(self) -> None:
        r, layout, arr = self.row, self.layout, self.a
        acting = [a for a in self.env.agents]
        actions = {}
        for agent in acting:
            i = layout.agents.index(agent)
            actions[agent] = _decode_action(layout.act_spaces[agent], arr[f"act{i}"][r])
        obs, rew, term, trunc, infos = self.env.step(actions)
        acted = set(acting)
        for i, agent in enumerate(layout.agents):
            did = agent in acted
            arr["acted"][r, i] = did
            arr["rew"][r, i] = float(rew.get(agent, 0.0)) if did else 0.0
            arr["term"][r, i] = bool(term.get(agent, False)) if did else False
            arr["trunc"][r, i] = bool(trunc.get(agent, False)) if did else False
        self._write_obs(obs, "obs")
        self._write_masks(obs, infos)
        alive = [a for a in self.env.agents if not (term.get(a, False) or trunc.get(a, False))]
        if not alive:
            # Episode over: keep its last observation, start the next one in the same step.
            for i in range(len(layout.agents)):
                arr[f"final{i}"][r] = arr[f"obs{i}"][r]
            self.reset(None)
            arr["done"][r] = True
        else:
            alive_set = set(alive)
            arr["active"][r] = [a in alive_set for a in layout.agents]
            arr["done"][r] = False


# --------------------------------------------------------------------------------------------------
# Vector envs
# --------------------------------------------------------------------------------------------------


class PettingZooVecEnv:
    """Common interface of the sync and async vectorised PettingZoo envs."""

    num_envs: int
    possible_agents: list[str]
    observation_spaces: dict[str, spaces.Space]
    action_spaces: dict[str, spaces.Space]
    metadata: dict[str, Any]

    def __init__(self, layout: _Layout, num_envs: int) -> None:
        self.layout = layout
        self.num_envs = int(num_envs)
        self.possible_agents = list(layout.agents)
        self.agents = list(layout.agents)
        self.observation_spaces = dict(layout.obs_spaces)
        self.action_spaces = dict(layout.act_spaces)
        self.obs_shapes = dict(layout.obs_shapes)
        self.closed = False
        self._arr: dict[str, np.ndarray] = {}

    @property
    def mask_kind(self) -> str | None:
        """Where the env's action masks come from: ``"obs"`` (a Dict observation's ``action_mask``
        key), ``"info"`` (``infos[agent]["action_mask"]``, as of the last reset or step) or None."""
        if any(self.layout.masks_in_obs.values()):
            return "obs"
        return "info" if self._arr["masked"].any() else None

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    # --- packing -------------------------------------------------------------------------------
    def _put_actions(self, actions: dict[str, Any], arr: dict[str, np.ndarray]) -> None:
        for i, agent in enumerate(self.possible_agents):
            if agent not in actions:
                continue  # dead agents need no action
            value = np.asarray(actions[agent], dtype=np.float32)
            arr[f"act{i}"][...] = value.reshape(arr[f"act{i}"].shape)

    def _out(self, arr: dict[str, np.ndarray], step: bool) -> tuple[Any, ...]:
        agents = self.possible_agents
        obs = {a: arr[f"obs{i}"].copy() for i, a in enumerate(agents)}
        infos: dict[str, Any] = {
            "active": {a: arr["active"][:, i].copy() for i, a in enumerate(agents)},
            "episode_done": arr["done"].copy(),
        }
        if self.mask_kind is not None:
            infos["action_mask"] = {a: arr[f"mask{i}"].copy() for i, a in enumerate(agents) if self.layout.mask_dims[a]}
        if not step:
            return obs, infos
        infos["acted"] = {a: arr["acted"][:, i].copy() for i, a in enumerate(agents)}
        if infos["episode_done"].any():
            infos["final_obs"] = {a: arr[f"final{i}"].copy() for i, a in enumerate(agents)}
        rewards = {a: arr["rew"][:, i].copy() for i, a in enumerate(agents)}
        terms = {a: arr["term"][:, i].copy() for i, a in enumerate(agents)}
        truncs = {a: arr["trunc"][:, i].copy() for i, a in enumerate(agents)}
        return obs, rewards, terms, truncs, infos

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        raise NotImplementedError

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        raise NotImplementedError

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> PettingZooVecEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self.closed:
                self.close()
        except Exception:
            pass


def _seeds(seed: int | None, n: int) -> list[int | None]:
    return [None if seed is None else int(seed) + i for i in range(n)]


class SyncPettingZooVecEnv(PettingZooVecEnv):
    """Copies stepped one after the other in this process (cheap envs, debugging, evaluation)."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]]) -> None:
        envs = [fn() for fn in env_fns]
        layout = _layout_of(envs[0])
        super().__init__(layout, len(envs))
        self.envs = envs
        self._arr = layout.arrays(self.num_envs)
        self._slots = [_Slot(env, layout, self._arr, r) for r, env in enumerate(envs)]

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        for slot, s in zip(self._slots, _seeds(seed, self.num_envs), strict=True):
            slot.reset(s)
        return self._out(self._arr, step=False)  # type: ignore[return-value]

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        self._put_actions(actions, self._arr)
        for slot in self._slots:
            slot.step()
        return self._out(self._arr, step=True)

    def close(self) -> None:
        if self.closed:
            return
        for env in self.envs:
            try:
                env.close()
            except Exception:
                pass
        self.closed = True


def _layout_of(env: Any) -> _Layout:
    agents = list(env.possible_agents)
    obs_spaces = {a: env.observation_space(a) for a in agents}
    act_spaces = {a: env.action_space(a) for a in agents}
    return _Layout(agents, obs_spaces, act_spaces)


def _views(raw: dict[str, Any], specs: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, np.ndarray]:
    out = {}
    for key, (shape, c) in specs.items():
        dtype = np.float32 if c == "f" else np.bool_
        out[key] = np.frombuffer(raw[key], dtype=dtype).reshape(shape)
    return out


def _worker(
    remote: Any,
    parent_remote: Any,
    spec: Any,
    wrappers: Sequence[WrapperLike] | None,
    rows: list[int],
    raw: dict[str, Any],
    specs: dict[str, tuple[tuple[int, ...], str]],
    layout: _Layout,
) -> None:
    """Worker process: hosts the copies in ``rows``; waits for one-word commands on ``remote``."""
    # Ctrl-C reaches the whole process group: the main process defers it to a consistent point and
    # checkpoints, which needs the workers to keep stepping until then.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_remote is not None:
        parent_remote.close()
    if "torch" in sys.modules:  # forked from a process that uses torch: one thread per worker
        sys.modules["torch"].set_num_threads(1)
    envs: list[Any] = []
    try:
        arr = _views(raw, specs)
        envs = [make_single_pz_env(spec, wrappers) for _ in rows]
        slots = [_Slot(env, layout, arr, r) for env, r in zip(envs, rows, strict=True)]
        remote.send(("ok", None))
        while True:
            cmd, data = remote.recv()
            if cmd == "step":
                for slot in slots:
                    slot.step()
                remote.send(("ok", None))
            elif cmd == "reset":
                for slot in slots:
                    slot.reset(None if data is None else data + slot.row)
                remote.send(("ok", None))
            elif cmd == "close":
                remote.send(("ok", None))
                break
    except KeyboardInterrupt:
        pass
    except BaseException as exc:
        try:
            remote.send(("error", (type(exc).__name__, str(exc), traceback.format_exc())))
        except Exception:
            pass
    finally:
        for env in envs:
            try:
                env.close()
            except Exception:
                pass


class AsyncPettingZooVecEnv(PettingZooVecEnv):
    """Copies stepped in worker processes; arrays live in shared memory.

    :param spec: the env spec (pickled to the workers under ``spawn``).
    :param num_envs: number of copies.
    :param num_workers: processes (default ``min(num_envs, cpu count)``); each hosts a block of copies.
    :param context: multiprocessing start method (``fork``, ``spawn``, ``forkserver``; default the platform's).
    """

    def __init__(
        self,
        spec: Any,
        num_envs: int,
        *,
        wrappers: Sequence[WrapperLike] | None = None,
        num_workers: int | None = None,
        context: str | None = None,
    ) -> None:
        probe = make_single_pz_env(spec, wrappers)
        layout = _layout_of(probe)
        try:
            probe.close()
        except Exception:
            pass
        super().__init__(layout, num_envs)
        ctx = mp.get_context(context)
        workers = max(1, min(num_workers or os.cpu_count() or 1, self.num_envs))
        specs = layout.specs(self.num_envs)
        raw = {}
        for key, (shape, c) in specs.items():
            size = int(np.prod(shape)) if shape else 1
            raw[key] = ctx.RawArray("f" if c == "f" else "B", max(size, 1))
        self._arr = _views(raw, specs)
        blocks = np.array_split(np.arange(self.num_envs), workers)
        self._remotes: list[Any] = []
        self._procs: list[Any] = []
        for block in blocks:
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_worker,
                args=(child, parent if ctx.get_start_method() == "fork" else None, spec, wrappers,
                      [int(r) for r in block], raw, specs, layout),
                daemon=True,
            )  # fmt: skip
            proc.start()
            child.close()
            self._remotes.append(parent)
            self._procs.append(proc)
        self._wait()

    def _wait(self) -> None:
        errors = []
        for remote in self._remotes:
            try:
                status, data = remote.recv()
            except EOFError:
                status, data = "error", ("EOFError", "worker process died", "")
            if status == "error":
                errors.append(data)
        if errors:
            name, msg, tb = errors[0]
            self.close()
            if name == "PettingZooEnvError":
                raise PettingZooEnvError(msg)
            raise RuntimeError(f"PettingZoo env worker failed: {name}: {msg}\n{tb}")

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        for remote in self._remotes:
            remote.send(("reset", seed))
        self._wait()
        return self._out(self._arr, step=False)  # type: ignore[return-value]

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        self._put_actions(actions, self._arr)
        for remote in self._remotes:
            remote.send(("step", None))
        self._wait()
        return self._out(self._arr, step=True)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for remote in self._remotes:
            try:
                remote.send(("close", None))
            except Exception:
                pass
        for remote in self._remotes:
            try:
                if remote.poll(5):
                    remote.recv()
            except Exception:
                pass
            remote.close()
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()


def make_pz_env(
    spec: Any,
    extra_wrappers: list[type] | None = None,
    wrappers: Sequence[WrapperLike] | None = None,
    *,
    num_envs: int | None = None,
    sync: bool | None = None,
    context: str | None = None,
) -> PettingZooVecEnv:
    """Vectorised PettingZoo envs from a ``GymEnvSpec``: ``num_envs`` copies, async unless ``sync``.

    :param spec: the environment section (``name`` a PettingZoo module, or ``entrypoint``/``factory``).
    :param extra_wrappers: wrapper classes applied after the spec's ``env_wrappers``.
    :param wrappers: further wrappers: import paths, ``(path, kwargs)`` pairs or callables.
    :param num_envs: override ``spec.num_envs``.
    :param sync: override ``spec.sync``.
    :param context: multiprocessing start method for the async workers.
    """
    n = int(num_envs if num_envs is not None else getattr(spec, "num_envs", 1) or 1)
    all_wrappers: list[WrapperLike] = [*(extra_wrappers or []), *(wrappers or [])]
    use_sync = bool(getattr(spec, "use_sync", False) if sync is None else sync)
    if use_sync or n == 1:
        return SyncPettingZooVecEnv([lambda: make_single_pz_env(spec, all_wrappers)] * n)
    return AsyncPettingZooVecEnv(spec, n, wrappers=all_wrappers, context=context)


__all__ = [
    "AsyncPettingZooVecEnv",
    "PettingZooEnvError",
    "PettingZooVecEnv",
    "SyncPettingZooVecEnv",
    "make_pz_env",
    "make_single_pz_env",
]
