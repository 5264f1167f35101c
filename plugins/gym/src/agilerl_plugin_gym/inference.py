"""Using a trained gym agent: ``predict``, whole evaluation episodes, and the policy for export.

The core's optional inference protocols (:mod:`agilerl.inference`) for this plugin's algorithms,
as two mixins that only read what the algorithms already expose (``greedy_action``, ``act``,
the spaces, ``nets``):

* :class:`SingleAgentInference` (PPO, DQN, DDPG, TD3): ``predict`` on one observation from a plain
  ``gymnasium.Env`` or on a batch from a vector env; ``run_episodes`` on a single env made from the
  manifest, with rendering or a video (gymnasium's ``RecordVideo``); ``policy_module`` for ONNX and
  TorchScript export.
* :class:`MultiAgentInference` (IPPO, MADDPG, MATD3): ``predict`` on a PettingZoo observation dict
  (one env's, or the vector env's batch) and ``run_episodes`` on a PettingZoo ``ParallelEnv``.

``predict`` follows Stable-Baselines3's ``model.predict(obs, state, episode_start, deterministic)``
and returns ``(action, state)``; ``state`` is passed through, except by recurrent PPO, which takes
and returns its LSTM state (:mod:`agilerl_plugin_gym.single_agent.ppo_recurrent`). One
difference: ``deterministic`` defaults to ``True`` (the greedy policy, as evaluation uses).
``deterministic=False`` samples from PPO's and IPPO's stochastic policies; DQN, DDPG, TD3, MADDPG
and MATD3 policies are deterministic (their exploration noise belongs to training), so they return
the greedy action either way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.errors import AgileRLError
from agilerl.inference import Episode
from agilerl_plugin_gym.engine.evaluation import EvalTicker, eval_step_cap, evaluation_progress
from agilerl_plugin_gym.env_config import load_env_config
from agilerl_plugin_gym.envs import GymEnvError, make_single_env
from agilerl_plugin_gym.masking import (
    MASK_KEY,
    MaskSource,
    check_masking,
    mask_logits,
    policy_observation,
    strip_mask_key,
)
from agilerl_plugin_gym.multi_agent.vec_env import PettingZooEnvError
from agilerl_plugin_gym.normalization import NormalizedPolicy, Normalizer
from agilerl_plugin_gym.observations import batch_size, map_obs, subspaces

__all__ = ["GreedyPolicy", "MultiAgentInference", "SingleAgentInference", "render_spec"]


def render_spec(env_spec: Any, render_mode: str, *, multi_agent: bool = False) -> Any:
    """A copy of the environment section whose env is made with ``render_mode``.

    ``env_config`` (a mapping, or a YAML/JSON file of constructor kwargs) is read by the env
    makers' own loader, so a missing or unparsable file is the error training gives.
    """
    error: type[AgileRLError] = GymEnvError
    if multi_agent:
        error = PettingZooEnvError
    cfg = load_env_config(env_spec, error)
    return env_spec.model_copy(update={"env_config": {**cfg, "render_mode": render_mode}})


class _EpisodeBound:
    """How ``run_episodes`` bounds and reports its episodes, as training's evaluation does
    (:mod:`agilerl_plugin_gym.engine.evaluation`): the manifest's ``training.eval_steps``, else the
    env's own step limit, else the default cap (said in the log); a progress line every few seconds."""

    def __init__(self, agent: Any, env_spec: Any, env: Any, episodes: int) -> None:
        manifest = getattr(agent, "manifest", None)
        eval_steps = getattr(getattr(manifest, "training", None), "eval_steps", None)
        label = str(getattr(env_spec, "label", None) or getattr(env_spec, "name", "env"))
        self.cap = eval_step_cap(eval_steps, env, label=label, said=set(), single=True)
        with evaluation_progress(enabled=True, label=label):
            self.ticker = EvalTicker(episodes)

    def step(self, length: int) -> bool:
        """One env step taken (the episode is ``length`` steps long now): whether the cap ends it."""
        self.ticker.tick(0)
        return self.cap is not None and length >= self.cap

    def episode_done(self) -> None:
        self.ticker.end_round(1)


