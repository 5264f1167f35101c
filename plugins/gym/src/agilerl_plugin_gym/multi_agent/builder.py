"""The ``multi_agent`` builder: per-agent spaces + network configs -> a live IPPO/MADDPG/MATD3.

Network configs come from ``algorithm.net_config`` (one config for all, or one per agent id / group
name) or else the manifest's ``network`` section. With ``share_groups`` the agents of a group
(``speaker_0``, ``speaker_1`` -> ``speaker``) get one set of networks, so they must have the same
spaces and the same config; every mismatch is an :class:`~agilerl.errors.AgileRLError` raised here,
before training starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gymnasium import spaces

from agilerl.builders import AlgorithmBuilder, AlgorithmBuildRuntime
from agilerl.errors import AgileRLError
from agilerl.models.base import AlgorithmSpec
from agilerl_plugin_gym.multi_agent.specs import group_of, is_per_agent, net_config_agent_problem, network_configs
from agilerl_plugin_gym.sections import NetworkSpec
from agilerl_plugin_gym.sections.encoders import ENCODERS, default_kind
from agilerl_plugin_gym.space_kinds import is_image_space
from agilerl_plugin_gym.spec_checks import encoder_kind_problem

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest


class MultiAgentConfigError(AgileRLError):
    """Per-agent spaces or network configs that do not fit together."""


def resolve_networks(
    spec: AlgorithmSpec,
    observation_spaces: Mapping[str, spaces.Space],
    action_spaces: Mapping[str, spaces.Space],
    network: NetworkSpec | None,
) -> tuple[dict[str, str], dict[str, NetworkSpec | None]]:
    """``(keys, net_specs)``: agent id -> network key, and network key -> its ``NetworkSpec``."""
    agents = list(observation_spaces)
    share = bool(getattr(spec, "share_groups", False))
    keys = {a: group_of(a) if share else a for a in agents}
    if share:
        for key in dict.fromkeys(keys.values()):
            members = [a for a in agents if keys[a] == key]
            first = members[0]
            for other in members[1:]:
                for kind, table in (("observation", observation_spaces), ("action", action_spaces)):
                    if table[other] != table[first]:
                        raise MultiAgentConfigError(
                            f"algorithm.share_groups: agents {first!r} and {other!r} of group {key!r} have different "
                            f"{kind} spaces ({table[first]} vs {table[other]}); they cannot share networks. "
                            "Set share_groups: false."
                        )
    raw = getattr(spec, "net_config", None)
    configs = network_configs(raw)
    net_specs: dict[str, NetworkSpec | None] = {}
    if configs is None:
        net_specs = dict.fromkeys(keys.values(), network)
    elif not is_per_agent(raw):
        shared = NetworkSpec.model_validate(configs)
        net_specs = dict.fromkeys(keys.values(), shared)
    else:
        refused = net_config_agent_problem(raw, agents)  # the rule validation applies to the env's agents
        if refused is not None:
            raise MultiAgentConfigError(str(refused))
        for key in dict.fromkeys(keys.values()):
            members = [a for a in agents if keys[a] == key]
            found: dict[str, Any] = {}
            for a in members:
                cfg = configs[a] if a in configs else configs[group_of(a)]  # type: ignore[index,operator]
                found[a] = cfg
            distinct = {repr(sorted(c.items())) for c in found.values()}
            if len(distinct) > 1:
                raise MultiAgentConfigError(
                    f"algorithm.net_config: agents {sorted(found)} share the networks of group {key!r} "
                    "(share_groups: true) but are given different configs; give the group one config, or set "
                    "share_groups: false."
                )
            net_specs[key] = NetworkSpec.model_validate(next(iter(found.values())))
    for a in agents:
        ns = net_specs[keys[a]]
        enc = ns.encoder_config if ns is not None else None
        obs_space = observation_spaces[a]
        entry = ENCODERS.get(enc.arch) if enc is not None else None
        if entry is None:
            continue
        refused = encoder_kind_problem(entry.arch, multi_agent=True)
        if refused is not None:
            raise MultiAgentConfigError(f"network for agent {a!r}: {refused}")
        if entry.reads == "image" and not is_image_space(obs_space):
            raise MultiAgentConfigError(
                f"network for agent {a!r}: encoder arch {entry.arch!r} needs image (H x W x C) observations, but its "
                f"observation space is {obs_space}; use arch: {default_kind('vector')} for this agent (net_config per "
                "agent)."
            )
    return keys, net_specs


class MultiAgentBuilder(AlgorithmBuilder):
    """Builds IPPO / MADDPG / MATD3 from per-agent spaces."""

    paradigm = "multi_agent"

    @classmethod
    def build(
        cls,
        spec: AlgorithmSpec,
        observation_spaces: Mapping[str, spaces.Space] | None = None,
        action_spaces: Mapping[str, spaces.Space] | None = None,
        *,
        runtime: AlgorithmBuildRuntime | None = None,
        network: NetworkSpec | None = None,
        sum_scores: bool | None = None,
    ) -> Any:
        """Build a multi-agent algorithm from per-agent observation and action spaces."""
        if not observation_spaces or not action_spaces:
            raise ValueError("a multi-agent algorithm needs observation_spaces and action_spaces (agent id -> space)")
        if set(observation_spaces) != set(action_spaces):
            raise MultiAgentConfigError(
                f"observation and action spaces name different agents: {sorted(observation_spaces)} vs "
                f"{sorted(action_spaces)}"
            )
        runtime = runtime or AlgorithmBuildRuntime()
        keys, net_specs = resolve_networks(spec, observation_spaces, action_spaces, network)
        import torch

        if runtime.seed is not None:
            torch.manual_seed(runtime.seed)
        algo_cls = cls.algo_class(spec)
        try:
            return algo_cls(
                spec,
                dict(observation_spaces),
                dict(action_spaces),
                index=runtime.index,
                device=runtime.device,
                net_specs=net_specs,
                keys=keys,
                sum_scores=True if sum_scores is None else sum_scores,
            )
        except TypeError as exc:
            raise MultiAgentConfigError(f"cannot build {spec.name}: {exc}") from exc

    @classmethod
    def build_for_run(
        cls, spec: AlgorithmSpec, *, env: Any, manifest: TrainingManifest, runtime: AlgorithmBuildRuntime
    ) -> Any:
        obs_spaces = getattr(env, "observation_spaces", None)
        act_spaces = getattr(env, "action_spaces", None)
        if not isinstance(obs_spaces, Mapping) or not isinstance(act_spaces, Mapping):
            raise MultiAgentConfigError(
                f"{spec.name} is multi-agent but the environment {manifest.environment.label!r} is not a PettingZoo "
                "env (it has no per-agent observation_spaces); use a single-agent algorithm for it."
            )
        return cls.build(
            spec,
            obs_spaces,
            act_spaces,
            runtime=runtime,
            network=manifest.network,
            sum_scores=manifest.training.sum_scores,
        )


__all__ = ["MultiAgentBuilder", "MultiAgentConfigError", "resolve_networks"]
