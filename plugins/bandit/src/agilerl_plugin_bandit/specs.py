"""Manifest sections this plugin adds: pydantic only, cheap to import (no torch, no pandas).

* ``environment`` with ``env_type: bandit`` validates into :class:`BanditEnvSpec`;
* ``algorithm`` with ``name: NeuralUCB`` / ``NeuralTS`` validates into :class:`NeuralUCBSpec` /
  :class:`NeuralTSSpec` (both :class:`BanditSpec`, paradigm ``bandit``, regime ``online``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from agilerl.errors import Problem
from agilerl.models.base import AlgorithmSpec, EnvSpec

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest

#: Datasets that scikit-learn ships inside its wheel: ``environment.name`` may name them instead of
#: giving ``features``/``targets`` paths. Loaded from the local install, never downloaded.
BUILTIN_DATASETS: dict[str, str] = {
    "iris": "load_iris",
    "wine": "load_wine",
    "breast_cancer": "load_breast_cancer",
}

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


class BanditSpec(AlgorithmSpec):
    """Fields shared by the neural contextual-bandit algorithms (unregistered base)."""

    paradigm: ClassVar[str] = "bandit"
    regime: ClassVar[str] = "online"
    default_env_type: ClassVar[str] = "bandit"
    default_evo_steps: ClassVar[int] = 500
    hpo_ranges: ClassVar[dict[str, tuple[float, float]]] = {
        "lr": (6.25e-5, 1e-2),
        "batch_size": (8, 512),
        "learn_step": (1, 10),
        "gamma": (0.01, 10.0),
        "lamb": (0.01, 100.0),
        "reg": (1e-6, 1e-1),
    }
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    supported_mutations: ClassVar[frozenset[str]] = frozenset({"no_mut", "rl_hp_mut", "params_mut", "arch_mut"})

    gamma: Annotated[
        float,
        Field(gt=0, description="Exploration scale: multiplies the UCB bonus / the posterior's standard deviation."),
    ] = 1.0
    lamb: Annotated[
        float,
        Field(gt=0, description="Prior precision of the (diagonal) design matrix; larger explores less at first."),
    ] = 1.0
    reg: Annotated[
        float,
        Field(ge=0, description="L2 penalty pulling the weights towards their initial values in the regression loss."),
    ] = 6.25e-4
    learn_step: Annotated[int, Field(ge=1, description="Env steps between gradient updates.")] = 2
    lr: Annotated[float, Field(gt=0, description="Adam learning rate of the reward network.")] = 1e-3
    batch_size: Annotated[int, Field(ge=1, description="Past (context, reward) pairs per gradient step.")] = 64
    normalize_images: bool = True
    net_config: dict[str, Any] | None = Field(
        default=None,
        description="Network override: {hidden_size: [..], activation: ReLU}; else the manifest's network section.",
    )

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        problems: list[Problem] = []
        net = manifest.network
        enc = net.encoder_config if net is not None else None
        if enc is not None and getattr(enc, "arch", "mlp") != "mlp":
            problems.append(
                Problem("network.encoder_config.arch", f"{self.name} needs an mlp encoder on tabular contexts")
            )
        activation = (self.net_config or {}).get("activation") or getattr(enc, "activation", None)
        if activation is not None and activation not in BANDIT_ACTIVATIONS:
            where = "algorithm.net_config.activation" if self.net_config else "network.encoder_config.activation"
            problems.append(
                Problem(
                    where, f"{activation!r} is not supported by {self.name}; use one of {sorted(BANDIT_ACTIVATIONS)}"
                )
            )
        if manifest.replay_buffer is not None and manifest.replay_buffer.kind != "classic":
            problems.append(
                Problem("replay_buffer.kind", f"{self.name} uses a classic replay buffer; set kind: classic")
            )
        from agilerl_plugin_bandit.check_data import data_problems

        return problems or data_problems(manifest)


class NeuralUCBSpec(BanditSpec):
    """NeuralUCB (Zhou et al., 2020): pull the arm maximising predicted reward + ``gamma`` x uncertainty."""

    lr: Annotated[float, Field(gt=0, description="Adam learning rate of the reward network.")] = 1e-3


class NeuralTSSpec(BanditSpec):
    """NeuralTS (Zhang et al., 2021): pull the arm whose reward sampled from the network's posterior is highest."""

    lr: Annotated[float, Field(gt=0, description="Adam learning rate of the reward network.")] = 3e-3