def _is_batch(space: spaces.Space[Any], obs: np.ndarray) -> bool:
    """Whether ``obs`` is a batch of observations of ``space`` (else one observation)."""
    if isinstance(space, spaces.Discrete):
        single_ndim = 0
    else:
        shape = space.shape or ()
        single_ndim = len(shape)
        if obs.shape == tuple(shape):
            return False
        if obs.shape[1:] != tuple(shape):
            raise AgileRLError(
                f"predict: observation of shape {obs.shape} fits neither the observation space {space} "
                f"(one observation) nor a batch of them (shape (N, {', '.join(map(str, shape))}))"
            )
        return True
    if obs.ndim not in (single_ndim, single_ndim + 1):
        raise AgileRLError(f"predict: observation of shape {obs.shape} does not fit the observation space {space}")
    return obs.ndim == single_ndim + 1


def _structured_batch(space: spaces.Dict | spaces.Tuple, obs: Any) -> tuple[dict[str, Any], bool]:
    """A Dict/Tuple observation as a dict of arrays (parts converted like arrays), and whether it is
    a batch (judged by its first part)."""
    parts = subspaces(space)
    items = obs.items() if isinstance(obs, Mapping) else enumerate(obs)
    given = {str(k): v for k, v in items}
    if set(given) != set(parts):
        raise AgileRLError(
            f"predict: observation with parts {sorted(given)} does not fit the observation space {space} "
            f"(parts {sorted(parts)})"
        )
    out: dict[str, Any] = {}
    batches = set()
    for key, sub in parts.items():
        if isinstance(sub, (spaces.Dict, spaces.Tuple)):
            out[key], b = _structured_batch(sub, given[key])
        else:
            out[key] = _as_obs_array(sub, given[key])
            b = _is_batch(sub, out[key])
        batches.add(b)
    if len(batches) > 1:
        raise AgileRLError("predict: some parts of the observation have a batch axis and others do not")
    return out, batches.pop()


def _as_obs_array(space: spaces.Space[Any], observation: Any) -> np.ndarray:
    obs = np.asarray(observation)
    if obs.dtype.kind == "f" and isinstance(space, spaces.Box) and space.dtype is not None:
        obs = obs.astype(space.dtype, copy=False)
    return obs


class GreedyPolicy(nn.Module):
    """The greedy policy as one module: raw observation batch -> env action batch.

    It holds the actor network (whose ``preprocess`` one-hot encodes Discrete observations and
    scales images) and the decision on its output: argmax for Discrete actions, a per-dimension
    argmax for MultiDiscrete, and for Box actions either the tanh output scaled to the bounds
    (DDPG/TD3) or the mean clipped to them (PPO).
    """

    def __init__(
        self, actor: nn.Module, action_space: spaces.Space[Any], *, tanh_scaled: bool, nvec: list[int] | None = None
    ) -> None:
        super().__init__()
        self.actor = actor
        self.kind = (
            "discrete"
            if isinstance(action_space, spaces.Discrete)
            else "multidiscrete"
            if isinstance(action_space, spaces.MultiDiscrete)
            else "box"
        )
        self.nvec = list(nvec or [])
        self.tanh_scaled = tanh_scaled
        if isinstance(action_space, spaces.Box):
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        out = mask_logits(self.actor(obs), action_mask)  # a masked policy's export takes the mask second
        if self.kind == "discrete":
            return out.argmax(-1)
        if self.kind == "multidiscrete":
            return torch.stack([c.argmax(-1) for c in out.split(self.nvec, dim=-1)], -1)
        low, high = self.get_buffer("low"), self.get_buffer("high")
        if self.tanh_scaled:
            return low + (out + 1.0) * 0.5 * (high - low)
        return torch.maximum(torch.minimum(out, high), low)


