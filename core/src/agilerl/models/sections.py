"""The manifest's shared sections: ``network``, ``training``, ``mutation``, ``replay_buffer`` and
``tournament_selection``. Field names follow AgileRL's published manifest format."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, ConfigDict, Field, field_validator, model_validator

from agilerl.models.base import Spec

Activation = Literal[
    "Tanh", "GELU", "ReLU", "ELU", "LeakyReLU", "Sigmoid", "Softplus", "Softmax",
    "GumbelSoftmax", "PReLU", "Identity",
]  # fmt: skip


# --------------------------------------------------------------------------------------------------
# network
# --------------------------------------------------------------------------------------------------


class MlpSpec(Spec):
    """A multi-layer perceptron (an encoder with ``arch: mlp``, or a head)."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "arch": "Written by our dump even at its default, so a stored manifest re-validates to the same encoder.",
    }

    arch: Literal["mlp"] = "mlp"
    hidden_size: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [64])
    activation: Activation = "ReLU"
    output_activation: Activation | None = None
    layer_norm: bool = True
    init_layers: bool = True
    output_vanish: bool = True
    min_hidden_layers: Annotated[int, Field(ge=1)] = 1
    max_hidden_layers: Annotated[int, Field(ge=1)] = 6
    min_mlp_nodes: Annotated[int, Field(ge=1)] = 8
    max_mlp_nodes: Annotated[int, Field(ge=1)] = 256

    @model_validator(mode="after")
    def _ranges(self) -> MlpSpec:
        if self.min_hidden_layers > self.max_hidden_layers:
            raise ValueError("min_hidden_layers must be <= max_hidden_layers")
        if self.min_mlp_nodes > self.max_mlp_nodes:
            raise ValueError("min_mlp_nodes must be <= max_mlp_nodes")
        return self


class CnnSpec(Spec):
    """A convolutional encoder for image (H x W x C) observations."""

    arch: Literal["cnn"] = "cnn"
    channel_size: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [16, 32])
    kernel_size: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [8, 4])
    stride_size: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [4, 2])
    activation: Activation = "ReLU"
    layer_norm: bool = False
    init_layers: bool = True
    min_hidden_layers: Annotated[int, Field(ge=1)] = 1
    max_hidden_layers: Annotated[int, Field(ge=1)] = 6
    min_channel_size: Annotated[int, Field(ge=1)] = 8
    max_channel_size: Annotated[int, Field(ge=1)] = 256

    @model_validator(mode="after")
    def _lengths(self) -> CnnSpec:
        n = {len(self.channel_size), len(self.kernel_size), len(self.stride_size)}
        if len(n) != 1:
            raise ValueError("channel_size, kernel_size and stride_size must have the same length")
        return self


class LstmSpec(Spec):
    """An LSTM encoder, as AgileRL's ``arch: lstm``."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "arch": "Which algorithms take it is up to each plugin (policies with memory); the others refuse it."
    }

    arch: Literal["lstm"] = "lstm"
    hidden_state_size: Annotated[int, Field(ge=1)] = 64
    num_layers: Annotated[int, Field(ge=1)] = 1
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    min_hidden_state_size: int = 8
    max_hidden_state_size: int = 256
    min_layers: int = 1
    max_layers: int = 6


class CnnLstmSpec(Spec):
    """A CNN followed by an LSTM, as AgileRL's ``arch: cnn_lstm``."""

    model_config = ConfigDict(extra="allow")

    arch: Literal["cnn_lstm"] = "cnn_lstm"


