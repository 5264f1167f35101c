"""Contextual-bandit environments: a labelled table as a bandit, or a user's own env.

:func:`make_bandit_env` is the ``env_type: bandit`` factory. A table becomes a :class:`BanditEnv`:
every class of the target is an arm; each step shows one row (drawn uniformly with replacement);
the context of arm ``k`` is the row's encoded feature vector in block ``k`` of an ``arms * d``
vector, so one network scores every arm; the true class pays 1, the others 0.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import numpy as np
import pandas as pd

from agilerl.errors import AgileRLError
from agilerl.imports import import_object
from agilerl_plugin_bandit.tables import BUILTIN_DATASETS, table_path_problem

if TYPE_CHECKING:
    from agilerl_plugin_bandit.specs import BanditEnvSpec

TableInput: TypeAlias = pd.DataFrame | pd.Series | np.ndarray | str | os.PathLike[str]


class BanditDataError(AgileRLError):
    """The bandit's table or entrypoint cannot make a bandit: the message names the field and the fix."""


@runtime_checkable
class BanditEnvProtocol(Protocol):
    """What the bandit loop needs from an environment.

    ``reset()`` returns the first context, an ``(arms, context_dim)`` float array (one row per arm);
    ``step(arm)`` returns ``(next_context, reward)``. Optionally ``optimal_reward()`` gives the best
    expected reward for the current context, so the loop can report regret.
    """

    arms: int
    context_dim: int

    def reset(self) -> np.ndarray: ...

    def step(self, arm: int) -> tuple[np.ndarray, float]: ...


REQUIRED_MEMBERS = ("reset", "step", "arms", "context_dim")


