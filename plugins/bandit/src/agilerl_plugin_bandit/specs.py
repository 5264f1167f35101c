"""Manifest sections this plugin adds: pydantic only, cheap to import (no torch, no pandas).

* ``environment`` with ``env_type: bandit`` validates into :class:`BanditEnvSpec`;
* ``algorithm`` with ``name: NeuralUCB`` / ``NeuralTS`` validates into :class:`NeuralUCBSpec` /
  :class:`NeuralTSSpec` (both :class:`BanditSpec`, paradigm ``bandit``, regime ``online``).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from agilerl.errors import Problem
from agilerl.models.base import AlgorithmSpec, EnvSpec, Mutable
from agilerl_plugin_bandit.check_data import data_problems
from agilerl_plugin_bandit.tables import BUILTIN_DATASETS, table_path_problem

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest

#: Activations whose derivative the bandit network knows in closed form (the exploration bonus
#: back-propagates by hand, see :mod:`agilerl_plugin_bandit.networks`).
BANDIT_ACTIVATIONS: frozenset[str] = frozenset(
    {"ReLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "GELU", "Softplus", "Identity"}
)


class BanditEnvSpec(EnvSpec):
    """A tabular dataset wrapped as a contextual-bandit environment.

    Each class of the target column is an arm; the context of arm ``k`` is the row's feature vector
    placed in the ``k``-th block of an ``arms x features`` vector; pulling the row's true class pays 1,
    any other arm 0. Give the table one of three ways:

    * ``features`` and ``targets``: CSV or Parquet paths (relative paths resolve against ``path``
      when given, else the working directory); ``env_config.target_column`` instead of ``targets``
      takes the target from a column of the features table;
    * ``name``: a dataset scikit-learn ships (``iris``, ``wine``, ``breast_cancer``);
    * ``entrypoint``: ``"module:callable"`` returning your own env (``reset()``, ``step(arm)``,
      ``arms``, ``context_dim``), called with ``env_config`` as keyword arguments.

    In-memory pandas tables can be passed to ``make_bandit_env(spec, features=df, targets=df)``.
    """

    num_envs: Annotated[int, Field(ge=1, description="Parallel envs (bandits step one context at a time).")] = 1
    version: str | int | None = None
    #: ``path`` goes on sys.path only for an ``entrypoint``; alone it is the base of table paths.
    path_imports_alone: ClassVar[bool] = False

    env_type: Literal["bandit"] = "bandit"
    name: str = Field(default="BanditEnv", description="A label, or a shipped dataset: iris, wine, breast_cancer.")
    features: str | None = Field(default=None, description="Path of the features table (.csv, .parquet).")
    targets: str | None = Field(default=None, description="Path of the one-column targets table (.csv, .parquet).")
    entrypoint: str | None = Field(default=None, description="'module:callable' building a custom bandit env.")
    path: str | None = Field(
        default=None, description="Directory added to sys.path for the entrypoint and base of relative table paths."
    )
    env_config: dict[str, Any] | None = Field(
        default=None,
        description=(
            "Entrypoint: its keyword arguments. Tables: target_column (take targets from the features table), "
            "categorical (columns to one-hot even if numeric), seed (row sampling)."
        ),
    )

    @model_validator(mode="after")
    def _single_env(self) -> BanditEnvSpec:
        if self.num_envs != 1:
            raise ValueError("num_envs other than 1 is not supported yet: bandits step one context at a time")
        if self.version is not None:
            raise ValueError("version is not used by table bandits; remove it")
        return self

    @model_validator(mode="after")
    def _one_source(self) -> BanditEnvSpec:
        if self.entrypoint is not None and (self.features is not None or self.targets is not None):
            raise ValueError("give either entrypoint or features/targets, not both")
        if self.entrypoint is not None and ":" not in self.entrypoint:
            raise ValueError(f"entrypoint must look like 'module:callable', got {self.entrypoint!r}")
        cfg = self.env_config or {}
        if self.entrypoint is None:
            unknown = sorted(set(cfg) - {"target_column", "categorical", "seed"})
            if unknown:
                raise ValueError(
                    f"env_config keys {unknown} are not used by table bandits (valid: target_column, categorical, seed)"
                )
            if self.features is None and self.targets is not None:
                raise ValueError("targets given without features: add features: <path of the features table>")
            if self.features is not None and self.targets is None and "target_column" not in cfg:
                raise ValueError(
                    "features given without targets: add targets: <path>, or env_config.target_column: <column>"
                )
        return self

    @property
    def builtin_dataset(self) -> str | None:
        """The shipped dataset ``name`` refers to, when no table or entrypoint is given."""
        if self.features is not None or self.entrypoint is not None:
            return None
        key = self.name.strip().lower().replace("-", "_")
        return key if key in BUILTIN_DATASETS else None


def _csv_header(path: Path) -> list[str] | None:
    """The column names of a plain CSV/TSV file (None for other formats: read at run time)."""
    suffix = path.suffix.lower()
    if suffix not in {".csv", ".tsv", ".txt"}:
        return None
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            row = next(csv.reader(fh, delimiter="\t" if suffix == ".tsv" else ","), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return None  # the run reads it with pandas and reports the problem in full
    return [c.strip() for c in row]


def table_problems(env: BanditEnvSpec) -> list[Problem]:
    """The tables a run will read exist, are readable, and have the columns the manifest names."""
    problems: list[Problem] = []
    headers: dict[str, list[str] | None] = {}
    for field in ("features", "targets"):
        value = getattr(env, field)
        if value is None:
            continue
        path, message = table_path_problem(value, env.path, field)
        if message is not None:
            problems.append(Problem(f"environment.{field}", message.removeprefix(f"environment.{field}: ")))
            continue
        headers[field] = _csv_header(path)
    cfg = env.env_config or {}
    features = headers.get("features")
    if features is not None:
        column = cfg.get("target_column")
        if column is not None and str(column) not in features:
            problems.append(Problem("environment.env_config.target_column",
                                    f"no column {column!r} in the features table (columns: {features})"))  # fmt: skip
        missing = sorted(set(map(str, cfg.get("categorical") or [])) - set(features))
        if missing:
            problems.append(Problem("environment.env_config.categorical", f"no such feature columns {missing}"))
    targets = headers.get("targets")
    if targets is not None and len(targets) != 1:
        problems.append(Problem(
            "environment.targets",
            f"the targets table must have exactly one column, got {len(targets)} ({targets[:5]}); "
            "or name it with env_config.target_column",
        ))  # fmt: skip
    return problems


#: MLP options the bandit reward network does not have, with the value that runs. Given at any
#: other value they are refused (architecture mutation only grows, up to 4 hidden layers of 256).
_PLAIN_MLP: dict[str, Any] = {
    "layer_norm": False,
    "output_activation": None,
    "max_hidden_layers": 4,
    "max_mlp_nodes": 256,
}

#: MLP options refused whenever they are written: what runs matches neither of AgileRL's values.
_FIXED_MLP: dict[str, str] = {
    "init_layers": "weights are LeCun-uniform with zero biases (neither AgileRL's orthogonal init nor torch's default)",
    "output_vanish": "the output layer is initialised like the others (never scaled down)",
}

#: ``network`` fields the bandit reward network does not read, refused whenever they are written.
_UNUSED_NETWORK: dict[str, str] = {
    "random_seed": "seed the run with training.seed",
}


def mlp_problems(net: Any, name: str) -> list[Problem]:
    """Problems with the MLP parts of the ``network`` section for the bandit reward network."""
    problems: list[Problem] = []
    if net is None:
        return problems
    for field, why in _UNUSED_NETWORK.items():
        if field in net.model_fields_set:
            problems.append(Problem(f"network.{field}", f"not supported yet by {name} ({why}); remove it"))
    for field in ("min_latent_dim", "max_latent_dim"):
        # The latent layer exists only when latent_dim is written; architecture mutation grows it up to
        # max_latent_dim (it never shrinks, so min_latent_dim holds from the start).
        if field in net.model_fields_set and "latent_dim" not in net.model_fields_set:
            problems.append(Problem(
                f"network.{field}",
                f"{name}'s network has a latent layer only when network.latent_dim is given; give it or remove {field}",
            ))  # fmt: skip
    parts = {part: getattr(net, part, None) for part in ("encoder_config", "head_config")}
    for part, mlp in parts.items():
        if mlp is None or getattr(mlp, "arch", "mlp") != "mlp":
            continue
        given = mlp.model_fields_set
        for field, runs in _PLAIN_MLP.items():
            if field in given and getattr(mlp, field) != runs:
                problems.append(Problem(
                    f"network.{part}.{field}",
                    f"not supported yet: {name}'s reward network is a plain MLP "
                    f"({field}: {runs!r}, fixed architecture-mutation bounds); remove it",
                ))  # fmt: skip
        for field, why in _FIXED_MLP.items():
            if field in given:
                problems.append(Problem(f"network.{part}.{field}", f"not supported yet by {name}: {why}; remove it"))
        # Architecture mutation only grows layers, so the minimums hold iff the start respects them.
        if len(mlp.hidden_size) < mlp.min_hidden_layers:
            problems.append(Problem(f"network.{part}.hidden_size",
                                    f"{len(mlp.hidden_size)} layers, fewer than min_hidden_layers "
                                    f"({mlp.min_hidden_layers})"))  # fmt: skip
        small = [n for n in mlp.hidden_size if n < mlp.min_mlp_nodes]
        if small:
            problems.append(Problem(f"network.{part}.hidden_size",
                                    f"layer widths {small} are below min_mlp_nodes ({mlp.min_mlp_nodes})"))  # fmt: skip
    enc, head = parts["encoder_config"], parts["head_config"]
    if (
        enc is not None and head is not None and "activation" in enc.model_fields_set
        and "activation" in head.model_fields_set and enc.activation != head.activation
    ):  # fmt: skip
        problems.append(Problem(
            "network.head_config.activation",
            f"{head.activation!r} differs from encoder_config.activation {enc.activation!r}: {name}'s reward "
            "network has one hidden activation; give one of them",
        ))  # fmt: skip
    return problems


#: Replay memory when the manifest has no ``replay_buffer`` section.
DEFAULT_MEMORY_SIZE = 10_000
#: Bytes one remembered (context, reward) pair takes at the least: the memory is preallocated as
#: float32, and a context has at least two arms' blocks of one feature (a one-class target is refused).
MEMORY_PAIR_FLOOR = 3 * 4


class BanditSpec(AlgorithmSpec):
    """Fields shared by the neural contextual-bandit algorithms (unregistered base)."""

    paradigm: ClassVar[str] = "bandit"
    regime: ClassVar[str] = "online"
    default_env_type: ClassVar[str] = "bandit"
    default_evo_steps: ClassVar[int] = 500
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    #: AgileRL's bandit loop reads ``episode_steps``: steps per training episode (see BanditStrategy.learn).
    training_fields: ClassVar[frozenset[str]] = frozenset({"episode_steps"})
    field_synonyms: ClassVar[dict[str, str]] = {
        "learning_rate": "lr", "lambda": "lamb", "lambda_": "lamb", "exploration": "gamma", "nu": "gamma",
        "minibatch_size": "batch_size", "buffer_size": "replay_buffer.max_size", "train_freq": "learn_step",
    }  # fmt: skip
    supported_mutations: ClassVar[frozenset[str]] = frozenset(
        {"no_mut", "rl_hp_mut", "params_mut", "arch_mut", "act_mut"}
    )
    activation_choices: ClassVar[frozenset[str] | None] = frozenset(BANDIT_ACTIVATIONS)
    upstream_notes: ClassVar[dict[str, str]] = {
        "net_config": "Ours: overrides the network section with {hidden_size, activation}. From the network "
        "section the MLP is encoder hidden sizes, then latent_dim when given, then head hidden sizes.",
        "normalize_images": "Refused whenever written: contexts are table rows, never images.",
    }

    gamma: Annotated[
        float,
        Field(gt=0, description="Exploration scale: multiplies the UCB bonus / the posterior's standard deviation."),
        Mutable(0.01, 10.0),
    ] = 1.0
    lamb: Annotated[
        float,
        Field(gt=0, description="Prior precision of the (diagonal) design matrix; larger explores less at first."),
        Mutable(0.01, 100.0),
    ] = 1.0
    reg: Annotated[
        float,
        Field(ge=0, description="L2 penalty pulling the weights towards their initial values in the regression loss."),
        Mutable(1e-6, 1e-1),
    ] = 6.25e-4
    learn_step: Annotated[int, Field(ge=1, description="Env steps between gradient updates."), Mutable(1, 10)] = 2
    lr: Annotated[
        float, Field(gt=0, description="Adam learning rate of the reward network."), Mutable(6.25e-5, 1e-2)
    ] = 1e-3
    batch_size: Annotated[
        int, Field(ge=1, description="Past (context, reward) pairs per gradient step."), Mutable(8, 512)
    ] = 64
    normalize_images: bool = Field(
        default=True,
        exclude=True,
        description="AgileRL's image scaling; refused whenever written (bandit contexts are table rows).",
    )
    net_config: dict[str, Any] | None = Field(
        default=None,
        description="Network override: {hidden_size: [..], activation: ReLU}; else the manifest's network section.",
    )

    def memory_parts(self, manifest: TrainingManifest) -> dict[str, tuple[int, str]]:
        """Every member preallocates its replay memory (``replay_buffer.max_size`` pairs)."""
        rb, pop = manifest.replay_buffer, manifest.training.pop_size
        size = rb.max_size if rb is not None else DEFAULT_MEMORY_SIZE
        field = "replay_buffer.max_size" if rb is not None else "training.pop_size"
        what = f"{pop} agents x {size} remembered pairs x at least {MEMORY_PAIR_FLOOR} B"
        return {field: (pop * size * MEMORY_PAIR_FLOOR, what)}

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        problems: list[Problem] = []
        net = manifest.network
        enc = net.encoder_config if net is not None else None
        if enc is not None and getattr(enc, "arch", "mlp") != "mlp":
            problems.append(
                Problem("network.encoder_config.arch", f"{self.name} needs an mlp encoder on tabular contexts")
            )
        problems += mlp_problems(net, self.name)
        if "normalize_images" in self.model_fields_set:
            problems.append(Problem(
                "algorithm.normalize_images",
                f"not supported yet: {self.name}'s contexts are table rows, never images; remove it",
            ))  # fmt: skip
        head = net.head_config if net is not None else None
        activations = (
            [("algorithm.net_config.activation", self.net_config.get("activation"))]
            if self.net_config
            else [("network.encoder_config.activation", getattr(enc, "activation", None)),
                  ("network.head_config.activation", getattr(head, "activation", None))]
        )  # fmt: skip
        for where, activation in activations:
            if activation is not None and activation not in BANDIT_ACTIVATIONS:
                problems.append(Problem(
                    where, f"{activation!r} is not supported by {self.name}; use one of {sorted(BANDIT_ACTIVATIONS)}"
                ))  # fmt: skip
        if manifest.training.eval_steps is None and manifest.training.eval_loop != 1:
            problems.append(Problem(
                "training.eval_loop",
                "bandit fitness is the online mean reward unless training.eval_steps is set; set eval_steps "
                "(greedy evaluation, AgileRL's scale) or remove eval_loop",
            ))  # fmt: skip
        from agilerl_plugin_gym.sections.training import rl_training

        t = rl_training(manifest)
        evo_steps = manifest.training.evo_steps or self.default_evo_steps
        if t.episode_steps is not None and t.episode_steps > evo_steps:
            problems.append(Problem(
                "training.episode_steps",
                f"{t.episode_steps} is longer than a generation (evo_steps {evo_steps}): no episode would finish "
                "before an evaluation; set episode_steps <= evo_steps (AgileRL's manifests use equal values)",
            ))  # fmt: skip
        if isinstance(manifest.environment, BanditEnvSpec):
            problems += table_problems(manifest.environment)
        rb = manifest.replay_buffer
        if rb is not None and (rb.per_buffer or rb.n_step_buffer):
            key = "per_buffer" if rb.per_buffer else "n_step_buffer"
            problems.append(
                Problem(f"replay_buffer.{key}", f"not supported yet: {self.name} samples its memory uniformly")
            )
        if manifest.replay_buffer is not None and manifest.replay_buffer.kind != "classic":
            problems.append(
                Problem("replay_buffer.kind", f"{self.name} uses a classic replay buffer; set kind: classic")
            )

        return problems or data_problems(manifest)


class NeuralUCBSpec(BanditSpec):
    """NeuralUCB (Zhou et al., 2020): pull the arm maximising predicted reward + ``gamma`` x uncertainty."""

    lr: Annotated[
        float, Field(gt=0, description="Adam learning rate of the reward network."), Mutable(6.25e-5, 1e-2)
    ] = 1e-3


class NeuralTSSpec(BanditSpec):
    """NeuralTS (Zhang et al., 2021): pull the arm whose reward sampled from the network's posterior is highest."""

    lr: Annotated[
        float, Field(gt=0, description="Adam learning rate of the reward network."), Mutable(6.25e-5, 1e-2)
    ] = 3e-3