class SimbaSpec(Spec):
    """A SimBa residual MLP encoder, as AgileRL's ``arch: simba``."""

    upstream_notes: ClassVar[dict[str, str]] = {"arch": "Each plugin documents where its networks take it."}

    arch: Literal["simba"] = "simba"
    hidden_size: Annotated[int, Field(ge=1)] = 128
    num_blocks: Annotated[int, Field(ge=1)] = 1
    scale_factor: Annotated[int, Field(ge=1)] = 4
    min_blocks: Annotated[int, Field(ge=1)] = 1
    max_blocks: Annotated[int, Field(ge=1)] = 4
    min_mlp_nodes: Annotated[int, Field(ge=1)] = 16
    max_mlp_nodes: Annotated[int, Field(ge=1)] = 500

    @model_validator(mode="after")
    def _ranges(self) -> SimbaSpec:
        if not self.min_blocks <= self.num_blocks <= self.max_blocks:
            raise ValueError(f"num_blocks ({self.num_blocks}) must lie in [min_blocks, max_blocks]")
        if not self.min_mlp_nodes <= self.hidden_size <= self.max_mlp_nodes:
            raise ValueError(f"hidden_size ({self.hidden_size}) must lie in [min_mlp_nodes, max_mlp_nodes]")
        return self


class MultiInputSpec(Spec):
    """One encoder per part of a Dict/Tuple observation, as AgileRL's ``arch: multiinput``."""

    upstream_notes: ClassVar[dict[str, str]] = {"arch": "Each plugin documents where its networks take it."}

    arch: Literal["multiinput"] = "multiinput"
    latent_dim: Annotated[int, Field(ge=1, description="Features each encoded part yields.")] = 16
    vector_space_mlp: bool = False
    mlp_config: MlpSpec | None = None
    cnn_config: CnnSpec | None = None
    lstm_config: LstmSpec | None = None
    init_dicts: dict[str, Any] | None = None
    output_activation: Activation | None = None
    min_latent_dim: Annotated[int, Field(ge=1)] = 8
    max_latent_dim: Annotated[int, Field(ge=1)] = 128

    @model_validator(mode="after")
    def _latent_range(self) -> MultiInputSpec:
        if not self.min_latent_dim <= self.latent_dim <= self.max_latent_dim:
            raise ValueError(f"latent_dim ({self.latent_dim}) must lie in [min_latent_dim, max_latent_dim]")
        return self


EncoderSpec = Annotated[
    MlpSpec | CnnSpec | LstmSpec | CnnLstmSpec | SimbaSpec | MultiInputSpec, Field(discriminator="arch")
]
ENCODER_ARCHS: tuple[str, ...] = ("mlp", "cnn", "lstm", "cnn_lstm", "simba", "multiinput")

# Keys that identify an encoder's kind when a manifest gives no ``arch`` (AgileRL's files rarely do).
_CNN_KEYS = {"channel_size", "kernel_size", "stride_size", "min_channel_size", "max_channel_size"}
_LSTM_KEYS = {"hidden_state_size", "num_layers", "min_hidden_state_size", "max_hidden_state_size",
              "min_layers", "max_layers", "dropout"}  # fmt: skip
_SIMBA_KEYS = {"num_blocks", "scale_factor", "min_blocks", "max_blocks"}
_MULTI_INPUT_KEYS = {"mlp_config", "cnn_config", "lstm_config", "vector_space_mlp", "init_dicts", "latent_dim"}


def infer_encoder_arch(config: Mapping[str, Any]) -> str:
    """The ``arch`` an encoder config without one describes, from its keys.

    Per-input configs (``mlp_config``, ``cnn_config``, ...) mean ``multiinput``; CNN keys with LSTM
    keys mean ``cnn_lstm``; then ``cnn``, ``lstm``, ``simba`` (its block keys, or an integer
    ``hidden_size``); anything else is an ``mlp``.
    """
    keys = set(config)
    if keys & _MULTI_INPUT_KEYS:
        return "multiinput"
    if keys & _CNN_KEYS:
        return "cnn_lstm" if keys & (_LSTM_KEYS - {"dropout"}) else "cnn"
    if keys & _LSTM_KEYS:
        return "lstm"
    if keys & _SIMBA_KEYS or isinstance(config.get("hidden_size"), int):
        return "simba"
    return "mlp"


