"""Manifest ``algorithm`` sections of the single-agent algorithms (pydantic only: cheap to import).

Field names and defaults follow AgileRL's manifests, so AgileRL users' files validate unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from agilerl.errors import Problem
from agilerl.models.base import Mutable
from agilerl_plugin_gym.check_env import (
    batch_problems,
    built_env_problems,
    close_quietly,
    env_config_problem,
    env_option_problems,
    first_steps_problem,
    is_custom,
    make_and_check,
    wants_check,
)
from agilerl_plugin_gym.env_spec import GymEnvSpec
from agilerl_plugin_gym.goal_envs import is_goal_conditioned
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
    RL_SYNONYMS,
    buffer_problems,
    compat_problems,
    missing_env_package,
    namespace_package_problem,
    network_problems,
    normalize_problems,
)

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest


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
        # HER relabels goals where the off-policy engine samples: every algorithm there learns from it
        features = type(self).replay_features | ({"her"} if type(self).regime == "off_policy" else set())
        problems += buffer_problems(manifest, self.name, frozenset(features), getattr(self, "n_step", None))
        problems += compat_problems(self, manifest)
        problems += normalize_problems(manifest, supported=type(self).regime != "offline", who=self.name)
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
            from agilerl_plugin_gym.envs import (  # deferred: gymnasium, loaded only when validation builds an env
                GymEnvError,
                check_gym_id,
            )

            missing = namespace_package_problem(env.env_id)
            try:
                if missing is None:
                    check_gym_id(env.env_id)
                    missing = missing_env_package(env.env_id)
            except GymEnvError as exc:
                problems.append(Problem("environment.name", str(exc).removeprefix("environment.name: ")))
            if missing is not None:
                problems.append(Problem("environment.name", missing))
        custom: list[Problem] | None = None  # the custom-env check, when the env built for the spaces ran it
        if not problems:
            found, custom = _space_problems(type(self).space_rules, self.name, env, manifest)
            problems += found

        problems += batch_problems(self, manifest)
        if problems:
            return problems
        return custom if custom is not None else make_and_check(manifest, multi_agent=False)


def _space_problems(
    rules: SpaceRules | None, algo: str, env: GymEnvSpec, manifest: TrainingManifest | None = None
) -> tuple[list[Problem], list[Problem] | None]:
    """Make one env as the run will (wrappers included) and check the algorithm takes its spaces,
    and that the ``network`` section's encoder fits the observation space; then, on the same env, a
    custom env's API and mask checks (the second item: None when they did not run).

    An env that cannot be made is reported when it is ``GymEnvError`` (a bad entrypoint, factory or
    wrapper path); anything else the env's own code raises is left for the run to report in full.
    """
    from agilerl_plugin_gym.envs import (  # deferred: gymnasium, loaded only when validation builds an env
        GymEnvError,
        make_single_env,
    )
    from agilerl_plugin_gym.single_agent.spaces import (  # deferred: gymnasium, loaded only when validation builds an env
        UnsupportedSpaceError,
        check_recurrent_observation_space,
    )

    if rules is None:
        return [], None
    options = env_option_problems(env, multi_agent=False)  # a value of another type than the option's default
    if options:
        return options, None
    try:
        made = make_single_env(env)
    except GymEnvError as exc:  # "environment.entrypoint: ..." -> that field's path
        path, sep, message = str(exc).partition(": ")
        problem = Problem(path, message) if sep and path.startswith("environment") else Problem("environment", str(exc))
        return [problem], None
    except Exception as exc:
        # Options the constructor refuses (an unknown key, a wrong type; a registered env's assertion on
        # a value's range); else the env's own failure, which the run reports with its traceback.
        if env.env_config and (isinstance(exc, (TypeError, ValueError)) or not is_custom(env)):
            return [env_config_problem(env, exc, multi_agent=False)], None
        return [], None
    from agilerl_plugin_gym.encoder_rules import (  # deferred: gymnasium, loaded only when validation builds an env
        EncoderSpaceError,
        check_network_for_space,
    )

    try:
        rules.check(algo, made.observation_space, made.action_space)
        if manifest is not None and getattr(manifest.algorithm, "recurrent", False):
            check_recurrent_observation_space(made.observation_space)
        if manifest is not None:
            check_network_for_space(manifest.network, made.observation_space)
        rb = manifest.replay_buffer if manifest is not None else None
        if rb is not None and getattr(rb, "her", False):
            not_goal = is_goal_conditioned(made)
            if not_goal is not None:
                return [Problem("replay_buffer.her", not_goal)], None
        norm = getattr(env, "normalize", None)
        if norm is not None and norm.obs:
            from agilerl_plugin_gym.normalization import (  # deferred: torch, loaded only when a manifest normalises
                normalizable_keys,
            )

            if not normalizable_keys(made.observation_space):
                return [Problem(
                    "environment.normalize.obs",
                    f"the observation space {made.observation_space} has no float Box part to normalise "
                    "(discrete and image observations are not normalised); set obs: false",
                )], None  # fmt: skip
        stepped = first_steps_problem(made, env, multi_agent=False)  # options only its step() cannot use
        if stepped is not None:
            return [stepped], None
        # A custom env's API and mask checks on this same env (make_and_check would build another).
        custom = (
            built_env_problems(made, manifest, multi_agent=False)
            if manifest is not None and wants_check(manifest)
            else None
        )
    except UnsupportedSpaceError as exc:
        return [Problem("environment", str(exc).removeprefix("environment: "))], None
    except EncoderSpaceError as exc:
        path, sep, message = str(exc).partition(": ")
        return [Problem(path, message) if sep and path.startswith("network") else Problem("network", str(exc))], None
    finally:
        close_quietly(made)
    return [], custom


class PPOSpec(GymAlgorithmSpec):
    """Proximal Policy Optimisation (clipped objective, GAE), discrete or continuous actions."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "on_policy"
    space_rules: ClassVar[SpaceRules | None] = ANY_ACTIONS
    default_evo_steps: ClassVar[int] = 10_000
    stored_steps_field: ClassVar[str | None] = "learn_step"  # one rollout is stored per update
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
    learn_step: Annotated[
        int, Field(ge=1, description="Env steps (all envs together) per rollout."), Mutable(512, 8192)
    ] = 4096
    batch_size: Annotated[int, Field(ge=1, description="Minibatch size of each gradient step."), Mutable(8, 512)] = 64
    lr: Annotated[float, Field(gt=0, description="Adam learning rate."), Mutable(6.25e-5, 1e-2)] = 1e-4
    gae_lambda: Annotated[
        float, Field(ge=0, le=1, description="GAE lambda (bias/variance of advantages)."), Mutable(0.8, 0.99)
    ] = 0.95
    action_std_init: float = Field(
        default=-0.5108,
        description="Initial log-std of the Gaussian policy (Box actions), as in AgileRL; -0.51 is std 0.6.",
    )
    clip_coef: Annotated[
        float, Field(gt=0, description="PPO ratio clip range (and value clip range)."), Mutable(0.05, 0.35)
    ] = 0.2
    ent_coef: Annotated[float, Field(ge=0, description="Entropy bonus coefficient."), Mutable(1e-3, 0.1)] = 0.01
    vf_coef: Annotated[float, Field(ge=0, description="Value loss coefficient."), Mutable(0.1, 1.0)] = 0.5
    max_grad_norm: Annotated[float, Field(gt=0, description="Global gradient-norm clip."), Mutable(0.1, 5.0)] = 0.5
    target_kl: Annotated[
        float | None, Field(gt=0, description="Stop the update epochs early when approx KL exceeds this.")
    ] = None
    update_epochs: Annotated[int, Field(ge=1, description="Passes over each rollout."), Mutable(1, 10)] = 4
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
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")

    learn_step: Annotated[
        int,
        Field(ge=1, description="Env steps per gradient step: below num_envs means several updates per vector step."),
        Mutable(1, 10),
    ] = 5
    lr: Annotated[float, Field(gt=0, description="Adam learning rate."), Mutable(6.25e-5, 1e-2)] = 1e-4
    tau: Annotated[float, Field(gt=0, le=1, description="Soft target-network update rate."), Mutable(1e-4, 1e-2)] = 1e-3