class SingleAgentInference:
    """``predict``, ``run_episodes`` and ``policy_module`` for single-agent gym algorithms."""

    observation_space: spaces.Space[Any]
    action_space: spaces.Space[Any]
    nets: dict[str, Any]
    policy_name: ClassVar[str]
    device: torch.device
    #: Observation/reward statistics (``environment.normalize``); ``None``: observations go to the
    #: networks as they come. ``predict`` and the exported policy take raw observations.
    normalizer: Normalizer | None = None

    def greedy_action(self, obs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def obs_tensor(self, obs: Any) -> Any:
        raise NotImplementedError

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
        action_masks: Any = None,
    ) -> tuple[Any, Any]:
        """The action for one observation (or a batch, from a vector env) and ``state`` unchanged.

        One observation (e.g. from ``gymnasium.make(...)``) gives one action, ready for
        ``env.step``; a batch with a leading env axis gives a batch of actions. A policy trained
        with ``action_masking: true`` takes ``action_masks`` (bool, one row per observation, True:
        allowed; or the observation's ``action_mask`` key) and picks allowed actions only.
        """
        x: Any
        masking = bool(getattr(getattr(self, "spec", None), "action_masking", False))
        if isinstance(observation, Mapping) and MASK_KEY in observation:
            if action_masks is None:
                action_masks = observation[MASK_KEY]
            observation = {k: v for k, v in observation.items() if k != MASK_KEY}
        if masking and action_masks is None:
            raise AgileRLError(
                "predict: this policy was trained with action_masking: true; pass action_masks= (the env's "
                "info['action_mask'] or env.action_masks()) so that it picks allowed actions only"
            )
        if action_masks is not None and not masking:
            raise AgileRLError("predict: action_masks given, but this policy was trained without action_masking")
        if isinstance(self.observation_space, (spaces.Dict, spaces.Tuple)):
            x, batch = _structured_batch(self.observation_space, observation)
            x = x if batch else map_obs(lambda a: a[None], x)
        else:
            obs = _as_obs_array(self.observation_space, observation)
            batch = _is_batch(self.observation_space, obs)
            x = obs if batch else obs[None]
        if self.normalizer is not None:  # frozen statistics: raw observations in
            x = self.normalizer.normalize_obs(x)
        act = getattr(self, "act", None)
        env_action = getattr(self, "env_action", None)
        mask = None if action_masks is None else np.asarray(action_masks, dtype=bool).reshape(batch_size(x), -1)
        if not deterministic and callable(act) and callable(env_action):  # a stochastic policy (PPO)
            with torch.inference_mode():
                sampled = act(self.obs_tensor(x), *([] if mask is None else [torch.as_tensor(mask)]))[0]
            actions = np.asarray(env_action(sampled.cpu()))
        elif mask is not None:
            actions = np.asarray(self.greedy_action(x, mask))  # type: ignore[call-arg]
        else:
            actions = np.asarray(self.greedy_action(x))
        return (actions if batch else actions[0]), state

    def run_episodes(
        self,
        env_spec: Any,
        *,
        episodes: int = 10,
        seed: int | None = None,
        render: bool = False,
        video: str | None = None,
    ) -> list[Episode]:
        """Play ``episodes`` greedy episodes on one env made from ``env_spec``.

        ``render`` shows a window (``render_mode="human"``); ``video`` records every episode with
        gymnasium's ``RecordVideo``: the first to ``video``, episode N to ``<stem>-episode-N.mp4``.
        Episodes are bounded as training's evaluation bounds them (the manifest's
        ``training.eval_steps``, else the env's own limit, else a default cap that the log names),
        and a long evaluation logs a progress line every few seconds.
        """
        if video and render:
            raise AgileRLError("eval: choose --render or --video, not both (one env has one render mode)")
        spec = env_spec
        if render:
            spec = render_spec(env_spec, "human")
        elif video:
            spec = render_spec(env_spec, "rgb_array")
            # Frames are drawn off-screen: pygame's SDL needs no display or sound device, and when it
            # looks for them where there are none it prints a false "Error: XDG_RUNTIME_DIR is
            # invalid" (and ALSA lines) though the video is fine. A user's own SDL settings stay.
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
            os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        env = make_single_env(spec)
        tmp_dir: Path | None = None
        if video:
            import tempfile

            from gymnasium.wrappers import RecordVideo

            target = Path(video)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp_dir = Path(tempfile.mkdtemp(prefix=".agilerl-video-", dir=target.parent))
            tmp_dir.rmdir()  # a unique name; RecordVideo creates the folder (and warns if it exists)
            env = RecordVideo(
                env, str(tmp_dir), episode_trigger=lambda _: True, name_prefix="episode", disable_logger=True
            )
        try:
            out = []
            bound = _EpisodeBound(self, env_spec, env, episodes)
            masking = bool(getattr(getattr(self, "spec", None), "action_masking", False))
            for i in range(episodes):
                obs, info = env.reset(seed=None if seed is None else seed + i)
                source = MaskSource.of(env, obs, info)
                check_masking(
                    source,
                    masking,
                    type(self).__name__,
                    supported=hasattr(self, "spec") and "action_masking" in type(self.spec).model_fields,
                )
                total, length, done = 0.0, 0, False
                state = None  # a recurrent policy's state (recurrent PPO), from each episode's start
                while not done:
                    masks = source.read(env, obs, info) if masking else None
                    if masks is not None:
                        action, state = self.predict(strip_mask_key(obs), state, action_masks=masks)
                    else:
                        action, state = self.predict(obs, state)
                    obs, reward, terminated, truncated, info = env.step(action)
                    total += float(reward)
                    length += 1
                    done = bool(terminated or truncated) or bound.step(length)
                out.append(Episode(ret=total, length=length))
                bound.episode_done()
        except BaseException:
            env.close()
            if tmp_dir is not None:  # no half-written videos left behind
                import shutil

                shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        env.close()
        if tmp_dir is not None and video:
            _collect_videos(tmp_dir, Path(video))
        return out

    def policy_module(self) -> nn.Module:
        """The greedy policy (observation preprocessing included) as a CPU module in eval mode."""
        import copy

        actor = copy.deepcopy(self.nets[self.policy_name]).cpu().eval()
        nvec = [int(n) for n in self.action_space.nvec] if isinstance(self.action_space, spaces.MultiDiscrete) else None
        module: nn.Module = GreedyPolicy(actor, self.action_space, tanh_scaled=hasattr(self, "scale"), nvec=nvec)
        if self.normalizer is not None:  # the exported graph takes raw observations
            module = NormalizedPolicy(self.normalizer.module(), module)
        return module.eval()

    def example_extra_inputs(self) -> dict[str, np.ndarray]:
        """A masked policy's exported module takes ``action_mask`` (bool, one row per observation) second."""
        if not getattr(getattr(self, "spec", None), "action_masking", False):
            return {}
        width = (
            int(np.sum(self.action_space.nvec))
            if isinstance(self.action_space, spaces.MultiDiscrete)
            else int(
                self.action_space.n  # type: ignore[attr-defined]
            )
        )
        return {"action_mask": np.ones((1, width), dtype=bool)}

    def example_observation(self) -> np.ndarray:
        """A batch of one observation, with the dtype the policy takes (for tracing)."""
        if isinstance(self.observation_space, (spaces.Dict, spaces.Tuple)):
            raise AgileRLError(
                "export: policies of Dict/Tuple observations are not exportable yet (ONNX/TorchScript take one "
                "tensor); use predict() or run_episodes() in Python"
            )
        sample = np.asarray(self.observation_space.sample())
        if isinstance(self.observation_space, spaces.Discrete):
            return sample.astype(np.int64)[None]
        return sample[None]


