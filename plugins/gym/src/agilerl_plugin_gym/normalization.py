"""Observation and reward normalisation saved with the agent (Stable-Baselines3's ``VecNormalize``).

The manifest's ``environment.normalize`` section turns it on. Each agent of a population owns one
:class:`Normalizer` (``agent.normalizer``; a clone copies it): running mean and variance of the
observations and, for reward scaling, of the discounted return, both as SB3 keeps them.

* Training (the engines, :meth:`Normalizer.train_obs` / :meth:`Normalizer.train_reward`): every new
  observation batch updates the statistics and is then normalised, ``clip((obs - mean) /
  sqrt(var + epsilon), -clip_obs, clip_obs)``; a reward is divided by the standard deviation of the
  discounted return (``gamma``) and clipped to ``clip_reward``. The on-policy engine stores what it
  normalised; the off-policy engine stores raw transitions (the replay buffer is shared by the
  population) and normalises each sampled batch with the learning agent's statistics
  (:meth:`Normalizer.batch`), as SB3's replay buffer does with ``VecNormalize``.
* Everything else is frozen: evaluation (``agent.test``), ``predict`` (raw observations in),
  ``agilerl eval`` and the exported ONNX/TorchScript graph (:meth:`Normalizer.module`, which takes
  raw observations) read the statistics and never update them.
* Reported returns are always the env's raw rewards.

The statistics (float64, as SB3's) are part of the agent's checkpoint (:meth:`Normalizer.state_dict`),
so a resumed run continues bit-identically and ``agilerl.load`` acts on raw observations. For
Dict/Tuple observations the float Box parts are normalised and the others (images, discrete parts)
pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.errors import AgileRLError
from agilerl_plugin_gym.observations import subspaces

__all__ = [
    "NormalizeSettings",
    "NormalizedPolicy",
    "Normalizer",
    "RunningMeanStd",
    "agent_normalizer",
    "normalizable_keys",
]

#: Key of the statistics of a plain (not Dict/Tuple) observation.
WHOLE = ""


@dataclass(frozen=True)
class NormalizeSettings:
    """What ``environment.normalize`` asks for (SB3's ``VecNormalize`` arguments)."""

    obs: bool = True
    reward: bool = False
    clip_obs: float = 10.0
    clip_reward: float = 10.0
    epsilon: float = 1e-8
    gamma: float = 0.99


class RunningMeanStd:
    """Running mean and variance over batches (Chan et al.'s parallel update, as SB3's), in float64."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = float(epsilon)

    def update(self, batch: np.ndarray) -> None:
        """Fold a batch (leading axis: samples) into the statistics."""
        x = np.asarray(batch, np.float64)
        n = x.shape[0]
        if n == 0:
            return
        b_mean, b_var = x.mean(axis=0), x.var(axis=0)
        delta = b_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + b_var * n + np.square(delta) * self.count * n / total
        self.mean = np.asarray(self.mean + delta * n / total, np.float64)
        self.var = np.asarray(m2 / total, np.float64)
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        return {
            "mean": torch.from_numpy(self.mean.copy()),
            "var": torch.from_numpy(self.var.copy()),
            "count": self.count,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.mean = np.asarray(
            state["mean"].numpy() if torch.is_tensor(state["mean"]) else state["mean"], np.float64
        ).copy()
        self.var = np.asarray(
            state["var"].numpy() if torch.is_tensor(state["var"]) else state["var"], np.float64
        ).copy()
        self.count = float(state["count"])


def normalizable_keys(space: spaces.Space[Any]) -> dict[str, tuple[int, ...]]:
    """The parts of ``space`` that are normalised, by key (:data:`WHOLE` for a plain Box), with
    their shapes: Box spaces of a float dtype (not images, not discrete parts)."""

    def float_box(s: spaces.Space[Any]) -> bool:
        return isinstance(s, spaces.Box) and s.dtype is not None and np.dtype(s.dtype).kind == "f"

    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return {k: tuple(s.shape or ()) for k, s in subspaces(space).items() if float_box(s)}
    return {WHOLE: tuple(space.shape or ())} if float_box(space) else {}


def agent_normalizer(agent: Any) -> Normalizer | None:
    """The agent's normaliser (``environment.normalize``), or None (an algorithm without one too)."""
    norm = getattr(agent, "normalizer", None)
    return norm if isinstance(norm, Normalizer) else None


class Normalizer:
    """One agent's observation and return statistics (see the module docstring)."""

    def __init__(self, settings: NormalizeSettings, observation_space: spaces.Space[Any]) -> None:
        self.settings = settings
        keys = normalizable_keys(observation_space) if settings.obs else {}
        if settings.obs and not keys:
            raise AgileRLError(
                f"environment.normalize.obs: the observation space {observation_space} has no float Box part to "
                "normalise (discrete and image observations are not normalised); set obs: false"
            )
        self.structured = isinstance(observation_space, (spaces.Dict, spaces.Tuple))
        self.obs_rms = {k: RunningMeanStd(shape) for k, shape in keys.items()}
        self.ret_rms = RunningMeanStd(())
        #: The discounted return of each sub-env so far (reward scaling; restarts with each learn call).
        self.returns = np.zeros(0)

    # --- training: update, then normalise ---------------------------------------------------------
    def train_obs(self, obs: Any) -> Any:
        """Update the observation statistics with a batch from the env, then normalise it."""
        for key, rms in self.obs_rms.items():
            rms.update(self._part(obs, key))
        return self.normalize_obs(obs)

    def start_episodes(self, n: int) -> None:
        """New episodes in ``n`` sub-envs (a ``learn`` call's reset): the running returns restart."""
        self.returns = np.zeros(n)

    def train_reward(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Update the return statistics with this step's rewards, then scale them (float32)."""
        if not self.settings.reward:
            return np.asarray(reward, np.float32)
        reward = np.asarray(reward, np.float64)
        if self.returns.shape != reward.shape:
            self.returns = np.zeros(reward.shape)
        self.returns = self.returns * self.settings.gamma + reward
        self.ret_rms.update(self.returns)
        scaled = self.scale_reward(reward)
        self.returns[np.asarray(done, bool)] = 0.0
        return scaled

    # --- frozen: read the statistics only -----------------------------------------------------------
    def normalize_obs(self, obs: Any) -> Any:
        """A batch of raw observations as the networks see them (the statistics unchanged)."""
        if not self.obs_rms:
            return obs
        if not self.structured:
            return self._normalize(np.asarray(obs), self.obs_rms[WHOLE])
        items = obs.items() if isinstance(obs, Mapping) else enumerate(obs)
        out = {str(k): v for k, v in items}
        for key, rms in self.obs_rms.items():
            out[key] = self._normalize(np.asarray(out[key]), rms)
        return out

    def scale_reward(self, reward: np.ndarray) -> np.ndarray:
        """Rewards divided by the return's standard deviation and clipped (the statistics unchanged)."""
        if not self.settings.reward:
            return np.asarray(reward, np.float32)
        s = self.settings
        return np.clip(
            np.asarray(reward) / np.sqrt(self.ret_rms.var + s.epsilon), -s.clip_reward, s.clip_reward
        ).astype(np.float32)

    def batch(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """A replay batch of raw transitions (tensors) with its observations normalised and its
        rewards scaled by the current statistics (new tensors; the buffer is untouched)."""
        out = dict(batch)
        for field in ("obs", "next_obs"):
            if field in out and self.obs_rms:
                out[field] = self._torch_obs(out[field])
        if self.settings.reward and "reward" in out:
            s = self.settings
            std = float(np.sqrt(self.ret_rms.var + s.epsilon))
            out["reward"] = torch.clamp(out["reward"] / std, -s.clip_reward, s.clip_reward)
        return out

    def wrap_learn(self, learn: Callable[[Any], Mapping[str, Any]]) -> Callable[[Any], Mapping[str, Any]]:
        """``learn`` taking raw replay batches (each normalised by :meth:`batch` first)."""

        def normalized_learn(batch: Any) -> Mapping[str, Any]:
            return learn(self.batch(batch))

        return normalized_learn

    def module(self) -> NormalizeObs:
        """The frozen observation normalisation as a module (for the exported policy)."""
        if self.structured:
            raise AgileRLError("export: normalised Dict/Tuple observations cannot be exported (one tensor input)")
        rms = self.obs_rms.get(WHOLE)
        return NormalizeObs(rms.mean if rms else None, rms.var if rms else None, self.settings)

    # --- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "settings": asdict(self.settings),
            "obs_rms": {k: rms.state_dict() for k, rms in self.obs_rms.items()},
            "ret_rms": self.ret_rms.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key, saved in state["obs_rms"].items():
            self.obs_rms[key].load_state_dict(saved)
        self.ret_rms.load_state_dict(state["ret_rms"])

    @classmethod
    def from_state(cls, state: Mapping[str, Any], observation_space: spaces.Space[Any]) -> Normalizer:
        """A normaliser restored from :meth:`state_dict` (its settings included)."""
        norm = cls(NormalizeSettings(**state["settings"]), observation_space)
        norm.load_state_dict(state)
        return norm

    # --- helpers ------------------------------------------------------------------------------------
    def _part(self, obs: Any, key: str) -> np.ndarray:
        if not self.structured:
            return np.asarray(obs)
        return np.asarray(obs[key] if isinstance(obs, Mapping) else obs[int(key)])

    def _normalize(self, x: np.ndarray, rms: RunningMeanStd) -> np.ndarray:
        s = self.settings
        z = (x.astype(np.float64) - rms.mean) / np.sqrt(rms.var + s.epsilon)
        return np.clip(z, -s.clip_obs, s.clip_obs).astype(np.float32)

    def _torch_obs(self, x: Any) -> Any:
        s = self.settings
        if not self.structured:
            return _torch_normalize(x, self.obs_rms[WHOLE], s)
        out = dict(x)
        for key, rms in self.obs_rms.items():
            out[key] = _torch_normalize(out[key], rms, s)
        return out


def _torch_normalize(x: torch.Tensor, rms: RunningMeanStd, s: NormalizeSettings) -> torch.Tensor:
    mean = torch.as_tensor(rms.mean, dtype=torch.float64, device=x.device)
    std = torch.as_tensor(np.sqrt(rms.var + s.epsilon), dtype=torch.float64, device=x.device)
    return torch.clamp((x.double() - mean) / std, -s.clip_obs, s.clip_obs).float()


class NormalizeObs(nn.Module):
    """``clip((obs - mean) / sqrt(var + epsilon))`` with frozen statistics (identity without them)."""

    def __init__(self, mean: np.ndarray | None, var: np.ndarray | None, settings: NormalizeSettings) -> None:
        super().__init__()
        self.active = mean is not None and var is not None
        self.clip = float(settings.clip_obs)
        if self.active:
            assert mean is not None and var is not None
            self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float64))
            self.register_buffer("std", torch.as_tensor(np.sqrt(var + settings.epsilon), dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return obs
        z = (obs.double() - self.get_buffer("mean")) / self.get_buffer("std")
        return torch.clamp(z, -self.clip, self.clip).float()


class NormalizedPolicy(nn.Module):
    """An exported policy that takes raw observations: normalisation, then the greedy policy."""

    def __init__(self, normalize: NormalizeObs, policy: nn.Module) -> None:
        super().__init__()
        self.normalize = normalize
        self.policy = policy

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        # A masked policy's export takes the action mask second (it is not normalised).
        if action_mask is None:
            return self.policy(self.normalize(obs))  # type: ignore[no-any-return]
        return self.policy(self.normalize(obs), action_mask)  # type: ignore[no-any-return]