class NetworkSpec(Spec):
    """Network architecture: an encoder and a head.

    Fields an algorithm spec lists in ``lifted_network_fields`` may be written here too; they are
    moved onto the algorithm at validation and are not part of this section. An ``encoder_config``
    without ``arch`` gets the one its keys describe (:func:`infer_encoder_arch`); the dump always
    writes it, so a stored manifest re-validates to the same spec.
    """

    upstream_notes: ClassVar[dict[str, str]] = {
        "latent_dim": "Default 64 (AgileRL: 128). See each plugin for how its networks use it.",
        "min_latent_dim": "Default none: the latent size mutates only when a bound is given (AgileRL: 8, "
        "always on); plugins that cannot resize it refuse it.",
        "max_latent_dim": "As min_latent_dim (AgileRL's default 128).",
        "encoder_config": "Without arch: inferred from the keys (mlp, cnn, lstm, cnn_lstm, simba, multiinput); "
        "AgileRL infers it from the observation space. Plugins refuse kinds their networks lack.",
        "random_seed": "Refused by every plugin we ship (not supported yet): seed the run with training.seed.",
        "simba": "true: a SimBa encoder (as arch: simba); each plugin documents where its networks take it.",
        "has_evolvable_encoder": "Refused whenever set (not supported yet): AgileRL's flag has no counterpart here.",
    }

    latent_dim: Annotated[int, Field(ge=1)] = 64
    min_latent_dim: Annotated[int | None, Field(ge=1, description="Smallest latent_dim mutation may reach.")] = None
    max_latent_dim: Annotated[int | None, Field(ge=1, description="Largest latent_dim mutation may reach.")] = None
    encoder_config: EncoderSpec | None = None
    head_config: MlpSpec | None = None
    random_seed: int | None = None
    simba: bool = False
    has_evolvable_encoder: Annotated[
        Any, Field(exclude=True, description="AgileRL's flag; not supported yet: refused whenever it is set.")
    ] = None

    @field_validator("has_evolvable_encoder")
    @classmethod
    def _no_evolvable_encoder_flag(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError(
                "not supported yet (AgileRL's has_evolvable_encoder flag has no counterpart here); remove it"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _top_level_arch(cls, data: Any) -> Any:
        # AgileRL accepts `arch` at the top of the section; it belongs to the encoder.
        if isinstance(data, dict) and "arch" in data:
            data = dict(data)
            arch = data.pop("arch")
            enc = dict(data.get("encoder_config") or {})
            enc.setdefault("arch", arch)
            data["encoder_config"] = enc
        if isinstance(data, dict) and isinstance(data.get("encoder_config"), Mapping):
            enc = dict(data["encoder_config"])
            if "arch" not in enc:
                enc["arch"] = "simba" if data.get("simba") is True else infer_encoder_arch(enc)
                data = {**data, "encoder_config": enc}
            elif enc["arch"] not in ENCODER_ARCHS:
                raise ValueError(
                    f"encoder_config.arch {enc['arch']!r} is not an encoder kind; use one of {', '.join(ENCODER_ARCHS)}"
                )
        return data

    @model_validator(mode="after")
    def _latent_range(self) -> NetworkSpec:
        lo, hi = self.min_latent_dim, self.max_latent_dim
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"min_latent_dim ({lo}) must be <= max_latent_dim ({hi})")
        if (lo is not None and self.latent_dim < lo) or (hi is not None and self.latent_dim > hi):
            raise ValueError(f"latent_dim ({self.latent_dim}) must lie in [min_latent_dim, max_latent_dim]")
        return self


# --------------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------------


#: ``training`` fields that only some algorithms' strategies read. Setting one for an algorithm
#: whose spec does not list it in ``training_fields`` is a validation error, not a silent no-op.
ALGORITHM_TRAINING_FIELDS: tuple[str, ...] = (
    "learning_delay", "eps_start", "eps_end", "eps_decay", "sum_scores", "experience_sharing",
    "episode_steps", "evaluation_interval", "num_epochs", "evo_epochs", "rollout_mode",
    # AgileRL's evaluation and distributed-training settings (no algorithm here reads them yet)
    "eval_samples_per_task", "eval_greedy", "eval_max_concurrent_episodes", "env_resource_ratio",
    "rollout_batch_size", "rollout_engines_per_agent", "training_gpus_per_agent", "weight_sync_backend",
    "reuse_prefix_cache_across_syncs", "weight_sync_interval", "rollout_version_stamp", "checkpoint_export",
)  # fmt: skip


class TrainingSpec(Spec):
    """How long and how to train, evaluate and checkpoint."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "eval_steps": "Each strategy documents how it scores an agent with it (see the plugin's docs).",
        "hpo": "true needs a mutation or tournament_selection section, false forbids them (evolution runs "
        "exactly when one is given).",
        "learning_delay": "Refused for algorithms that do not read it (each algorithm lists what it reads).",
        "eps_start": "Refused for algorithms that do not read it.", "eps_end": "As eps_start.",
        "eps_decay": "As eps_start.",
        "checkpoint_optimizer": "Only true (checkpoints always hold the optimizer states).",
        "evaluation_interval": "Refused unless the algorithm declares it in training_fields (a plugin's algorithm "
        "that does runs a held-out evaluation every that many iterations, besides each generation's).",
        "num_epochs": "Refused unless the algorithm declares it in training_fields (where it does, the run "
        "stops after that many passes over the training rows, or at max_steps if sooner).",
        "evo_epochs": "Refused unless the algorithm reads it (none does yet).",
        "max_wall_seconds": "AgileRL: one kind of run only. Here every run: it stops, checkpointing first, "
        "at the first generation end past the limit.",
        "episode_steps": "Read by algorithms that list it in training_fields, each with AgileRL's meaning for its "
        "paradigm (steps per training episode; see that plugin's docs); refused for the others.",
        "sum_scores": "Refused for algorithms that do not read it.",
        "reporting_interval": "Only 1024: metrics are written once per generation.",
        "experience_sharing": "Refused for algorithms that do not read it.",
        "rollout_mode": "Refused for algorithms that do not read it.",
        "seed": "Ours (not in AgileRL).", "torch_threads": "Ours.", "device": "Ours.", "run_dir": "Ours.",
        "save_elite": "Ours.", "progress": "Ours.",
    }  # fmt: skip

    field_synonyms: ClassVar[dict[str, str]] = {
        "total_timesteps": "max_steps", "n_timesteps": "max_steps", "total_steps": "max_steps",
        "eval_freq": "evo_steps", "n_eval_episodes": "eval_loop", "eval_episodes": "eval_loop",
        "population": "pop_size", "learning_starts": "learning_delay", "exploration_initial_eps": "eps_start",
        "exploration_final_eps": "eps_end", "save_freq": "checkpoint_steps", "num_train_epochs": "num_epochs",
    }  # fmt: skip

    name: str | None = None
    max_steps: Annotated[int, Field(ge=1, description="Env steps per agent before stopping.")] = 1_000_000
    evo_steps: Annotated[
        int | None,
        Field(ge=1, validation_alias=AliasChoices("evo_steps", "metrics_interval"),
              description="Env steps per agent between evaluations (and evolution)."),
    ] = None  # fmt: skip
    pop_size: Annotated[int, Field(ge=1, validation_alias=AliasChoices("pop_size", "population_size"))] = 1
    eval_steps: Annotated[
        int | None, Field(ge=1, description="Max steps per evaluation episode (None: full episode).")
    ] = None
    eval_loop: Annotated[int, Field(ge=1, description="Evaluation episodes per agent.")] = 1
    hpo: bool = False
    target_score: float | None = None
    learning_delay: Annotated[int | None, Field(ge=0)] = None
    eps_start: Annotated[float | None, Field(ge=0, le=1)] = None
    eps_end: Annotated[float | None, Field(ge=0, le=1)] = None
    eps_decay: Annotated[float | None, Field(gt=0, le=1)] = None
    checkpoint_steps: Annotated[int | None, Field(ge=1)] = None
    checkpoint_path: str | None = None
    overwrite_checkpoints: bool = False
    keep_checkpoints: Annotated[
        int, Field(ge=0, description="Numbered checkpoints kept on disk (the oldest are deleted); 0 keeps all.")
    ] = 3
    checkpoint_optimizer: bool = True
    evaluation_interval: Annotated[int | None, Field(ge=1)] = None
    num_epochs: Annotated[int | None, Field(ge=1)] = None
    evo_epochs: Annotated[int | None, Field(ge=1)] = None
    max_wall_seconds: Annotated[
        float | None,
        Field(gt=0, description="Stop (checkpointing first) once a generation ends past this many seconds."),
    ] = None
    episode_steps: Annotated[int | None, Field(ge=1)] = None
    sum_scores: bool | None = None
    reporting_interval: Annotated[int, Field(ge=1)] = 1024
    experience_sharing: bool | None = None
    rollout_mode: Literal["colocated", "async"] = "colocated"
    eval_samples_per_task: Annotated[int, Field(ge=0)] = 0
    eval_greedy: bool = True
    eval_max_concurrent_episodes: Annotated[int | None, Field(ge=1)] = None
    env_resource_ratio: Annotated[float | None, Field(gt=0)] = None
    rollout_batch_size: Annotated[int | None, Field(ge=1)] = None
    rollout_engines_per_agent: int | Literal["auto"] = 0
    training_gpus_per_agent: Annotated[int, Field(ge=1)] = 1
    weight_sync_backend: Literal["filesystem", "nccl"] | None = None
    reuse_prefix_cache_across_syncs: bool = False
    weight_sync_interval: Annotated[int | None, Field(ge=1)] = None
    rollout_version_stamp: Literal["publish", "oldest_turn"] | None = None
    checkpoint_export: dict[str, Any] | None = None
    # --- agilerl's own (not in AgileRL's format) ---
    seed: int | None = Field(default=None, description="Seeds python, numpy, torch and the envs.")
    torch_threads: Annotated[
        int | None,
        Field(ge=1, description="torch.set_num_threads for the run; None keeps 1 on CPU (small nets run faster)."),
    ] = None
    device: str = Field(default="cpu", description="torch device: cpu, cuda, cuda:1, auto.")
    run_dir: str | None = Field(
        default=None, description="Where metrics and the elite go (default runs/<algo>-<env>-<time>)."
    )
    save_elite: bool = True
    progress: bool = True
    # --- where members train between tournaments (agilerl.training.backend) ---
    backend: Literal["local", "ray"] = Field(
        default="local", description="local: members train one after another here; ray: each on a Ray actor."
    )
    ray_address: str | None = Field(
        default=None, description="Ray cluster to join (else RAY_ADDRESS; neither: start a local one)."
    )
    ray_workers: Annotated[int | None, Field(ge=1, description="Ray worker actors (default: as CPUs allow).")] = None
    ray_max_retries: Annotated[
        int, Field(ge=0, description="Restarts of a dead Ray worker and retries of its member's step.")
    ] = 2
    num_cpus_per_member: Annotated[float, Field(ge=0, description="CPUs each Ray worker asks for.")] = 1.0
    num_gpus_per_member: Annotated[float, Field(ge=0, description="GPUs each Ray worker asks for.")] = 0.0

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "async_rollout" in data:
            raise ValueError("async_rollout was retired by AgileRL; write rollout_mode: async")
        return data

    @field_validator("checkpoint_optimizer")
    @classmethod
    def _optimizer_always_saved(cls, value: bool) -> bool:
        if not value:
            raise ValueError("false is not supported yet: checkpoints always hold the optimizer states")
        return value

    @field_validator("reporting_interval")
    @classmethod
    def _reporting_per_generation(cls, value: int) -> int:
        if value != 1024:
            raise ValueError("not supported yet: metrics are written once per generation (evo_steps)")
        return value

    @model_validator(mode="after")
    def _epochs(self) -> TrainingSpec:
        if self.evo_epochs is not None and self.num_epochs is None:
            raise ValueError("evo_epochs needs num_epochs")
        return self

    @model_validator(mode="after")
    def _ray_fields(self) -> TrainingSpec:
        ray_only = ("ray_address", "ray_workers", "ray_max_retries", "num_cpus_per_member", "num_gpus_per_member")
        given = [k for k in ray_only if k in self.model_fields_set]
        if self.backend != "ray" and given:
            raise ValueError(f"{', '.join(given)} only apply with backend: ray (backend is {self.backend!r})")
        return self


# --------------------------------------------------------------------------------------------------
# evolution
# --------------------------------------------------------------------------------------------------


class MutationProbabilities(Spec):
    """Relative weights of the mutation operators (normalised at use)."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "arch_mut": "Refused when set > 0 for an algorithm that cannot apply it.",
        "act_mut": "Refused when set > 0 for an algorithm that cannot apply it.",
    }

    no_mut: Annotated[float, Field(ge=0)] = 0.4
    arch_mut: Annotated[float, Field(ge=0)] = 0.2
    new_layer: Annotated[float, Field(ge=0, le=1)] = 0.2
    params_mut: Annotated[float, Field(ge=0)] = 0.2
    act_mut: Annotated[float, Field(ge=0)] = 0.0
    rl_hp_mut: Annotated[float, Field(ge=0)] = 0.2

    def operator_weights(self) -> dict[str, float]:
        """Weights of the operators (``new_layer`` is a probability inside ``arch_mut``)."""
        return {
            "no_mut": self.no_mut,
            "arch_mut": self.arch_mut,
            "params_mut": self.params_mut,
            "act_mut": self.act_mut,
            "rl_hp_mut": self.rl_hp_mut,
        }