def _agent_masks(obs: Mapping[str, Any], infos: Any, agents: list[str]) -> tuple[str | None, dict[str, Any]]:
    """Where one PettingZoo env's masks come from (``"obs"``, ``"info"``, None) and the masks it
    reports for ``agents`` (an observation's ``action_mask`` key, else ``infos[agent]``)."""
    kinds: set[str] = set()
    out: dict[str, Any] = {}
    for a in agents:
        o, info = obs.get(a), infos.get(a) if isinstance(infos, Mapping) else None
        if isinstance(o, Mapping) and MASK_KEY in o:
            out[a] = o[MASK_KEY]
            kinds.add("obs")
        elif isinstance(info, Mapping) and MASK_KEY in info:
            out[a] = info[MASK_KEY]
            kinds.add("info")
    return ("obs" if "obs" in kinds else "info" if kinds else None), out


def _collect_videos(tmp_dir: Path, target: Path) -> None:
    files = sorted(tmp_dir.glob("episode-episode-*.mp4"), key=lambda f: int(f.stem.rsplit("-", 1)[-1]))
    if not files:
        raise AgileRLError(f"eval: RecordVideo wrote no video (is moviepy installed?) in {tmp_dir}")
    for i, f in enumerate(files):
        dest = target if i == 0 else target.with_name(f"{target.stem}-episode-{i}{target.suffix or '.mp4'}")
        f.replace(dest)
    for leftover in tmp_dir.iterdir():
        leftover.unlink()
    tmp_dir.rmdir()


