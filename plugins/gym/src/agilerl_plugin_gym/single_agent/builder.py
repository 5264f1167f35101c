"""The builder for the ``single_agent`` paradigm: spec + spaces -> a live PPO/DQN/DDPG/TD3
(``PPO`` with ``recurrent: true``: :class:`~agilerl_plugin_gym.single_agent.ppo_recurrent.RecurrentPPO`)."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from agilerl.builders import AlgorithmBuilder, AlgorithmBuildRuntime
from agilerl.errors import AgileRLError
from agilerl.models.base import AlgorithmSpec
from agilerl.models.manifest import TrainingManifest
from agilerl_plugin_gym.masking import MASK_KEY
from agilerl_plugin_gym.normalization import Normalizer, NormalizeSettings
from agilerl_plugin_gym.sections import NetworkSpec


def normalize_settings(spec: AlgorithmSpec, manifest: TrainingManifest | None) -> NormalizeSettings | None:
    """The manifest's ``environment.normalize`` as settings (its ``gamma`` defaulting to the
    algorithm's), or None when it is off."""
    norm = getattr(manifest.environment, "normalize", None) if manifest is not None else None
    if norm is None:
        return None
    gamma = norm.gamma if norm.gamma is not None else float(getattr(spec, "gamma", 0.99))
    return NormalizeSettings(
        obs=norm.obs, reward=norm.reward, clip_obs=norm.clip_obs, clip_reward=norm.clip_reward,
        epsilon=norm.epsilon, gamma=gamma,
    )  # fmt: skip


def network_spec(spec: AlgorithmSpec, manifest: TrainingManifest | None) -> NetworkSpec | None:
    """The manifest's ``network`` section, else the algorithm's ``net_config``, else None (defaults)."""
    if manifest is not None and manifest.network is not None:
        return manifest.network
    raw = getattr(spec, "net_config", None)
    if raw:
        try:
            return NetworkSpec.model_validate(raw)
        except Exception as exc:
            raise AgileRLError(f"algorithm.net_config: invalid network config: {exc}") from exc
    return None


class SingleAgentBuilder(AlgorithmBuilder):
    """Single-agent reinforcement learning."""

    paradigm = "single_agent"

    @classmethod
    def build(
        cls,
        spec: AlgorithmSpec,
        observation_space: spaces.Space[Any] | None = None,
        action_space: spaces.Space[Any] | None = None,
        *,
        runtime: AlgorithmBuildRuntime | None = None,
        **networks: Any,
    ) -> Any:
        """Build a single-agent algorithm for the given spaces.

        :raises ValueError: if a space is missing.
        :raises UnsupportedSpaceError: if the algorithm cannot act in these spaces.
        """
        if observation_space is None or action_space is None:
            raise ValueError("SingleAgentBuilder.build needs observation_space and action_space")
        if networks:
            raise AgileRLError(
                f"pre-built networks ({', '.join(networks)}) are not supported; describe them in the network section"
            )
        runtime = runtime or AlgorithmBuildRuntime()
        algo_cls = cls.algo_class(spec)
        if getattr(spec, "recurrent", False):  # the manifest's PPO with recurrent: true is a class of its own
            # deferred: this module is named at registration, which imports no torch
            from agilerl_plugin_gym.single_agent.ppo_recurrent import PPO, RecurrentPPO

            if algo_cls is PPO:
                algo_cls = RecurrentPPO
        agent = algo_cls(
            spec,
            observation_space,
            action_space,
            index=runtime.index,
            device=runtime.device,
            net_spec=network_spec(spec, runtime.manifest),
        )
        settings = normalize_settings(spec, runtime.manifest)
        if settings is not None:  # each member its own statistics (environment.normalize)
            agent.normalizer = Normalizer(settings, observation_space)
        return agent

    @classmethod
    def build_for_run(
        cls, spec: AlgorithmSpec, *, env: Any, manifest: TrainingManifest, runtime: AlgorithmBuildRuntime
    ) -> Any:
        obs_space = getattr(env, "single_observation_space", None) or env.observation_space
        act_space = getattr(env, "single_action_space", None) or env.action_space
        if (
            getattr(spec, "action_masking", False)
            and isinstance(obs_space, spaces.Dict)
            and MASK_KEY in obs_space.spaces
        ):
            # The mask rides in the observation (PettingZoo's convention): the policy reads the rest.
            obs_space = spaces.Dict({k: v for k, v in obs_space.spaces.items() if k != MASK_KEY})
        return cls.build(spec, obs_space, act_space, runtime=runtime)