class BanditEnv:
    """A labelled table as a contextual bandit.

    :param features: encoded features, ``(n, d)`` float32 (see :func:`encode_features`).
    :param targets: class index per row, ``(n,)`` ints in ``[0, arms)``.
    :param classes: the class labels, in arm order.
    :param seed: seed of the row sampler.
    """

    #: Tables whose contexts fit in this many floats (16 MiB) get them precomputed.
    PRECOMPUTE_LIMIT = 1 << 22

    def __init__(
        self,
        features: np.ndarray,
        targets: np.ndarray,
        *,
        classes: list[Any] | None = None,
        feature_names: list[str] | None = None,
        seed: int | None = None,
    ) -> None:
        self.features = np.ascontiguousarray(features, dtype=np.float32)
        self.targets = np.asarray(targets, dtype=np.int64)
        self.arms = int(self.targets.max()) + 1 if classes is None else len(classes)
        self.classes = list(classes) if classes is not None else list(range(self.arms))
        self.feature_names = feature_names
        self.num_features = self.features.shape[1]
        self.context_dim = self.arms * self.num_features
        self.rng = np.random.default_rng(seed)
        self._row = 0
        self._draws = np.empty(0, dtype=np.int64)
        self._next_draw = 0
        n, k, d = len(self.targets), self.arms, self.num_features
        self._contexts: np.ndarray | None = None
        if n * k * k * d <= self.PRECOMPUTE_LIMIT:
            # Small tables (iris: 150 x 3 x 12 floats): build every row's context once.
            ctx = np.zeros((n, k, k, d), dtype=np.float32)
            ctx[:, np.arange(k), np.arange(k)] = self.features[:, None, :]
            self._contexts = ctx.reshape(n, k, k * d)
        else:
            # Large tables: one buffer, arm k's block is the diagonal of a (k, k, d) view.
            self._context = np.zeros((k, k, d), dtype=np.float32)
            self._diag = np.arange(k)

    def __len__(self) -> int:
        return len(self.targets)

    def _draw_row(self) -> int:
        # Rows are drawn in blocks: one generator call per 1024 steps instead of one per step.
        if self._next_draw >= len(self._draws):
            self._draws = self.rng.integers(len(self.targets), size=1024)
            self._next_draw = 0
        row = int(self._draws[self._next_draw])
        self._next_draw += 1
        return row

    def _next_context(self) -> np.ndarray:
        self._row = self._draw_row()
        if self._contexts is not None:
            context: np.ndarray = self._contexts[self._row]  # a view: callers must not write into contexts
            return context
        self._context[self._diag, self._diag] = self.features[self._row]
        return self._context.reshape(self.arms, self.context_dim).copy()

    def reset(self) -> np.ndarray:
        """Draw a row; return its ``(arms, context_dim)`` context."""
        return self._next_context()

    def step(self, arm: int) -> tuple[np.ndarray, float]:
        """Pay 1 if ``arm`` is the current row's class, then draw the next row."""
        reward = 1.0 if int(arm) == int(self.targets[self._row]) else 0.0
        return self._next_context(), reward

    def optimal_reward(self) -> float:
        """The best reward for the current context: the true class always pays 1."""
        return 1.0

    def state_dict(self) -> dict[str, Any]:
        """The sampler's position (plain values), so a resumed run sees the same rows."""
        state = self.rng.bit_generator.state
        return {
            "rng": {k: (dict(v) if isinstance(v, dict) else v) for k, v in state.items()},
            "draws": [int(r) for r in self._draws[self._next_draw :]],
            "row": self._row,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._draws = np.asarray(state["draws"], dtype=np.int64)
        self._next_draw = 0
        self._row = int(state["row"])

    def seed(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)
        self._draws = np.empty(0, dtype=np.int64)


# --------------------------------------------------------------------------------------------------
# Reading and encoding tables
# --------------------------------------------------------------------------------------------------


def _resolve_path(value: str | os.PathLike[str], base: str | None, field: str) -> Path:
    p, message = table_path_problem(str(value), base, field)
    if message is not None:
        raise BanditDataError(message)
    return p


def read_table(value: TableInput, *, field: str, base: str | None = None) -> pd.DataFrame:
    """A DataFrame from a DataFrame, Series, array, or a CSV / Parquet path."""
    if isinstance(value, pd.DataFrame):
        return value.reset_index(drop=True)
    if isinstance(value, pd.Series):
        return value.reset_index(drop=True).to_frame()
    if isinstance(value, np.ndarray):
        arr = value if value.ndim == 2 else value.reshape(len(value), -1)
        return pd.DataFrame(arr, columns=[f"x{i}" for i in range(arr.shape[1])])
    if not isinstance(value, (str, os.PathLike)):
        raise BanditDataError(
            f"environment.{field}: expected a pandas DataFrame or a CSV/Parquet path, got {type(value).__name__}"
        )
    p = _resolve_path(value, base, field)
    suffix = (
        "".join(p.suffixes[-2:]).lower() if p.suffix.lower() in {".gz", ".bz2", ".zip", ".xz"} else p.suffix.lower()
    )
    try:
        if suffix.startswith(".csv") or suffix.startswith(".tsv") or suffix == ".txt":
            return pd.read_csv(p, sep="\t" if suffix.startswith(".tsv") else ",")
        if suffix in {".parquet", ".pq"}:
            return pd.read_parquet(p)
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise BanditDataError(f"environment.{field}: cannot read {p}: {exc}") from exc
    raise BanditDataError(f"environment.{field}: {p.name} has an unsupported format; use .csv or .parquet")


def encode_features(table: pd.DataFrame, *, categorical: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """One-hot encode categorical columns, standardise numeric ones.

    Columns of object, string, category or bool dtype are categorical, as are those listed in
    ``categorical``; every other column must be numeric. Returns the ``(n, d)`` float32 matrix and
    its column names (``col=value`` for one-hot columns).
    """
    forced = set(categorical or [])
    missing = sorted(forced - set(map(str, table.columns)))
    if missing:
        raise BanditDataError(f"environment.env_config.categorical: no such feature columns {missing}")
    nan_cols = [str(c) for c in table.columns if table[c].isna().any()]
    if nan_cols:
        rows = table.index[table[nan_cols].isna().any(axis=1)].tolist()
        raise BanditDataError(
            f"environment.features: missing values (NaN) in columns {nan_cols} (rows {rows[:5]}"
            f"{'...' if len(rows) > 5 else ''}); fill or drop them before training"
        )
    blocks: list[np.ndarray] = []
    names: list[str] = []
    for col in table.columns:
        series = table[col]
        name = str(col)
        is_cat = (
            name in forced
            or isinstance(series.dtype, pd.CategoricalDtype)
            or pd.api.types.is_bool_dtype(series)
            or pd.api.types.is_object_dtype(series)
            or pd.api.types.is_string_dtype(series)
        )
        if is_cat:
            values = series.astype(str)
            levels = sorted(values.unique())
            blocks.append((values.to_numpy()[:, None] == np.asarray(levels)[None, :]).astype(np.float32))
            names += [f"{name}={level}" for level in levels]
            continue
        if not pd.api.types.is_numeric_dtype(series):
            raise BanditDataError(
                f"environment.features: column {name!r} has dtype {series.dtype}, neither numeric nor categorical"
            )
        x = series.to_numpy(dtype=np.float64)
        std = x.std()
        # A constant column carries no information: centre it (all zeros) rather than divide by 0.
        blocks.append((((x - x.mean()) / std) if std > 0 else x - x.mean()).astype(np.float32)[:, None])
        names.append(name)
    if not blocks:
        raise BanditDataError("environment.features: the features table has no columns")
    return np.concatenate(blocks, axis=1), names


def encode_targets(table: pd.DataFrame, *, field: str = "targets") -> tuple[np.ndarray, list[Any]]:
    """Class index per row (classes sorted) and the class labels."""
    if table.shape[1] != 1:
        raise BanditDataError(
            f"environment.{field}: the targets table must have exactly one column, got {table.shape[1]} "
            f"({list(map(str, table.columns))[:5]}); or name it with env_config.target_column"
        )
    series = table.iloc[:, 0]
    if series.isna().any():
        rows = series.index[series.isna()].tolist()
        raise BanditDataError(f"environment.{field}: missing target values in rows {rows[:5]}; drop those rows")
    classes = sorted(series.unique(), key=lambda v: (str(type(v)), v))
    if len(classes) < 2:
        raise BanditDataError(
            f"environment.{field}: the target column {str(series.name)!r} has one class ({classes[0]!r}); "
            "a bandit needs at least two arms, i.e. two distinct target values"
        )
    index = {c: i for i, c in enumerate(classes)}
    return series.map(index).to_numpy(dtype=np.int64), [_plain(c) for c in classes]


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def load_builtin(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Features and targets of a dataset scikit-learn ships (read from the local install)."""
    from sklearn import datasets

    bunch = getattr(datasets, BUILTIN_DATASETS[name])(as_frame=True)
    return bunch.data, bunch.target.to_frame()


# --------------------------------------------------------------------------------------------------
# The factory
# --------------------------------------------------------------------------------------------------


def _import_entrypoint(spec: BanditEnvSpec) -> Any:
    assert spec.entrypoint is not None
    if spec.path is not None:
        path = str(Path(spec.path).expanduser().resolve())
        if path not in sys.path:
            sys.path.insert(0, path)
    target = import_object(
        spec.entrypoint, what="environment.entrypoint", error=BanditDataError,
        hint="Give 'module:callable' importable from the working directory, or set environment.path "
        "to the directory holding the module.",
    )  # fmt: skip
    if not callable(target):
        raise BanditDataError(f"environment.entrypoint: {spec.entrypoint!r} is not callable")
    return target


def check_bandit_env(env: Any, *, source: str = "environment.entrypoint") -> Any:
    """Raise :class:`BanditDataError` unless ``env`` satisfies :class:`BanditEnvProtocol`."""
    missing = [m for m in REQUIRED_MEMBERS if not hasattr(env, m)]
    not_callable = [m for m in ("reset", "step") if hasattr(env, m) and not callable(getattr(env, m))]
    if missing or not_callable:
        detail = "; ".join(
            part
            for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"not callable: {', '.join(not_callable)}" if not_callable else "",
            )
            if part
        )
        raise BanditDataError(
            f"{source} built a {type(env).__name__}, which is not a bandit env ({detail}). A bandit env has "
            "reset() -> context of shape (arms, context_dim), step(arm) -> (next_context, reward), "
            "and the int attributes arms and context_dim"
        )
    try:
        arms, dim = int(env.arms), int(env.context_dim)
    except (TypeError, ValueError) as exc:
        raise BanditDataError(f"{source}: arms and context_dim must be integers ({exc})") from exc
    if arms < 2 or dim < 1:
        raise BanditDataError(f"{source}: a bandit needs arms >= 2 and context_dim >= 1, got {arms} and {dim}")
    return env


def make_bandit_env(
    spec: BanditEnvSpec,
    *,
    features: TableInput | None = None,
    targets: TableInput | None = None,
    seed: int | None = None,
) -> BanditEnvProtocol:
    """Construct a bandit environment from a spec, or from in-memory tables.

    ``features`` / ``targets`` (DataFrames or paths) override the spec's. Raises
    :class:`BanditDataError` on a missing file, mismatched lengths, NaNs, a single class, or an
    entrypoint whose result is not a bandit env.
    """
    cfg = dict(spec.env_config or {})
    if spec.entrypoint is not None and features is None and targets is None:
        env = _import_entrypoint(spec)(**cfg)
        return check_bandit_env(env)  # type: ignore[no-any-return]
    sample_seed = cfg.get("seed", seed)
    feat_src = features if features is not None else spec.features
    targ_src = targets if targets is not None else spec.targets
    target_column = cfg.get("target_column")
    if feat_src is None:
        builtin = spec.builtin_dataset
        if builtin is None:
            raise BanditDataError(
                f"environment: no data for the bandit {spec.name!r}. Give features and targets (CSV/Parquet paths), "
                f"name a shipped dataset ({', '.join(sorted(BUILTIN_DATASETS))}), or an entrypoint"
            )
        feat_table, targ_table = load_builtin(builtin)
    else:
        feat_table = read_table(feat_src, field="features", base=spec.path)
        if targ_src is not None:
            targ_table = read_table(targ_src, field="targets", base=spec.path)
        elif target_column is not None:
            if target_column not in feat_table.columns:
                raise BanditDataError(
                    f"environment.env_config.target_column: no column {target_column!r} in the features table "
                    f"(columns: {list(map(str, feat_table.columns))})"
                )
            targ_table = feat_table[[target_column]]
            feat_table = feat_table.drop(columns=[target_column])
        else:
            raise BanditDataError("environment.targets: required with features (or set env_config.target_column)")
    if len(feat_table) != len(targ_table):
        raise BanditDataError(
            f"environment: features has {len(feat_table)} rows but targets has {len(targ_table)}; "
            "they must describe the same rows, in the same order"
        )
    if len(feat_table) == 0:
        raise BanditDataError("environment.features: the table has no rows")
    x, names = encode_features(feat_table, categorical=cfg.get("categorical"))
    y, classes = encode_targets(targ_table.reset_index(drop=True))
    return BanditEnv(x, y, classes=classes, feature_names=names, seed=sample_seed)


__all__ = [
    "BanditDataError",
    "BanditEnv",
    "BanditEnvProtocol",
    "check_bandit_env",
    "encode_features",
    "encode_targets",
    "make_bandit_env",
    "read_table",
]