OPERATOR_NAMES = {
    "arch_mut": "architecture mutation",
    "params_mut": "parameter mutation",
    "act_mut": "activation mutation",
    "rl_hp_mut": "hyperparameter mutation",
    "no_mut": "no mutation",
}


def unsupported_operators_message(algo_name: str, refused: list[str], reason: str = "") -> str:
    """One message for every mutation operator an algorithm cannot apply (and how to turn them off)."""
    ops = " or ".join(f"{OPERATOR_NAMES.get(op, op)} ({op})" for op in refused)
    why = f" ({reason})" if reason else ""
    return f"{algo_name} does not support {ops} yet{why}; set {', '.join(f'{op}: 0' for op in refused)}"


class RLHyperparameter(Spec):
    """Range and step factors for one mutable hyperparameter."""

    min: float
    max: float
    grow_factor: Annotated[float, Field(gt=1)] = 1.2
    shrink_factor: Annotated[float, Field(gt=0, lt=1)] = 0.8

    @model_validator(mode="after")
    def _order(self) -> RLHyperparameter:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


class MutationSpec(Spec):
    """Mutation settings for evolutionary hyperparameter optimisation."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "network": "Refused (not supported yet): give ranges in the network section instead.",
        "dormant_threshold": "Only 0.01: dormant-neuron detection is not supported yet.",
        "activation_selection": "AgileRL's meaning (act_mut draws one of these, never the current one); "
        "names the algorithm's networks lack are refused.",
        "mutate_elite": "false keeps the elite unmutated (with tournament elitism; AgileRL: the first member).",
    }

    name: str | None = None
    probabilities: MutationProbabilities = Field(default_factory=MutationProbabilities)
    rl_hp_selection: dict[str, RLHyperparameter] = Field(default_factory=dict)
    mutation_sd: Annotated[float, Field(ge=0)] = 0.1
    rand_seed: int | None = 42
    network: dict[str, Any] | None = None
    dormant_threshold: Annotated[float, Field(ge=0)] = 0.01
    activation_selection: Annotated[list[str], Field(min_length=1)] = Field(
        default_factory=lambda: ["ReLU", "ELU", "GELU"]
    )
    mutate_elite: bool = True

    @field_validator("network")
    @classmethod
    def _no_network_ranges(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value:
            raise ValueError(
                "not supported yet: give mutation ranges in the network section "
                "(latent_dim bounds, encoder_config / head_config min_* and max_*)"
            )
        return value

    @field_validator("dormant_threshold")
    @classmethod
    def _no_dormant_detection(cls, value: float) -> float:
        if value != 0.01:
            raise ValueError("not supported yet: mutation does not detect dormant neurons")
        return value


class TournamentSelectionSpec(Spec):
    """Tournament selection: keep the elite, fill other slots with tournament winners."""

    strategy: Literal["tournament"] = "tournament"
    tournament_size: Annotated[int, Field(ge=1)] = 2
    elitism: bool = True


class MultiFrequencySelectionSpec(Spec):
    """MF-PBT: sub-populations evolving at different frequencies, with migration between them.

    Selected by ``strategy: multi_frequency`` in the ``selection_strategy`` block: ``n_subpopulations`` equal
    sub-populations (in population order), sub-population ``i`` evolving every
    ``evolution_frequency_ratios[i]`` generations. Each evolving sub-population, ranked by fitness,
    is cut into ``n_winners``, ``n_survivors``, ``n_open_for_migration`` and ``n_losers``: losers
    become mutated clones of random winners, open slots take better agents from the other
    sub-populations (networks only, with the destination elite's hyperparameters, when the migrant
    comes from a faster sub-population). Unset bracket sizes resolve against ``training.pop_size``."""

    strategy: Literal["multi_frequency"] = "multi_frequency"
    n_subpopulations: Annotated[int, Field(ge=2)] = 2
    n_winners: Annotated[int | None, Field(ge=1)] = None
    n_survivors: Annotated[int | None, Field(ge=0)] = None
    n_open_for_migration: Annotated[int | None, Field(ge=1)] = None
    n_losers: Annotated[int | None, Field(ge=1)] = None
    evolution_frequency_ratios: list[Annotated[int, Field(ge=1)]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_ratios(cls, data: Any) -> Any:
        # Unset ratios: [1, 5, 10, ...], one per sub-population (AgileRL's default).
        if isinstance(data, dict) and not data.get("evolution_frequency_ratios"):
            k = data.get("n_subpopulations", 2)
            if isinstance(k, int) and k >= 1:
                data = {**data, "evolution_frequency_ratios": [1, *(5 * i for i in range(1, k))]}
        return data

    @model_validator(mode="after")
    def _ratios(self) -> MultiFrequencySelectionSpec:
        ratios = self.evolution_frequency_ratios or []
        if len(ratios) != self.n_subpopulations:
            raise ValueError(
                f"evolution_frequency_ratios has {len(ratios)} entries; it needs one per sub-population "
                f"(n_subpopulations: {self.n_subpopulations})"
            )
        if any(a >= b for a, b in itertools.pairwise(ratios)):
            raise ValueError(f"evolution_frequency_ratios must be strictly increasing, got {ratios}")
        return self

    def brackets(self, pop_size: int) -> tuple[int, int, int, int]:
        """``(n_winners, n_survivors, n_open_for_migration, n_losers)`` for ``pop_size``; unset ones
        default to a quarter, 0, a quarter and the rest of a sub-population. Raises ValueError."""
        k = self.n_subpopulations
        if pop_size % k or pop_size // k < 3:
            raise ValueError(
                f"training.pop_size ({pop_size}) must split into {k} sub-populations of at least 3 agents "
                f"(a multiple of n_subpopulations, >= {3 * k})"
            )
        size = pop_size // k
        winners = self.n_winners if self.n_winners is not None else max(1, round(size / 4))
        survivors = self.n_survivors if self.n_survivors is not None else 0
        open_ = self.n_open_for_migration if self.n_open_for_migration is not None else max(1, round(size / 4))
        losers = self.n_losers if self.n_losers is not None else size - winners - survivors - open_
        if losers < 1 or winners + survivors + open_ + losers != size:
            raise ValueError(
                f"n_winners + n_survivors + n_open_for_migration + n_losers ({winners} + {survivors} + {open_} + "
                f"{losers}) must equal the sub-population size, pop_size // n_subpopulations = {size}, "
                "with at least one loser"
            )
        return winners, survivors, open_, losers


# --------------------------------------------------------------------------------------------------
# replay buffer
# --------------------------------------------------------------------------------------------------


class NStepArgs(Spec):
    n_step: Annotated[int, Field(ge=1)] = 3


class PerArgs(Spec):
    alpha: Annotated[float, Field(ge=0, le=1)] = 0.5


class ReplayBufferSpec(Spec):
    """Experience replay for off-policy algorithms."""

    field_synonyms: ClassVar[dict[str, str]] = {"buffer_size": "max_size", "capacity": "max_size"}
    upstream_notes: ClassVar[dict[str, str]] = {
        "standard_buffer": "Only true.",
        "kind": "Only classic (AgileRL's other buffer kind is not supported yet).",
        "n_step_buffer": "Honoured by the algorithms whose plugin implements n-step returns (see the "
        "plugin's docs); every other algorithm refuses it by name.",
        "per_buffer": "Honoured by the algorithms whose plugin implements prioritised replay (see the "
        "plugin's docs); every other algorithm refuses it by name.",
    }

    kind: str = Field(default="classic", description="Only classic (experience replay) is supported.")
    name: str | None = None
    max_size: Annotated[int, Field(ge=1, validation_alias=AliasChoices("max_size", "memory_size"))] = 100_000
    standard_buffer: bool = True
    n_step_buffer: bool = False
    n_step_buffer_args: NStepArgs = Field(default_factory=NStepArgs)
    per_buffer: bool = False
    per_buffer_args: PerArgs = Field(default_factory=PerArgs)
    # AgileRL's group-replay buffer (its other kind): accepted at their defaults only.
    max_rollout_version_lag: Annotated[int | None, Field(ge=0)] = None
    drop_uninformative_groups: bool = False
    group_replay_max_age: Annotated[int, Field(ge=0)] = 0

    @field_validator("kind")
    @classmethod
    def _classic(cls, value: str) -> str:
        if value != "classic":
            raise ValueError(f"replay buffer kind {value!r} is not supported yet; use kind: classic")
        return value

    @field_validator("max_rollout_version_lag", "drop_uninformative_groups", "group_replay_max_age")
    @classmethod
    def _group_buffer(cls, value: Any) -> Any:
        if value:
            raise ValueError("not supported yet (AgileRL's group-replay buffer); remove it")
        return value

    @field_validator("standard_buffer")
    @classmethod
    def _standard(cls, value: bool) -> bool:
        if not value:
            raise ValueError("false is not supported yet: every replay buffer here is a standard one")
        return value


# --------------------------------------------------------------------------------------------------
# logging (agilerl's own section: where metrics go besides the run directory's files)
# --------------------------------------------------------------------------------------------------


class WandbSpec(Spec):
    """Weights & Biases: the population series and per-member values of every generation."""

    project: Annotated[str, Field(min_length=1, description="W&B project.")]
    entity: str | None = Field(default=None, description="W&B team or user (default: yours).")
    name: str | None = Field(default=None, description="Run name (default: the run directory's name).")
    group: str | None = None
    tags: list[str] | None = None
    mode: Literal["online", "offline", "disabled"] | None = Field(
        default=None, description="online, offline (sync later with `wandb sync`) or disabled; default: WANDB_MODE."
    )

    @model_validator(mode="after")
    def _installed(self) -> WandbSpec:
        import importlib.util

        if importlib.util.find_spec("wandb") is None:
            raise ValueError("needs Weights & Biases: pip install 'agilerl-core[wandb]' (or remove logging.wandb)")
        return self


class LoggingSpec(Spec):
    """Metrics sinks: TensorBoard (when installed) and, optionally, Weights & Biases."""

    tensorboard: bool = Field(default=True, description="Write TensorBoard events (when tensorboard is installed).")
    wandb: WandbSpec | None = None


# --------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------


class ValidationSpec(Spec):
    """What ``agilerl validate`` (and every run, before it starts) checks beyond the fields."""

    check_env: bool = Field(
        default=True,
        description="Make a custom env (entrypoint/factory/path) once and check reset/step and its spaces.",
    )
