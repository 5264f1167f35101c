"""The manifest's shared sections: ``network``, ``training``, ``mutation``, ``replay_buffer`` and
``tournament_selection``. Field names follow AgileRL's published manifest format."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, model_validator

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
    arch: Literal["lstm"] = "lstm"
    hidden_state_size: Annotated[int, Field(ge=1)] = 64
    num_layers: Annotated[int, Field(ge=1)] = 1
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    min_hidden_state_size: int = 8
    max_hidden_state_size: int = 256
    min_layers: int = 1
    max_layers: int = 6


class SimbaSpec(Spec):
    arch: Literal["simba"] = "simba"
    hidden_size: Annotated[int, Field(ge=1)] = 128
    num_blocks: Annotated[int, Field(ge=1)] = 1
    scale_factor: Annotated[int, Field(ge=1)] = 4
    min_blocks: int = 1
    max_blocks: int = 4
    min_mlp_nodes: int = 8
    max_mlp_nodes: int = 256


EncoderSpec = Annotated[MlpSpec | CnnSpec | LstmSpec | SimbaSpec, Field(discriminator="arch")]


class NetworkSpec(Spec):
    """Network architecture: an encoder and a head.

    Fields an algorithm spec lists in ``lifted_network_fields`` may be written here too; they are
    moved onto the algorithm at validation and are not part of this section.
    """

    latent_dim: Annotated[int, Field(ge=1)] = 64
    encoder_config: EncoderSpec | None = None
    head_config: MlpSpec | None = None
    random_seed: int | None = None
    simba: bool = False

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
        return data


# --------------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------------


class TrainingSpec(Spec):
    """How long and how to train, evaluate and checkpoint."""

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
    checkpoint_optimizer: bool = True
    evaluation_interval: Annotated[int | None, Field(ge=1)] = None
    num_epochs: Annotated[int | None, Field(ge=1)] = None
    evo_epochs: Annotated[int | None, Field(ge=1)] = None
    max_wall_seconds: Annotated[float | None, Field(gt=0)] = None
    episode_steps: Annotated[int | None, Field(ge=1)] = None
    sum_scores: bool | None = None
    reporting_interval: Annotated[int, Field(ge=1)] = 1024
    experience_sharing: bool | None = None
    rollout_mode: Literal["colocated", "async"] = "colocated"
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

    @model_validator(mode="after")
    def _epochs(self) -> TrainingSpec:
        if self.evo_epochs is not None and self.num_epochs is None:
            raise ValueError("evo_epochs needs num_epochs")
        return self


# --------------------------------------------------------------------------------------------------
# evolution
# --------------------------------------------------------------------------------------------------


class MutationProbabilities(Spec):
    """Relative weights of the mutation operators (normalised at use)."""

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

    name: str | None = None
    probabilities: MutationProbabilities = Field(default_factory=MutationProbabilities)
    rl_hp_selection: dict[str, RLHyperparameter] = Field(default_factory=dict)
    mutation_sd: Annotated[float, Field(ge=0)] = 0.1
    rand_seed: int | None = 42
    network: dict[str, Any] | None = None
    dormant_threshold: Annotated[float, Field(ge=0)] = 0.01
    activation_selection: list[str] = Field(default_factory=lambda: ["ReLU", "ELU", "GELU"])
    mutate_elite: bool = True


class TournamentSelectionSpec(Spec):
    """Tournament selection: keep the elite, fill other slots with tournament winners."""

    strategy: Literal["tournament"] = "tournament"
    tournament_size: Annotated[int, Field(ge=1)] = 2
    elitism: bool = True


# --------------------------------------------------------------------------------------------------
# replay buffer
# --------------------------------------------------------------------------------------------------


class NStepArgs(Spec):
    n_step: Annotated[int, Field(ge=1)] = 3


class PerArgs(Spec):
    alpha: Annotated[float, Field(ge=0, le=1)] = 0.5


class ReplayBufferSpec(Spec):
    """Experience replay for off-policy algorithms."""

    kind: Literal["classic", "llm"] = "classic"
    name: str | None = None
    max_size: Annotated[int, Field(ge=1, validation_alias=AliasChoices("max_size", "memory_size"))] = 100_000
    standard_buffer: bool = True
    n_step_buffer: bool = False
    n_step_buffer_args: NStepArgs = Field(default_factory=NStepArgs)
    per_buffer: bool = False
    per_buffer_args: PerArgs = Field(default_factory=PerArgs)
    # LLM rollout buffer fields (kind: llm)
    max_rollout_version_lag: int | None = None
    drop_uninformative_groups: bool = False
    group_replay_max_age: int = 0
