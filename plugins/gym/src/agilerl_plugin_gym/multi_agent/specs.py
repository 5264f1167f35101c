"""Manifest sections of the multi-agent algorithms: pydantic only, cheap to import (no torch).

Field names and defaults follow AgileRL's manifests (``IPPO``, ``MADDPG``, ``MATD3``), so AgileRL
users' files validate unchanged. Fields that are ours alone say so in their description.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import Field, ValidationError, field_validator

from agilerl.errors import Problem, closest
from agilerl.models.base import Mutable
from agilerl_plugin_gym.check_env import (
    batch_problems,
    built_env_problems,
    close_quietly,
    env_config_problem,
    env_option_problems,
    first_steps_problem,
    is_custom,
    make_problem,
    wants_check,
)
from agilerl_plugin_gym.multi_agent.names import moved_problem, resolve_module_name
from agilerl_plugin_gym.sections import NetworkSpec
from agilerl_plugin_gym.spec_base import MultiAgentAlgorithmSpec
from agilerl_plugin_gym.spec_checks import (
    ACTIVATION_NAMES,
    RL_SYNONYMS,
    buffer_problems,
    compat_problems,
    network_problems,
    normalize_problems,
)

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest

_NETWORK_FIELDS = set(NetworkSpec.model_fields)


def network_configs(net_config: dict[str, Any] | None) -> dict[str, dict[str, Any]] | dict[str, Any] | None:
    """Split ``net_config`` into either one shared config or a config per agent/group id.

    A mapping whose keys are all ``NetworkSpec`` fields is one config for every agent; otherwise
    every key names an agent (``speaker_0``) or a group (``speaker``) and maps to its own config.
    """
    if not net_config:
        return None
    if set(net_config) <= _NETWORK_FIELDS:
        return dict(net_config)
    return {str(k): dict(v) if isinstance(v, dict) else v for k, v in net_config.items()}


def is_per_agent(net_config: dict[str, Any] | None) -> bool:
    return bool(net_config) and not set(net_config or {}) <= _NETWORK_FIELDS


def group_of(agent_id: str) -> str:
    """The group an agent belongs to: its id without the trailing ``_<number>`` (``speaker_0`` -> ``speaker``)."""
    head, sep, tail = agent_id.rpartition("_")
    return head if sep and tail.isdigit() and head else agent_id


def _looks_like_module(name: str) -> bool:
    return "." in name and ":" not in name and "/" not in name and not name.endswith(("-v0", "-v1"))


def _did_you_mean(name: str) -> str:
    """A close sibling module of ``name``, found without importing anything."""
    import pkgutil

    parent, _, _ = name.rpartition(".")
    try:
        spec = importlib.util.find_spec(parent) if parent else None
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return ""
    siblings = [f"{parent}.{m.name}" for m in pkgutil.iter_modules(spec.submodule_search_locations)]
    hint = closest(name, siblings)
    return f" (did you mean {hint!r}?)" if hint else ""


def turn_based_problem(module: Any, name: str, algo_name: str) -> str | None:
    """A module with only an AEC ``env()`` that PettingZoo cannot run as a parallel env (turn-based
    games such as ``pettingzoo.classic.tictactoe_v3``): training would refuse it, so validation does."""
    if hasattr(module, "parallel_env") or not hasattr(module, "env"):
        return None
    raw = getattr(module, "raw_env", None)
    metadata = getattr(raw, "metadata", None)
    if not isinstance(metadata, dict) or metadata.get("is_parallelizable", False):
        return None  # parallelisable (or unknown until built: checked when the env is made)
    return (
        f"{name!r} is a turn-based (AEC) PettingZoo environment that cannot run as a parallel one "
        f"(its metadata says is_parallelizable: False): {algo_name} needs agents that act simultaneously "
        "(a module with parallel_env(), e.g. mpe2.simple_spread_v3 or pettingzoo.butterfly.pistonball_v6)"
    )


def net_config_agent_problem(net_config: dict[str, Any] | None, agents: list[str]) -> Problem | None:
    """A per-agent ``net_config`` whose keys the env's agents (and their groups) do not match: a key
    that names no agent or group (did-you-mean), or an agent with no entry. None when it fits, or
    when ``net_config`` is one config for all."""
    if not is_per_agent(net_config):
        return None
    configs = network_configs(net_config) or {}
    valid = sorted(set(agents) | {group_of(a) for a in agents})
    for name in configs:
        if name not in valid:
            hint = closest(name, valid)
            return Problem(f"algorithm.net_config.{name}", (
                f"no agent or group is called {name!r}" + (f"; did you mean {hint!r}?" if hint else "")
                + f" The env's agents and groups are: {', '.join(valid)}."))  # fmt: skip
    for a in agents:
        if a not in configs and group_of(a) not in configs:
            return Problem("algorithm.net_config", (
                f"has no entry for agent {a!r}: give one per agent or group (here: {', '.join(valid)}), "
                "or one config without agent keys for all."))  # fmt: skip
    return None


def net_config_agents_problems(env: Any, net_config: dict[str, Any] | None) -> list[Problem]:
    """:func:`net_config_agent_problem` against the agent list of the env validation built."""
    if not is_per_agent(net_config):
        return []
    agents = [str(a) for a in (getattr(env, "possible_agents", None) or getattr(env, "agents", []))]
    problem = net_config_agent_problem(net_config, agents) if agents else None
    return [problem] if problem else []


def built_pettingzoo_problems(manifest: TrainingManifest, net_config: dict[str, Any] | None) -> list[Problem]:
    """Every check that needs the PettingZoo env itself, on one env built once and closed once: a
    custom env's API and action-mask checks, a registered env's ``env_config`` (refused by its
    constructor, or failing its first steps) and a per-agent ``net_config`` against its agents.
    No env is built when none of them applies."""
    env_spec = manifest.environment
    custom = wants_check(manifest)
    options = bool(getattr(env_spec, "env_config", None)) and not is_custom(env_spec)
    if not (custom or options or is_per_agent(net_config)):
        return []
    if options and (wrong := env_option_problems(env_spec, multi_agent=True)):
        return wrong
    from agilerl_plugin_gym.envs import make_single_env  # deferred: gymnasium/PettingZoo, only when needed

    try:
        env = make_single_env(env_spec, multi_agent=True)  # type: ignore[arg-type]
    except Exception as exc:
        if custom:
            return [make_problem(exc)]
        if options:  # the module was found (pettingzoo_problems): its constructor refused an option
            return [env_config_problem(env_spec, exc, multi_agent=True)]
        return []  # a failing env is reported by the env checks (or at train) in its own words
    try:
        if custom:
            problems = built_env_problems(env, manifest, multi_agent=True)
        else:
            stepped = first_steps_problem(env, env_spec, multi_agent=True)
            problems = [stepped] if stepped else []
        return problems or net_config_agents_problems(env, net_config)
    finally:
        close_quietly(env)


def pettingzoo_problems(manifest: TrainingManifest, algo_name: str) -> list[Problem]:
    """Environment checks a multi-agent algorithm makes at validation time (no env is built)."""
    env = manifest.environment
    problems: list[Problem] = []
    if env.env_type != "gym":
        problems.append(Problem(
            "environment.env_type",
            f"{algo_name} trains on PettingZoo environments given as env_type 'gym' "
            f"(name: a PettingZoo module such as mpe2.simple_speaker_listener_v4); got {env.env_type!r}",
        ))  # fmt: skip
        return problems
    if getattr(env, "entrypoint", None) or getattr(env, "factory", None):
        return problems  # a custom env: checked when it is built
    name = str(getattr(env, "name", ""))
    moved = moved_problem(name)
    if moved:
        problems.append(Problem("environment.name", moved))
        return problems
    name = resolve_module_name(name)
    found = False
    try:
        found = importlib.util.find_spec(name) is not None if name and not name.startswith(".") else False
    except ImportError as exc:  # a parent package that refuses to import says why (e.g. "moved to mpe2")
        problems.append(Problem("environment.name", f"cannot import {name!r}: {exc}"))
        return problems
    except ValueError:
        found = False
    if found and "." in name:
        # The module is there: import it (cheap, no torch) so a package that moved says where to.
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            problems.append(Problem("environment.name", f"cannot import {name!r}: {exc}"))
            return problems
        turn_based = turn_based_problem(module, name, algo_name)
        if turn_based:
            problems.append(Problem("environment.name", turn_based))
    if not found:
        hint = (
            f"{name!r} looks like a gymnasium id: {algo_name} is multi-agent; train it with a single-agent "
            "algorithm (PPO, DQN, DDPG, TD3), or give a PettingZoo module"
            if not _looks_like_module(name)
            else f"no module {name!r} is installed" + _did_you_mean(name)
        )
        problems.append(Problem(
            "environment.name",
            f"{hint}. A multi-agent environment is a PettingZoo module with parallel_env() or env(), "
            "e.g. mpe2.simple_speaker_listener_v4 or pettingzoo.butterfly.pistonball_v6; or set "
            "environment.entrypoint to 'module:callable' returning a PettingZoo env.",
        ))  # fmt: skip
    return problems


def net_config_problems(net_config: dict[str, Any] | None) -> list[Problem]:
    """Each per-agent network config must be a valid ``network`` section."""
    problems: list[Problem] = []
    if not net_config:
        return problems
    configs = network_configs(net_config)
    items = [("", configs)] if not is_per_agent(net_config) else list((configs or {}).items())
    for key, cfg in items:
        where = "algorithm.net_config" + (f".{key}" if key else "")
        if not isinstance(cfg, dict):
            problems.append(
                Problem(where, f"must be a network mapping (encoder_config, head_config, ...), got {cfg!r}")
            )
            continue
        unknown = set(cfg) - _NETWORK_FIELDS
        if unknown and key:
            problems.append(Problem(
                where,
                f"unknown network field(s) {sorted(unknown)}; a per-agent config takes {sorted(_NETWORK_FIELDS)}",
            ))  # fmt: skip
            continue
        try:
            NetworkSpec.model_validate(cfg)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                loc = ".".join(str(x) for x in err["loc"])
                problems.append(Problem(f"{where}.{loc}" if loc else where, err["msg"]))
    return problems


class _MultiAgentSpecBase(MultiAgentAlgorithmSpec):
    field_synonyms: ClassVar[dict[str, str]] = RL_SYNONYMS
    training_fields: ClassVar[frozenset[str]] = frozenset({"sum_scores"})
    upstream_notes: ClassVar[dict[str, str]] = {
        "torch_compiler": "Refused when given (not supported yet).",
        "action_std_init": "AgileRL's meaning (initial log-std); default -0.51 (std 0.6).",
        "action_batch_size": "Refused when given (not supported yet).",
        "vect_noise_dim": "Noise is one vector per env: only 1 or environment.num_envs.",
        "share_groups": "Ours.",
    }
    # Every operator (AgileRL skips act_mut for IPPO, MADDPG and MATD3: docs/hpo.md).
    activation_choices: ClassVar[frozenset[str] | None] = ACTIVATION_NAMES

    share_groups: bool = Field(
        default=False,
        description="(agilerl) Agents of one group (ids sharing a prefix: speaker_0, speaker_1 -> speaker) "
        "share one actor (and critic). They must have the same spaces.",
    )
    net_config: dict[str, Any] | None = Field(
        default=None,
        description="One network config for every agent, or a mapping agent-or-group id -> config. "
        "Overrides the manifest's `network` section.",
    )

    @field_validator("torch_compiler")
    @classmethod
    def _no_compiler(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError("torch.compile of the networks is not supported yet; remove it")
        return value

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        network = network_problems(manifest, multi_agent=True)
        network += buffer_problems(manifest)
        network += compat_problems(self, manifest)
        network += normalize_problems(manifest, supported=False, who=self.name)
        if network:  # a feature this plugin lacks: that is the answer, whatever the env
            return network

        problems = net_config_problems(self.net_config) + pettingzoo_problems(manifest, self.name)
        problems += batch_problems(self, manifest)
        return problems or built_pettingzoo_problems(manifest, self.net_config)


class IPPOSpec(_MultiAgentSpecBase):
    """Independent PPO: one clipped-objective actor-critic per agent (or per group), decentralised."""

    regime: ClassVar[str] = "on_policy"
    default_evo_steps: ClassVar[int] = 10_000
    stored_steps_field: ClassVar[str | None] = "learn_step"  # one rollout is stored per update
    #: ``action_masking: true`` masks its logits (MADDPG/MATD3 have the field only to refuse it).
    masks_actions: ClassVar[bool] = True
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "ent_coef", "batch_size")

    num_envs: Annotated[int, Field(ge=1, description="Copied from environment.num_envs.")] = 1
    learn_step: Annotated[
        int, Field(ge=1, description="Env steps (all envs) per rollout before an update."), Mutable(512, 8192)
    ] = 4096
    lr: Annotated[float, Field(gt=0, description="Adam learning rate of actor and critic."), Mutable(6.25e-5, 1e-2)] = (
        1e-4
    )
    gae_lambda: Annotated[float, Field(ge=0, le=1, description="GAE lambda."), Mutable(0.9, 1.0)] = 0.95
    action_std_init: float = Field(
        default=-0.5108, description="Initial log-std of continuous actions, as in AgileRL; -0.51 is std 0.6."
    )
    clip_coef: Annotated[float, Field(ge=0, description="PPO ratio clip."), Mutable(0.05, 0.35)] = 0.2
    ent_coef: Annotated[float, Field(ge=0, description="Entropy bonus weight."), Mutable(1e-3, 0.1)] = 0.01
    vf_coef: Annotated[float, Field(ge=0, description="Value loss weight."), Mutable(0.1, 1.0)] = 0.5
    max_grad_norm: Annotated[float, Field(ge=0, description="Gradient norm clip."), Mutable(0.1, 1.0)] = 0.5
    target_kl: Annotated[float | None, Field(ge=0, description="Stop epochs early past this KL.")] = None
    update_epochs: Annotated[int, Field(ge=1, description="Passes over each rollout."), Mutable(1, 10)] = 4
    normalize_advantages: bool = Field(
        default=True, description="(agilerl) Normalise advantages per minibatch (as PPO's field)."
    )
    clip_vloss: bool = Field(default=False, description="(agilerl) Clip the value loss around the old values.")
    action_batch_size: Annotated[
        int | None, Field(ge=1, description="(AgileRL) batched action selection: not supported yet.")
    ] = None
    share_groups: bool = Field(
        default=True,
        description="Agents of one group (speaker_0, speaker_1 -> speaker) share one actor-critic.",
    )
    action_masking: bool = Field(
        default=False,
        description="Mask illegal actions (Discrete): each agent's env reports them in infos[agent]['action_mask'] "
        "or the 'action_mask' key of its Dict observation (PettingZoo's {'observation', 'action_mask'}); masked "
        "logits in rollouts, updates and greedy actions.",
    )

    @field_validator("action_batch_size")
    @classmethod
    def _no_action_batches(cls, value: int | None) -> int | None:
        if value is not None:
            raise ValueError("not supported yet (actions are chosen for all envs at once); remove it")
        return value


class MADDPGSpec(_MultiAgentSpecBase):
    """MADDPG: deterministic (or Gumbel-softmax) decentralised actors, centralised critics."""

    masks_actions: ClassVar[bool] = False

    action_masking: bool = Field(
        default=False,
        description="Not supported: MADDPG and MATD3 do not mask actions (IPPO does); true is refused.",
    )

    @field_validator("action_masking")
    @classmethod
    def _no_action_masking(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "MADDPG and MATD3 do not mask actions (their actors' outputs are not sampled from logits a mask "
                "could restrict); use IPPO with action_masking: true, or remove it"
            )
        return value

    regime: ClassVar[str] = "off_policy"
    default_evo_steps: ClassVar[int] = 10_000
    default_mutable: ClassVar[tuple[str, ...]] = ("lr_actor", "lr_critic", "batch_size")
    training_fields: ClassVar[frozenset[str]] = frozenset({"sum_scores", "learning_delay"})

    learn_step: Annotated[int, Field(ge=1, description="Env steps (all envs) per gradient update."), Mutable(1, 10)] = 5
    gamma: Annotated[float, Field(ge=0, le=1, description="Discount factor."), Mutable(0.9, 0.9999)] = 0.95
    lr_actor: Annotated[float, Field(gt=0, description="Actor Adam learning rate."), Mutable(6.25e-5, 1e-2)] = 1e-3
    lr_critic: Annotated[float, Field(gt=0, description="Critic Adam learning rate."), Mutable(6.25e-5, 1e-2)] = 1e-2
    tau: Annotated[float, Field(gt=0, le=1, description="Soft target update rate."), Mutable(1e-4, 1e-2)] = 0.01
    O_U_noise: bool = Field(default=True, description="Ornstein-Uhlenbeck (True) or Gaussian exploration noise.")
    expl_noise: Annotated[float, Field(ge=0, description="Exploration noise scale (continuous actions).")] = 0.1
    mean_noise: float = Field(default=0.0, description="Noise mean.")
    theta: Annotated[float, Field(ge=0, description="OU mean reversion rate.")] = 0.15
    dt: Annotated[float, Field(gt=0, description="OU time step.")] = 0.01
    vect_noise_dim: Annotated[
        int, Field(ge=1, description="Noise vectors: one per env always (1 or environment.num_envs accepted).")
    ] = 1
    max_grad_norm: Annotated[
        float | None, Field(ge=0, description="(agilerl) clip gradients (None: off)."), Mutable(0.1, 1.0)
    ] = 0.5


class MATD3Spec(MADDPGSpec):
    """MATD3: MADDPG with twin critics, delayed actor updates and target policy smoothing."""

    policy_freq: Annotated[int, Field(ge=1, description="Critic updates per actor update."), Mutable(1, 10)] = 2
    policy_noise: Annotated[float, Field(ge=0, description="(agilerl) target smoothing noise (continuous).")] = 0.2
    noise_clip: Annotated[float, Field(ge=0, description="(agilerl) clip of target smoothing noise.")] = 0.5


__all__ = ["IPPOSpec", "MADDPGSpec", "MATD3Spec", "group_of", "network_configs"]
