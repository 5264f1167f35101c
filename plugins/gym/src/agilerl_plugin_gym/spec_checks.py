"""Validation-time checks shared by this plugin's algorithm specs (no torch imported).

They turn what a run would need and this plugin cannot give into one problem naming the missing
feature or package, before anything is built: encoder kinds the algorithm cannot use (from the
kind's registration: no network here, recurrent only, single-agent only) and gymnasium ids whose
package is missing. Whether an encoder fits the env's
observation space is checked where the env is made
(:func:`agilerl_plugin_gym.encoder_rules.check_network_for_space`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from agilerl.errors import Problem
from agilerl_plugin_gym.sections.encoders import ENCODERS, default_kind

if TYPE_CHECKING:
    from agilerl.models.base import AlgorithmSpec
    from agilerl.models.manifest import TrainingManifest

#: Stable-Baselines3 / CleanRL / RLlib names for this plugin's hyperparameters (hints only).
RL_SYNONYMS: dict[str, str] = {
    "learning_rate": "lr", "n_steps": "learn_step", "train_freq": "learn_step", "n_epochs": "update_epochs",
    "ent_coeff": "ent_coef", "entropy_coef": "ent_coef", "entropy_coeff": "ent_coef", "entropy_beta": "ent_coef",
    "vf_coeff": "vf_coef", "value_coef": "vf_coef", "value_loss_coef": "vf_coef", "vf_loss_coeff": "vf_coef",
    "clip_range": "clip_coef", "clip_ratio": "clip_coef", "clip_param": "clip_coef", "clip_epsilon": "clip_coef",
    "discount": "gamma", "discount_factor": "gamma", "gae_lam": "gae_lambda", "lam": "gae_lambda",
    "lambda": "gae_lambda", "grad_clip": "max_grad_norm", "clip_grad_norm": "max_grad_norm",
    "max_norm": "max_grad_norm", "actor_lr": "lr_actor", "pi_lr": "lr_actor", "policy_lr": "lr_actor",
    "critic_lr": "lr_critic", "q_lr": "lr_critic", "qf_lr": "lr_critic", "polyak": "tau",
    "target_noise": "policy_noise", "target_policy_noise": "policy_noise", "target_noise_clip": "noise_clip",
    "target_noise_clip_range": "noise_clip", "policy_delay": "policy_freq", "action_noise": "expl_noise",
    "exploration_noise": "expl_noise", "log_std_init": "action_std_init", "minibatch_size": "batch_size",
    "normalize_advantage": "normalize_advantages", "buffer_size": "replay_buffer.max_size",
    "learning_starts": "training.learning_delay", "exploration_initial_eps": "training.eps_start",
    "exploration_final_eps": "training.eps_end",
}  # fmt: skip

#: Activations this plugin's networks have (networks.activation_layer), the ones act_mut may pick.
ACTIVATION_NAMES: frozenset[str] = frozenset(
    {"Tanh", "GELU", "ReLU", "ELU", "LeakyReLU", "Sigmoid", "Softplus", "Softmax", "PReLU", "Identity"}
)


def encoder_kind_problem(arch: str, *, recurrent: bool = False, multi_agent: bool = False) -> str | None:
    """Why the registered encoder kind ``arch`` cannot be used here (None: it can), from its
    registration (:class:`~agilerl_plugin_gym.sections.encoders.EncoderKind`): no network here, a
    recurrent kind for a policy without memory (``recurrent``: the algorithm has one), or a kind the
    multi-agent algorithms do not take (``multi_agent``)."""
    kind = ENCODERS.get(arch)
    if kind is None:
        return None
    what, vector = f"{kind.label} encoders (arch: {arch})", default_kind("vector")
    if kind.builder is None:
        return f"{what} are not supported yet; use arch: {default_kind(kind.reads)}"
    if kind.recurrent and not recurrent:
        return f"{what} are for recurrent policies: only PPO with recurrent: true takes one; use arch: {vector}"
    if multi_agent and not kind.multi_agent:
        flattened = (" the multi-agent vector env flattens Dict/Tuple observations into vectors:"
                     if kind.reads == "structured" else "")  # fmt: skip
        return f"{what} are supported by the single-agent algorithms only;{flattened} use arch: {vector}"
    return None


def network_problems(manifest: TrainingManifest, *, multi_agent: bool = False) -> list[Problem]:
    """What the ``network`` section asks for that this plugin's networks cannot do
    (``multi_agent``: for the multi-agent algorithms)."""
    net = manifest.network
    if net is None:
        return []
    enc = net.encoder_config
    recurrent = bool(getattr(manifest.algorithm, "recurrent", False))
    refused = encoder_kind_problem(enc.arch, recurrent=recurrent, multi_agent=multi_agent) if enc is not None else None
    if refused is not None:
        return [Problem("network.encoder_config", refused)]
    cnn_norm = getattr(enc, "layer_norm", False) if enc is not None and enc.arch == "cnn" else False
    cnn_norm = cnn_norm or bool(getattr(getattr(enc, "cnn_config", None), "layer_norm", False))
    if cnn_norm:
        return [Problem(
            "network.encoder_config" + (".cnn_config" if enc is not None and enc.arch == "multiinput" else ""),
            "layer_norm: true is not supported yet for CNN encoders (AgileRL normalises between conv layers); "
            "set layer_norm: false",
        )]  # fmt: skip
    if enc is not None and enc.arch == "multiinput":
        if getattr(enc, "lstm_config", None) is not None:
            return [Problem(
                "network.encoder_config.lstm_config",
                "LSTM parts of a multi-input encoder are not supported yet (AgileRL uses them for 2-D Box parts "
                "of recurrent policies; here those parts are flattened into the vector input): remove it",
            )]  # fmt: skip
    if net.random_seed is not None:
        return [Problem("network.random_seed", "not supported yet; seed the whole run with training.seed")]
    # min_latent_dim / max_latent_dim: architecture mutation resizes the latent within them
    # (networks.latent_range); nothing to refuse.
    return []


def buffer_problems(
    manifest: TrainingManifest, algo: str = "", features: frozenset[str] = frozenset(), n_step: int | None = None
) -> list[Problem]:
    """Replay-buffer variants the algorithm (``features``: "per", "n_step", "her") does not learn from.

    ``n_step`` is set for an algorithm with its own n-step field (RainbowDQN), which always uses
    prioritized replay and its n-step returns: switching either off there, or a second n-step
    length in the buffer section, is refused rather than ignored.
    """
    rb = manifest.replay_buffer
    if rb is None:
        return []
    who = f" by {algo}" if algo else ""
    problems = []
    if rb.per_buffer and "per" not in features:
        problems.append(Problem("replay_buffer.per_buffer", f"prioritised experience replay is not supported yet{who}; "
                                "DQN and RainbowDQN have it"))  # fmt: skip
    if rb.n_step_buffer and "n_step" not in features:
        problems.append(Problem("replay_buffer.n_step_buffer", f"n-step replay is not supported yet{who}; "
                                "DQN and RainbowDQN have it"))  # fmt: skip
    if rb.her and "her" not in features:
        problems.append(Problem("replay_buffer.her", f"hindsight experience replay is not supported{who}; "
                                "the single-agent off-policy algorithms (DQN, DDPG, TD3, SAC, TQC) have it"))  # fmt: skip
    elif rb.her and (rb.per_buffer or rb.n_step_buffer or n_step is not None):
        problems.append(Problem("replay_buffer.her", "hindsight experience replay with prioritised or n-step "
                                "replay is not supported yet; turn those off"))  # fmt: skip
    if n_step is not None:
        given = rb.model_fields_set
        if "per_buffer" in given and not rb.per_buffer:
            problems.append(Problem("replay_buffer.per_buffer", f"{algo} always uses prioritised replay here; "
                                    "remove per_buffer: false (per_buffer_args.alpha: 0 samples uniformly)"))  # fmt: skip
        if "n_step_buffer" in given and not rb.n_step_buffer:
            problems.append(Problem("replay_buffer.n_step_buffer", f"{algo} always uses its n-step returns here; "
                                    "remove n_step_buffer: false and set algorithm.n_step: 1 for one-step returns"))  # fmt: skip
        buffer_n = rb.n_step_buffer_args.n_step
        if "n_step_buffer_args" in given and buffer_n != n_step:
            problems.append(Problem("replay_buffer.n_step_buffer_args.n_step",
                                    f"{buffer_n} differs from algorithm.n_step ({n_step}), which {algo} uses; "
                                    "remove it or make them equal"))  # fmt: skip
    return problems


def compat_problems(spec: AlgorithmSpec, manifest: TrainingManifest) -> list[Problem]:
    """AgileRL fields whose only meaning here is the one we always use, or a network config to check."""
    problems: list[Problem] = []
    noise = getattr(spec, "vect_noise_dim", 1)
    num_envs = getattr(manifest.environment, "num_envs", 1)
    if noise not in (1, num_envs):
        problems.append(Problem(
            "algorithm.vect_noise_dim",
            f"exploration noise has one vector per env here (environment.num_envs = {num_envs}); "
            "other sizes are not supported yet: remove it",
        ))  # fmt: skip
    delay = getattr(manifest.training, "learning_delay", None)
    if delay and delay >= manifest.training.max_steps:
        problems.append(Problem(
            "training.learning_delay",
            f"{delay} is not below training.max_steps ({manifest.training.max_steps}): learning starts after "
            f"learning_delay steps, so no agent would ever learn; lower it or raise max_steps",
        ))  # fmt: skip
    learn_step, max_steps = getattr(spec, "learn_step", None), manifest.training.max_steps
    if type(spec).regime == "off_policy" and isinstance(learn_step, int) and learn_step > max_steps:
        # learn_step counts env steps (all sub-envs) between gradient steps: the first falls after the run ends.
        problems.append(Problem(
            "algorithm.learn_step",
            f"{learn_step} is more than training.max_steps ({max_steps}): a gradient step runs every learn_step "
            "env steps, so no agent would ever learn; lower learn_step or raise max_steps",
        ))  # fmt: skip
    return problems


def normalize_problems(manifest: TrainingManifest, *, supported: bool, who: str) -> list[Problem]:
    """``environment.normalize`` where the algorithm's engine does not apply it (``supported``
    False: the multi-agent and offline algorithms) is refused by name, not ignored."""
    if supported or getattr(manifest.environment, "normalize", None) is None:
        return []
    return [Problem(
        "environment.normalize",
        f"not supported yet by {who}: observation/reward normalisation is applied by the single-agent "
        "on-policy and off-policy engines (PPO, A2C, DQN, RainbowDQN, DDPG, TD3, SAC, TQC); remove it",
    )]  # fmt: skip


def missing_env_package(env_id: str) -> str | None:
    """For a registered gymnasium id whose package is missing: the install message; else None.

    Imports only the module the registry entry points at (gymnasium raises
    ``DependencyNotInstalled`` there, naming the pip install), never constructs the env.
    """
    import gymnasium as gym

    spec = gym.registry.get(env_id)
    entry = getattr(spec, "entry_point", None)
    if not isinstance(entry, str) or ":" not in entry:
        return None
    module = entry.partition(":")[0]
    try:
        importlib.import_module(module)
    except gym.error.DependencyNotInstalled as exc:
        return f"env package for {env_id!r} is not installed: {exc}"
    except ImportError as exc:
        return f"env package for {env_id!r} is not installed ({exc})"
    return None


#: gymnasium id namespaces registered by a package that is not gymnasium itself.
NAMESPACE_PACKAGES: dict[str, tuple[str, str]] = {
    "ALE": ("ale_py", "ale-py"),
    "MiniGrid": ("minigrid", "minigrid"),
    "BabyAI": ("minigrid", "minigrid"),
}


def namespace_package_problem(env_id: str) -> str | None:
    """``ALE/Breakout-v5`` and friends: register the namespace's package, or say how to install it."""
    namespace, sep, _ = env_id.partition("/")
    if not sep or namespace not in NAMESPACE_PACKAGES:
        return None
    module, dist = NAMESPACE_PACKAGES[namespace]
    try:
        pkg = importlib.import_module(module)
    except ImportError:
        return f"env package {dist} is not installed: pip install {dist} (it provides the {namespace}/ ids)"
    import gymnasium as gym

    register = getattr(gym, "register_envs", None)
    if register is not None:
        register(pkg)
    return None
