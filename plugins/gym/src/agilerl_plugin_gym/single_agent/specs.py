"""Manifest ``algorithm`` sections of the single-agent algorithms (pydantic only: cheap to import).

Field names and defaults follow AgileRL's manifests, so AgileRL users' files validate unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from agilerl.errors import Problem
from agilerl_plugin_gym.env_spec import GymEnvSpec
from agilerl_plugin_gym.sections.training import rl_training
from agilerl_plugin_gym.spec_base import (
    ANY_ACTIONS,
    CONTINUOUS_ACTIONS,
    DISCRETE_ACTIONS,
    SingleAgentAlgorithmSpec,
    SpaceRules,
)
from agilerl_plugin_gym.spec_checks import (
    ACTIVATION_NAMES,
    RL_HPO_RANGES,
    RL_SYNONYMS,
    buffer_problems,
    compat_problems,
    missing_env_package,
    namespace_package_problem,
    network_problems,
)

if TYPE_CHECKING:
    from agilerl.models import TrainingManifest


class GymAlgorithmSpec(SingleAgentAlgorithmSpec):
    """Base of this plugin's single-agent specs: shared validation-time checks."""

    field_synonyms: ClassVar[dict[str, str]] = RL_SYNONYMS
    # Every operator, act_mut included (AgileRL skips act_mut for PPO, DDPG and TD3: docs/hpo.md).
    activation_choices: ClassVar[frozenset[str] | None] = ACTIVATION_NAMES
    #: Replay variants the algorithm learns from: "per" (replay_buffer.per_buffer), "n_step" (n_step_buffer).
    replay_features: ClassVar[frozenset[str]] = frozenset()

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        problems: list[Problem] = []
        if type(self).regime == "off_policy" and rl_training(manifest).experience_sharing is False:
            problems.append(Problem(
                "training.experience_sharing",
                "false is not supported yet: an off-policy population shares one replay buffer; "
                "remove the field or set it to true",
            ))  # fmt: skip
        problems += network_problems(manifest)
        problems += buffer_problems(manifest, self.name, type(self).replay_features, getattr(self, "n_step", None))
        problems += compat_problems(self, manifest)
        if problems:  # a feature this plugin lacks: that is the answer, whatever the env
            return problems
        env, env_type = manifest.environment, type(self).default_env_type
        if env.env_type != env_type:
            message = f"{self.name} trains on {env_type} environments (env_type: {env_type})"
            problems.append(Problem("environment.env_type", message))
            return problems
        if not isinstance(env, GymEnvSpec):  # another class serving env_type gym: it checks its own names
            return problems
        uses_registry = not (env.entrypoint or env.factory or env.custom)
        if uses_registry and ":" not in env.env_id:
            # Importing gymnasium's registry is cheap (no torch): catch a typo before anything runs.
            from agilerl_plugin_gym.envs import GymEnvError, check_gym_id

            missing = namespace_package_problem(env.env_id)
            try:
                if missing is None:
                    check_gym_id(env.env_id)
                    missing = missing_env_package(env.env_id)
            except GymEnvError as exc:
                problems.append(Problem("environment.name", str(exc).removeprefix("environment.name: ")))
            if missing is not None:
                problems.append(Problem("environment.name", missing))
        if not problems:
            problems += _space_problems(type(self).space_rules, self.name, env, manifest)
        from agilerl_plugin_gym.check_env import batch_problems, make_and_check

        problems += batch_problems(self, manifest)
        return problems or make_and_check(manifest, multi_agent=False)


def _space_problems(
    rules: SpaceRules | None, algo: str, env: GymEnvSpec, manifest: TrainingManifest | None = None
) -> list[Problem]:
    """Make one env as the run will (wrappers included) and check the algorithm takes its spaces,
    and that the ``network`` section's encoder fits the observation space.

    An env that cannot be made is reported when it is ``GymEnvError`` (a bad entrypoint, factory or
    wrapper path); anything else the env's own code raises is left for the run to report in full.
    """
    from agilerl_plugin_gym.envs import GymEnvError, make_single_env
    from agilerl_plugin_gym.single_agent.spaces import UnsupportedSpaceError, check_recurrent_observation_space

    if rules is None:
        return []
    try:
        made = make_single_env(env)
    except GymEnvError as exc:  # "environment.entrypoint: ..." -> that field's path
        path, sep, message = str(exc).partition(": ")
        return [Problem(path, message) if sep and path.startswith("environment") else Problem("environment", str(exc))]
    except Exception:  # the env's own failure: the run reports it with its traceback
        return []
    from agilerl_plugin_gym.encoder_rules import EncoderSpaceError, check_network_for_space

    try:
        rules.check(algo, made.observation_space, made.action_space)
        if manifest is not None and getattr(manifest.algorithm, "recurrent", False):
            check_recurrent_observation_space(made.observation_space)
        if manifest is not None:
            check_network_for_space(manifest.network, made.observation_space)
    except UnsupportedSpaceError as exc:
        return [Problem("environment", str(exc).removeprefix("environment: "))]
    except EncoderSpaceError as exc:
        path, sep, message = str(exc).partition(": ")
        return [Problem(path, message) if sep and path.startswith("network") else Problem("network", str(exc))]
    finally:
        made.close()
    return []