class DQNSpec(QLearningSpec):
    """Deep Q-Network (double DQN, soft target updates), discrete actions."""

    regime: ClassVar[str] = "off_policy"
    training_fields: ClassVar[frozenset[str]] = frozenset(
        {"learning_delay", "eps_start", "eps_end", "eps_decay", "eps_linear_steps", "experience_sharing"}
    )
    replay_features: ClassVar[frozenset[str]] = frozenset({"per", "n_step"})
    upstream_notes: ClassVar[dict[str, str]] = {"cudagraphs": "Only false (not supported yet)."}

    double: bool = Field(default=True, description="Double DQN: the online net picks the next action.")
    target_update_interval: Annotated[
        int | None,
        Field(
            ge=1,
            description="Hard target updates: the online network is copied into the target every this many "
            "gradient steps (Mnih et al.'s C; SB3's target_update_interval, which SB3 counts in env steps) and "
            "tau is not used; null: Polyak averaging with tau after every gradient step.",
        ),
    ] = None
    update_burst: Annotated[
        int,
        Field(
            ge=1,
            description="Gradient steps taken together: every learn_step x update_burst env steps, update_burst "
            "gradient steps in a row (SB3's train_freq / gradient_steps: train_freq 256 with gradient_steps 128 is "
            "learn_step 2, update_burst 128); 1: spread evenly, one per learn_step env steps.",
        ),
    ] = 1
    max_grad_norm: Annotated[
        float | None, Field(gt=0, description="Global gradient-norm clip (SB3's DQN: 10); null: no clipping.")
    ] = None
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
    default_mutable: ClassVar[tuple[str, ...]] = ("lr_actor", "lr_critic", "batch_size", "learn_step")
    training_fields: ClassVar[frozenset[str]] = frozenset({"learning_delay", "experience_sharing"})
    upstream_notes: ClassVar[dict[str, str]] = {
        "share_encoders": "AgileRL's meaning: the critics read the actor's encoder without gradient.",
        "vect_noise_dim": "Noise is one vector per env: only 1 or environment.num_envs.",
    }

    # One gradient step per env step (SB3's and CleanRL's TD3/DDPG): AgileRL's 5 left a minimal TD3
    # Pendulum-v1 manifest unlearnt after 20k steps; with 1 it scores -114 by then (test_defaults.py).
    learn_step: Annotated[int, Field(ge=1, description="Env steps per gradient step (see DQN)."), Mutable(1, 10)] = 1
    lr_actor: Annotated[float, Field(gt=0, description="Actor learning rate."), Mutable(6.25e-5, 1e-2)] = 1e-4
    lr_critic: Annotated[float, Field(gt=0, description="Critic learning rate."), Mutable(6.25e-5, 1e-2)] = 1e-3
    tau: Annotated[float, Field(gt=0, le=1, description="Soft target-network update rate."), Mutable(1e-4, 1e-2)] = 1e-3
    policy_freq: Annotated[
        int, Field(ge=1, description="Critic updates per actor (and target) update."), Mutable(1, 10)
    ] = 2
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

    tau: Annotated[float, Field(gt=0, le=1, description="Soft target-network update rate."), Mutable(1e-4, 1e-2)] = 5e-3
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


