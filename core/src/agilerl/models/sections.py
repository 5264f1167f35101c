"""Core's manifest sections: ``training``, ``mutation``, ``tournament_selection`` (and MF-PBT's
``selection_strategy``), ``logging`` and ``validation``. Field names follow AgileRL's published
manifest format.

The other sections' schemas belong to the plugins that read them (``agilerl_register_sections``:
``network`` and ``replay_buffer``), and plugins add the ``training`` fields only their algorithms
read; core composes them (:func:`agilerl.models.manifest.training_spec_class`)."""

from __future__ import annotations

import itertools
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from agilerl.models.base import Spec

# --------------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------------


class TrainingSpec(Spec):
    """How long and how to train, evaluate and checkpoint."""

    upstream_notes: ClassVar[dict[str, str]] = {
        "eval_steps": "Each strategy documents how it scores an agent with it (see the plugin's docs).",
        "hpo": "true needs a mutation or tournament_selection section, false forbids them (evolution runs "
        "exactly when one is given).",
        "checkpoint_optimizer": "Only true (checkpoints always hold the optimizer states).",
        "max_wall_seconds": "AgileRL: one kind of run only. Here every run: it stops, checkpointing first, "
        "at the first generation end past the limit.",
        "reporting_interval": "Only 1024: metrics are written once per generation.",
        "seed": "Ours (not in AgileRL).", "torch_threads": "Ours.", "device": "Ours.", "run_dir": "Ours.",
        "save_elite": "Ours.", "progress": "Ours.",
    }  # fmt: skip

    field_synonyms: ClassVar[dict[str, str]] = {
        "total_timesteps": "max_steps", "n_timesteps": "max_steps", "total_steps": "max_steps",
        "eval_freq": "evo_steps", "n_eval_episodes": "eval_loop", "eval_episodes": "eval_loop",
        "population": "pop_size", "save_freq": "checkpoint_steps",
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
    checkpoint_steps: Annotated[int | None, Field(ge=1)] = None
    checkpoint_path: str | None = None
    overwrite_checkpoints: bool = False
    keep_checkpoints: Annotated[
        int, Field(ge=0, description="Numbered checkpoints kept on disk (the oldest are deleted); 0 keeps all.")
    ] = 3
    checkpoint_optimizer: bool = True
    max_wall_seconds: Annotated[
        float | None,
        Field(gt=0, description="Stop (checkpointing first) once a generation ends past this many seconds."),
    ] = None
    reporting_interval: Annotated[int, Field(ge=1)] = 1024
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
                "not supported yet: give mutation ranges in the network section (its min_* and max_* fields)"
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
    init_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds the W&B server may take to start the run (wandb's init_timeout; default: wandb's "
        "own, 90 s), after which the run stops with the server's address; mode: offline needs no server.",
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