class PPOSpec(GymAlgorithmSpec):
    """Proximal Policy Optimisation (clipped objective, GAE), discrete or continuous actions."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "on_policy"
    space_rules: ClassVar[SpaceRules | None] = ANY_ACTIONS
    default_evo_steps: ClassVar[int] = 10_000
    stored_steps_field: ClassVar[str | None] = "learn_step"  # one rollout is stored per update
    hpo_ranges: ClassVar[dict[str, tuple[float, float]]] = {
        **RL_HPO_RANGES,
        "learn_step": (512, 8192),
        "gae_lambda": (0.8, 0.99),
        "clip_coef": (0.05, 0.35),
        "ent_coef": (1e-3, 0.1),
        "vf_coef": (0.1, 1.0),
        "max_grad_norm": (0.1, 5.0),
        "update_epochs": (1, 10),
    }
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    upstream_notes: ClassVar[dict[str, str]] = {
        "action_std_init": "AgileRL's meaning (initial log-std, any float); default -0.51 (std 0.6).",
        "recurrent": "AgileRL's meaning: an LSTM encoder, hidden state through rollouts, truncated BPTT.",
        "rollout_buffer_config": "Refused when given (not supported yet).",
        "max_seq_len": "AgileRL's meaning (None: whole episode pieces); with recurrent: true only.",
        "bptt_sequence_type": "AgileRL's three kinds; chunked keeps each piece's short tail (AgileRL drops it), "
        "fifty_percent_overlap adds a window ending at the tail; non-chunked with recurrent: true only.",
    }

    num_envs: Annotated[int, Field(ge=1, description="Parallel envs (copied from environment.num_envs).")] = 1
    learn_step: Annotated[int, Field(ge=1, description="Env steps (all envs together) per rollout.")] = 4096
    batch_size: Annotated[int, Field(ge=1, description="Minibatch size of each gradient step.")] = 64
    lr: Annotated[float, Field(gt=0, description="Adam learning rate.")] = 1e-4
    gae_lambda: Annotated[float, Field(ge=0, le=1, description="GAE lambda (bias/variance of advantages).")] = 0.95
    action_std_init: float = Field(
        default=-0.5108,
        description="Initial log-std of the Gaussian policy (Box actions), as in AgileRL; -0.51 is std 0.6.",
    )
    clip_coef: Annotated[float, Field(gt=0, description="PPO ratio clip range (and value clip range).")] = 0.2
    ent_coef: Annotated[float, Field(ge=0, description="Entropy bonus coefficient.")] = 0.01
    vf_coef: Annotated[float, Field(ge=0, description="Value loss coefficient.")] = 0.5
    max_grad_norm: Annotated[float, Field(gt=0, description="Global gradient-norm clip.")] = 0.5
    target_kl: Annotated[
        float | None, Field(gt=0, description="Stop the update epochs early when approx KL exceeds this.")
    ] = None
    update_epochs: Annotated[int, Field(ge=1, description="Passes over each rollout.")] = 4
    share_encoders: bool = Field(default=True, description="Actor and critic share one encoder.")
    normalize_advantages: bool = Field(default=True, description="Normalise advantages per minibatch.")
    clip_vloss: bool = Field(default=False, description="Clip the value loss around the old values.")
    recurrent: bool = Field(
        default=False,
        description="Recurrent PPO: an LSTM encoder (network.encoder_config LSTM keys; default 64 units, 1 layer) "
        "whose hidden state is carried through rollouts and reset per env at episode end; truncated BPTT update.",
    )
    rollout_buffer_config: dict[str, Any] | None = Field(
        default=None, description="AgileRL's rollout buffer options: not supported yet (must be empty)."
    )
    max_seq_len: Annotated[int | None, Field(ge=1)] = Field(
        default=None,
        description="Recurrent PPO: steps per BPTT training sequence (None: each episode piece of a rollout whole).",
    )
    action_masking: bool = Field(
        default=False,
        description="Mask illegal actions (Discrete/MultiDiscrete): the env reports them in info['action_mask'], "
        "a Dict observation's 'action_mask' key or an action_masks() method; masked logits in rollouts, updates "
        "and greedy actions.",
    )
    bptt_sequence_type: Literal["chunked", "maximum", "fifty_percent_overlap"] = Field(
        default="chunked",
        description="Recurrent PPO: how episode pieces are cut into max_seq_len sequences (consecutive chunks, "
        "a window at every step, or windows every max_seq_len // 2 steps).",
    )

    @field_validator("rollout_buffer_config")
    @classmethod
    def _no_rollout_buffer_config(cls, value: Any) -> Any:
        if value:
            raise ValueError("not supported yet (AgileRL's rollout buffer options); remove it")
        return value

    @field_validator("action_masking")
    @classmethod
    def _not_recurrent(cls, value: Any, info: ValidationInfo) -> Any:
        if value and info.data.get("recurrent"):
            raise ValueError("not supported with recurrent: true yet")
        return value

    @field_validator("max_seq_len", "bptt_sequence_type")
    @classmethod
    def _recurrent_only(cls, value: Any, info: ValidationInfo) -> Any:
        if not info.data.get("recurrent") and value not in (None, "chunked"):
            raise ValueError("a recurrent PPO field: set recurrent: true or remove it")
        return value

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        net = manifest.network
        enc = net.encoder_config if net is not None else None
        if self.recurrent and enc is not None and enc.arch != "lstm":
            return [Problem(
                "network.encoder_config",
                f"recurrent: true needs an LSTM encoder (arch: lstm, or AgileRL's hidden_state_size/num_layers "
                f"keys); got arch: {enc.arch}",
            )]  # fmt: skip
        return super().manifest_problems(manifest)


class QLearningSpec(GymAlgorithmSpec):
    """What the Q-learners here (DQN, RainbowDQN, CQN) share: discrete actions, their mutation
    defaults and the ``learn_step``/``lr``/``tau`` fields."""

    paradigm: ClassVar[str] = "single_agent"
    space_rules: ClassVar[SpaceRules | None] = DISCRETE_ACTIONS
    hpo_ranges: ClassVar[dict[str, tuple[float, float]]] = dict(RL_HPO_RANGES)
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")

    learn_step: Annotated[
        int,
        Field(ge=1, description="Env steps per gradient step: below num_envs means several updates per vector step."),
    ] = 5
    lr: Annotated[float, Field(gt=0, description="Adam learning rate.")] = 1e-4
    tau: Annotated[float, Field(gt=0, le=1, description="Soft target-network update rate.")] = 1e-3


class DQNSpec(QLearningSpec):
    """Deep Q-Network (double DQN, soft target updates), discrete actions."""

    regime: ClassVar[str] = "off_policy"
    training_fields: ClassVar[frozenset[str]] = frozenset(
        {"learning_delay", "eps_start", "eps_end", "eps_decay", "experience_sharing"}
    )
    replay_features: ClassVar[frozenset[str]] = frozenset({"per", "n_step"})
    upstream_notes: ClassVar[dict[str, str]] = {"cudagraphs": "Only false (not supported yet)."}

    double: bool = Field(default=True, description="Double DQN: the online net picks the next action.")
    action_masking: bool = Field(
        default=False,
        description="Mask illegal actions: the env reports them in info['action_mask'], a Dict observation's "
        "'action_mask' key or an action_masks() method; greedy and random actions, and the bootstrap's next "
        "action, are allowed ones only.",
    )
    cudagraphs: bool = Field(default=False, description="CUDA graphs: false only (true is not supported yet).")

    @field_validator("cudagraphs")
    @classmethod
    def _no_cudagraphs(cls, value: bool) -> bool:
        if value:
            raise ValueError("CUDA graphs (cudagraphs: true) are not supported yet; set cudagraphs: false")
        return value


class DDPGSpec(GymAlgorithmSpec):
    """Deep Deterministic Policy Gradient, continuous (Box) actions."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "off_policy"
    space_rules: ClassVar[SpaceRules | None] = CONTINUOUS_ACTIONS
    hpo_ranges: ClassVar[dict[str, tuple[float, float]]] = {**RL_HPO_RANGES, "policy_freq": (1, 10)}
    default_mutable: ClassVar[tuple[str, ...]] = ("lr_actor", "lr_critic", "batch_size", "learn_step")
    training_fields: ClassVar[frozenset[str]] = frozenset({"learning_delay", "experience_sharing"})
    upstream_notes: ClassVar[dict[str, str]] = {
        "share_encoders": "AgileRL's meaning: the critics read the actor's encoder without gradient.",
        "vect_noise_dim": "Noise is one vector per env: only 1 or environment.num_envs.",
    }

    # One gradient step per env step (SB3's and CleanRL's TD3/DDPG): AgileRL's 5 left a minimal TD3
    # Pendulum-v1 manifest unlearnt after 20k steps; with 1 it scores -114 by then (test_defaults.py).
    learn_step: Annotated[int, Field(ge=1, description="Env steps per gradient step (see DQN).")] = 1
    lr_actor: Annotated[float, Field(gt=0, description="Actor learning rate.")] = 1e-4
    lr_critic: Annotated[float, Field(gt=0, description="Critic learning rate.")] = 1e-3
    tau: Annotated[float, Field(gt=0, le=1, description="Soft target-network update rate.")] = 1e-3
    policy_freq: Annotated[int, Field(ge=1, description="Critic updates per actor (and target) update.")] = 2
    O_U_noise: bool = Field(default=True, description="Ornstein-Uhlenbeck exploration noise (else Gaussian).")
    expl_noise: Annotated[float, Field(ge=0, description="Exploration noise scale (fraction of action range).")] = 0.1
    mean_noise: float = Field(default=0.0, description="Mean of the exploration noise.")
    theta: Annotated[float, Field(ge=0, description="OU mean-reversion rate.")] = 0.15
    dt: Annotated[float, Field(gt=0, description="OU time step.")] = 0.01
    share_encoders: bool = Field(
        default=False,
        description="The critics (and their targets) read the actor's encoder, without gradient: the actor "
        "loss trains it, the critic loss the critics' heads (AgileRL's meaning).",
    )
    vect_noise_dim: Annotated[
        int, Field(ge=1, description="Noise vectors: one per env always (1 or environment.num_envs accepted).")
    ] = 1