def _entropy_coefficient(value: float | str) -> float | str:
    """``ent_coef``: a positive float (fixed), ``"auto"`` or ``"auto_<initial value>"`` (learned)."""
    if isinstance(value, str):
        if value == "auto":
            return value
        head, _, tail = value.partition("_")
        try:
            initial = float(tail)
        except ValueError:
            initial = -1.0
        if head != "auto" or not initial > 0:
            raise ValueError(f"{value!r}: give a positive float, 'auto' or 'auto_<initial value>' (e.g. 'auto_0.1')")
        return value
    if not value > 0:
        raise ValueError(f"{value}: a fixed entropy coefficient must be positive (or 'auto')")
    return float(value)


class SACSpec(GymAlgorithmSpec):
    """Soft Actor-Critic: squashed Gaussian actor, twin Q critics, learned entropy coefficient; Box actions."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "off_policy"
    space_rules: ClassVar[SpaceRules | None] = CONTINUOUS_ACTIONS
    # tau and gamma are mutable when named in mutation.rl_hp_selection (a fixed float ent_coef is not
    # mutable: "auto" is a string, and a range for a str | float field would mutate nothing).
    default_mutable: ClassVar[tuple[str, ...]] = ("lr_actor", "lr_critic", "batch_size", "learn_step")
    training_fields: ClassVar[frozenset[str]] = frozenset({"learning_delay", "experience_sharing"})

    # SB3's SAC defaults: one gradient step per env step, batch 256, lr 3e-4, tau 0.005.
    learn_step: Annotated[
        int,
        Field(ge=1, description="Env steps (all envs together) per gradient step, as DQN/TD3: below num_envs "
              "several gradient steps run per vector step. SB3's train_freq F and gradient_steps G with n envs "
              "are learn_step = F * n / G."),
        Mutable(1, 10),
    ] = 1  # fmt: skip
    batch_size: Annotated[int, Field(ge=1, description="Transitions per gradient step."), Mutable(8, 512)] = 256
    lr_actor: Annotated[
        float,
        Field(gt=0, description="Actor learning rate (also the entropy coefficient's, as SB3)."),
        Mutable(6.25e-5, 1e-2),
    ] = 3e-4
    lr_critic: Annotated[float, Field(gt=0, description="Critics' learning rate."), Mutable(6.25e-5, 1e-2)] = 3e-4
    tau: Annotated[float, Field(gt=0, le=1, description="Polyak rate of the target critics."), Mutable(1e-4, 1e-2)] = (
        5e-3
    )
    ent_coef: float | str = Field(
        default="auto",
        description="Entropy coefficient alpha: a positive float (fixed), 'auto' (learned, from 1.0) or "
        "'auto_<x>' (learned, from x), as SB3.",
    )
    target_entropy: float | Literal["auto"] = Field(
        default="auto", description="Entropy target of the learned coefficient; 'auto' is -dim(action space)."
    )
    target_update_interval: Annotated[
        int, Field(ge=1, description="Gradient steps per Polyak update of the target critics.")
    ] = 1

    @field_validator("ent_coef")
    @classmethod
    def _ent_coef(cls, value: float | str) -> float | str:
        return _entropy_coefficient(value)


class A2CSpec(GymAlgorithmSpec):
    """Advantage actor-critic (Mnih et al. 2016, synchronous), as SB3's A2C: one gradient step per
    rollout, no minibatches; Discrete, MultiDiscrete or Box actions."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "on_policy"
    space_rules: ClassVar[SpaceRules | None] = ANY_ACTIONS
    default_evo_steps: ClassVar[int] = 10_000
    stored_steps_field: ClassVar[str | None] = "learn_step"  # one rollout is stored per update
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "ent_coef")

    learn_step: Annotated[
        int,
        Field(ge=1, description="Env steps (all envs together) per rollout and update: SB3's n_steps x num_envs "
              "(40 is SB3's 5 steps x 8 envs)."),
        Mutable(8, 512),
    ] = 40  # fmt: skip
    lr: Annotated[float, Field(gt=0, description="Learning rate (SB3's default 7e-4)."), Mutable(6.25e-5, 1e-2)] = 7e-4
    use_rms_prop: bool = Field(
        default=True,
        description="As SB3's: true, torch's RMSprop with alpha 0.99, eps 1e-5; false, Adam with eps 1e-5.",
    )
    gae_lambda: Annotated[
        float, Field(ge=0, le=1, description="GAE lambda (1: plain n-step returns, SB3's)."), Mutable(0.8, 1.0)
    ] = 1.0
    ent_coef: Annotated[float, Field(ge=0, description="Entropy bonus coefficient."), Mutable(0.0, 0.05)] = 0.0
    vf_coef: Annotated[float, Field(ge=0, description="Value loss coefficient."), Mutable(0.1, 1.0)] = 0.5
    max_grad_norm: Annotated[float, Field(gt=0, description="Global gradient-norm clip."), Mutable(0.1, 5.0)] = 0.5
    normalize_advantages: bool = Field(default=False, description="Normalise the rollout's advantages (SB3: off).")
    action_std_init: float = Field(
        default=0.0, description="Initial log-std of the Gaussian policy (Box actions); SB3's log_std_init 0."
    )
    # One gradient step on the whole rollout: a minibatch size would do nothing, so the field core's
    # AlgorithmSpec declares is refused by name instead of silently ignored.
    batch_size: Any = Field(default=None, description="Not used by A2C (one gradient step per rollout): leave unset.")

    @field_validator("batch_size")
    @classmethod
    def _no_batch_size(cls, value: Any) -> None:
        if value is not None:
            raise ValueError("A2C takes one gradient step per rollout and has no minibatches; remove batch_size")
        return None


class TQCSpec(SACSpec):
    """Truncated Quantile Critics (sb3-contrib's TQC): SAC with distributional critics whose pooled
    quantiles lose their top ones in the target (less over-estimation); Box actions."""

    n_quantiles: Annotated[int, Field(ge=1, description="Quantiles each critic outputs.")] = 25
    n_critics: Annotated[int, Field(ge=1, description="Critic networks (each with a target copy).")] = 2
    top_quantiles_to_drop_per_net: Annotated[
        int, Field(ge=0, description="Quantiles dropped per critic from the top of the pooled target.")
    ] = 2

    @model_validator(mode="after")
    def _keeps_a_quantile(self) -> TQCSpec:
        if self.top_quantiles_to_drop_per_net >= self.n_quantiles:
            raise ValueError(
                f"top_quantiles_to_drop_per_net ({self.top_quantiles_to_drop_per_net}) must be below n_quantiles "
                f"({self.n_quantiles}): the target would keep no quantile"
            )
        return self