class MultiAgentInference:
    """``predict`` and ``run_episodes`` for PettingZoo algorithms (agent id -> observation dicts)."""

    agent_ids: list[str]
    observation_spaces: dict[str, spaces.Space[Any]]
    action_spaces: dict[str, spaces.Space[Any]]
    sum_scores: bool

    def act(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        deterministic: bool = True,
        action_masks: Mapping[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        raise NotImplementedError

    @property
    def masks_actions(self) -> bool:
        raise NotImplementedError

    def check_masks(self, kind: str | None) -> None:
        raise NotImplementedError

    @staticmethod
    def _encode(space: spaces.Space[Any], value: Any) -> np.ndarray:
        """One raw observation as the networks see it (the vector env's encoding)."""
        if isinstance(space, spaces.Box):
            return np.asarray(value, dtype=np.float32).reshape(space.shape)
        return np.asarray(spaces.flatten(space, value), dtype=np.float32)

    @staticmethod
    def _decode(space: spaces.Space[Any], value: np.ndarray) -> Any:
        if isinstance(space, spaces.Discrete):
            return int(value) + int(space.start)
        if isinstance(space, spaces.MultiDiscrete):
            return np.asarray(value).astype(np.int64)
        return np.asarray(value).astype(space.dtype if space.dtype is not None else np.float32)

    def predict(
        self,
        observation: Mapping[str, Any],
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
        action_masks: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, Any], Any]:
        """Actions for the agents in ``observation`` and ``state`` unchanged.

        ``observation`` is a PettingZoo ``ParallelEnv`` observation dict (one env: raw per-agent
        observations, actions come back ready for ``env.step``; agents absent from the dict, e.g.
        finished ones, get no action) or the vector env's batch (arrays with a leading env axis).
        A policy trained with ``action_masking: true`` takes ``action_masks`` (agent id -> bool
        mask, True: allowed; one row per env for a batch), or reads each agent's mask from the
        ``action_mask`` key of its observation (PettingZoo's ``{"observation", "action_mask"}``).
        """
        if not isinstance(observation, Mapping):
            raise AgileRLError("predict: a multi-agent policy takes a dict of agent id -> observation")
        unknown = [a for a in observation if a not in self.observation_spaces]
        if unknown:
            raise AgileRLError(f"predict: unknown agent(s) {unknown}; this policy acts for {self.agent_ids}")
        masks = dict(action_masks or {})
        for a, value in observation.items():  # the mask inside the observation, where it rides there
            if isinstance(value, Mapping) and MASK_KEY in value:
                masks.setdefault(a, value[MASK_KEY])
        observation = {a: policy_observation(v) for a, v in observation.items()}
        if self.masks_actions and not masks:
            raise AgileRLError(
                "predict: this policy was trained with action_masking: true; pass action_masks= (agent id -> the "
                "env's infos[agent]['action_mask'], or observations with their 'action_mask' key) so that it picks "
                "allowed actions only"
            )
        if masks and not self.masks_actions:
            raise AgileRLError("predict: action masks given, but this policy was trained without action_masking")
        first = next(iter(observation), None)
        batch = first is not None and self._is_vec_batch(first, observation[first])
        if batch:
            obs = {a: np.asarray(v) for a, v in observation.items()}
            n = len(obs[first]) if first is not None else 0
            full = {a: np.asarray(masks[a], dtype=bool).reshape(n, -1) for a in masks} if masks else None
            return self.act(obs, deterministic=deterministic, action_masks=full), state
        encoded = {}
        for a in self.agent_ids:
            space = self.observation_spaces[a]
            if a in observation:
                encoded[a] = self._encode(space, observation[a])[None]
            else:  # an agent that is done: any input, its action is dropped
                encoded[a] = np.zeros((1, *self._encode(space, space.sample()).shape), np.float32)
        one = {a: np.asarray(m, dtype=bool).reshape(1, -1) for a, m in masks.items()} if masks else None
        actions = self.act(encoded, deterministic=deterministic, action_masks=one)
        return {a: self._decode(self.action_spaces[a], actions[a][0]) for a in observation}, state

    def _is_vec_batch(self, agent: str, value: Any) -> bool:
        space = self.observation_spaces[agent]
        arr = np.asarray(value)
        if isinstance(space, spaces.Box):
            return arr.ndim == len(space.shape) + 1
        return arr.ndim == 2

    def run_episodes(
        self,
        env_spec: Any,
        *,
        episodes: int = 10,
        seed: int | None = None,
        render: bool = False,
        video: str | None = None,
    ) -> list[Episode]:
        """Play ``episodes`` greedy episodes on one PettingZoo ``ParallelEnv`` made from ``env_spec``.

        The return of an episode is the sum of the agents' returns (their mean when the run set
        ``training.sum_scores: false``), as training's evaluation scores it; episodes are bounded
        and reported as the single-agent ``run_episodes`` does.
        """
        if video:
            raise AgileRLError("eval: --video records gymnasium envs; for PettingZoo envs use --render")
        spec = render_spec(env_spec, "human", multi_agent=True) if render else env_spec
        env = make_single_env(spec, multi_agent=True)
        try:
            out = []
            bound = _EpisodeBound(self, env_spec, env, episodes)
            for i in range(episodes):
                obs, infos = env.reset(seed=None if seed is None else seed + i)
                returns = dict.fromkeys(self.agent_ids, 0.0)
                length = 0
                while env.agents:
                    live = [a for a in env.agents if a in obs]
                    kind, masks = _agent_masks(obs, infos, live)
                    self.check_masks(kind)
                    actions, _ = self.predict({a: obs[a] for a in live}, action_masks=masks or None)
                    obs, rewards, _, _, infos = env.step(actions)
                    for a, r in rewards.items():
                        returns[a] = returns.get(a, 0.0) + float(r)
                    length += 1
                    if bound.step(length):
                        break
                values = list(returns.values())
                score = float(np.sum(values)) if self.sum_scores else float(np.mean(values))
                out.append(Episode(ret=score, length=length))
                bound.episode_done()
        finally:
            env.close()
        return out