class TD3Spec(DDPGSpec):
    """Twin Delayed DDPG: twin critics, target policy smoothing, delayed policy updates."""

    tau: Annotated[float, Field(gt=0, le=1, description="Soft target-network update rate.")] = 5e-3
    policy_noise: Annotated[float, Field(ge=0, description="Target policy smoothing noise (fraction of range).")] = 0.2
    noise_clip: Annotated[float, Field(ge=0, description="Clip of the target smoothing noise.")] = 0.5


class RainbowDQNSpec(QLearningSpec):
    """Rainbow DQN: prioritized replay, n-step returns, noisy dueling C51 network; discrete actions."""

    regime: ClassVar[str] = "off_policy"
    training_fields: ClassVar[frozenset[str]] = frozenset({"learning_delay", "experience_sharing"})
    replay_features: ClassVar[frozenset[str]] = frozenset({"per", "n_step"})
    upstream_notes: ClassVar[dict[str, str]] = {
        "n_step": "Always applied here (n_step: 1 for one-step returns); AgileRL applies it only with "
        "replay_buffer.n_step_buffer: true.",
        "beta": "Annealed linearly to 1 over training.max_steps; prioritized replay is always on here "
        "(AgileRL: only with replay_buffer.per_buffer: true); alpha is replay_buffer.per_buffer_args.alpha.",
    }

    beta: Annotated[
        float,
        Field(ge=0, le=1, description="Initial importance-sampling exponent of prioritized replay; "
              "annealed linearly to 1 over training.max_steps."),
    ] = 0.4  # fmt: skip
    prior_eps: Annotated[
        float, Field(gt=0, description="Added to each new priority (the sample's loss) so none is zero.")
    ] = 1e-6
    num_atoms: Annotated[int, Field(ge=2, description="Atoms of the C51 return distribution.")] = 51
    v_min: float = Field(default=-10.0, description="Smallest return on the distribution's support.")
    v_max: float = Field(default=10.0, description="Largest return on the distribution's support.")
    noise_std: Annotated[
        float, Field(ge=0, description="Initial std of the noisy layers' factorised Gaussian noise.")
    ] = 0.5
    n_step: Annotated[int, Field(ge=1, description="Steps of reward in each stored return (1: one-step).")] = 3
    combined_reward: bool = Field(
        default=False, description="Add the one-step loss to the n-step loss (both drive the priorities)."
    )
    action_masking: bool = Field(
        default=False,
        description="Mask illegal actions (info['action_mask'], a Dict observation's 'action_mask' key or an "
        "action_masks() method): acting and the double-DQN next action over allowed ones (not with combined_reward).",
    )

    @model_validator(mode="after")
    def _support_range(self) -> RainbowDQNSpec:
        if self.v_min >= self.v_max:
            raise ValueError(f"v_min ({self.v_min}) must be below v_max ({self.v_max})")
        if self.action_masking and self.combined_reward:
            raise ValueError("action_masking is not supported with combined_reward yet")
        return self
