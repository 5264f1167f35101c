"""The training manifest: one YAML/JSON file describing a whole run, validated before anything runs."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError

from agilerl.errors import ManifestError, ManifestFileError, ManifestSyntaxError, Problem, UnknownNameError, closest
from agilerl.models.base import AlgorithmSpec, EnvSpec
from agilerl.models.sections import (
    MutationSpec,
    NetworkSpec,
    ReplayBufferSpec,
    TournamentSelectionSpec,
    TrainingSpec,
)
from agilerl.registry import ENV_TYPES, MANIFEST_REGISTRY

API_VERSION = "agilerl.com/v1"

SECTIONS: dict[str, type[BaseModel] | None] = {
    "apiVersion": None,
    "algorithm": None,
    "environment": None,
    "network": NetworkSpec,
    "training": TrainingSpec,
    "mutation": MutationSpec,
    "replay_buffer": ReplayBufferSpec,
    "tournament_selection": TournamentSelectionSpec,
}
ALIASES = {"api_version": "apiVersion", "selection_strategy": "tournament_selection"}


class TrainingManifest(BaseModel):
    """A validated manifest. Build it with :func:`load_manifest` or :func:`validate_manifest`."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)

    apiVersion: str = API_VERSION  # noqa: N815 - the manifest's own key
    algorithm: SerializeAsAny[AlgorithmSpec]
    environment: SerializeAsAny[EnvSpec]
    network: NetworkSpec | None = None
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    mutation: MutationSpec | None = None
    replay_buffer: ReplayBufferSpec | None = None
    tournament_selection: TournamentSelectionSpec | None = None

    @property
    def evo_steps(self) -> int:
        """Env steps per agent between evaluations, with the algorithm's default applied."""
        if self.training.evo_steps is not None:
            return self.training.evo_steps
        return min(type(self.algorithm).default_evo_steps, self.training.max_steps)

    @property
    def hpo(self) -> bool:
        """Whether evolution (selection and/or mutation) runs."""
        return self.mutation is not None or self.tournament_selection is not None

    def to_dict(self) -> dict[str, Any]:
        """A plain dict that :func:`validate_manifest` accepts (round-trips)."""
        out: dict[str, Any] = {"apiVersion": self.apiVersion}
        out["algorithm"] = {"name": self.algorithm.name, **self.algorithm.model_dump(exclude_defaults=True)}
        out["environment"] = self.environment.model_dump(exclude_defaults=True)
        out["environment"]["env_type"] = self.environment.env_type
        for key in ("network", "training", "mutation", "replay_buffer", "tournament_selection"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value.model_dump(exclude_defaults=True)
        result: dict[str, Any] = json.loads(json.dumps(out, default=str))
        return result


# --------------------------------------------------------------------------------------------------
# Error formatting
# --------------------------------------------------------------------------------------------------


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(str(item))
    return ".".join(parts)


def _fields_of(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """Field names (and aliases) valid at ``loc`` inside ``model``, for did-you-mean hints."""
    current: Any = model
    for item in loc[:-1]:
        if current is None or not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(str(item))
        if field is None:
            return []
        ann = field.annotation
        current = None
        for cand in getattr(ann, "__args__", ()) or (ann,):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                current = cand
                break
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return []
    names = list(current.model_fields)
    for f in current.model_fields.values():
        va = f.validation_alias
        if va is not None and hasattr(va, "choices"):
            names += [c for c in va.choices if isinstance(c, str)]
    return names


def problems_from_validation(exc: ValidationError, prefix: str, model: type[BaseModel] | None = None) -> list[Problem]:
    """One :class:`Problem` per pydantic error, with did-you-mean for unknown keys."""
    out: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and "[" in x and x.endswith("]")))
        path = _path(prefix, loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            key = str(loc[-1]) if loc else "?"
            hint = closest(key, _fields_of(model, loc))
            msg = "unknown field" + (f"; did you mean {hint!r}?" if hint else "")
            valid = _fields_of(model, loc)
            if not hint and valid:
                msg += f" (valid fields: {', '.join(sorted(valid))})"
        elif kind == "missing":
            msg = "required field missing"
        else:
            msg = err["msg"]
            if "input" in err and kind not in {"model_type", "dict_type"}:
                shown = repr(err["input"])
                msg += f" (got {shown if len(shown) < 60 else shown[:57] + '...'})"
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, ") :]
        out.append(Problem(path, msg))
    return out


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------


def _drop_nulls(value: Any) -> Any:
    """YAML ``null`` means "use the default": remove None-valued keys, recursively."""
    if isinstance(value, Mapping):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _section(data: Mapping[str, Any], key: str, model: type[BaseModel], problems: list[Problem]) -> Any:
    raw = data.get(key)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(Problem(key, f"must be a mapping, got {type(raw).__name__}"))
        return None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems.extend(problems_from_validation(exc, key, model))
        return None


def _names_of_field(model: type[BaseModel], key: str) -> set[str]:
    """``key`` and every other name (field name, validation aliases) of the field it validates."""
    for name, info in model.model_fields.items():
        va = info.validation_alias
        names = {name, *(c for c in getattr(va, "choices", ()) if isinstance(c, str))}
        if isinstance(va, str):
            names.add(va)
        if key in names:
            return names
    return {key}


def _algorithm(
    data: Mapping[str, Any], network_raw: Mapping[str, Any] | None, problems: list[Problem]
) -> AlgorithmSpec | None:
    raw = data.get("algorithm")
    if raw is None:
        problems.append(Problem("algorithm", "required section missing (e.g. algorithm: {name: PPO})"))
        return None
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, Mapping):
        problems.append(Problem("algorithm", f"must be a mapping, got {type(raw).__name__}"))
        return None
    fields = dict(raw)
    name = fields.pop("name", None)
    if not isinstance(name, str) or not name:
        problems.append(Problem("algorithm.name", "required field missing (the algorithm to train, e.g. PPO)"))
        return None
    try:
        spec_cls = MANIFEST_REGISTRY.get(name)
    except UnknownNameError as exc:
        problems.append(Problem("algorithm.name", str(exc)))
        return None
    if network_raw:
        for key in spec_cls.lifted_network_fields:
            if key in network_raw and not _names_of_field(spec_cls, key) & fields.keys():
                fields[key] = network_raw[key]
    try:
        return MANIFEST_REGISTRY.create(name, **fields)
    except ValidationError as exc:
        problems.extend(problems_from_validation(exc, "algorithm", spec_cls))
        return None


def _environment(data: Mapping[str, Any], algo: AlgorithmSpec | None, problems: list[Problem]) -> EnvSpec | None:
    raw = data.get("environment")
    if raw is None:
        problems.append(Problem("environment", "required section missing (e.g. environment: {name: CartPole-v1})"))
        return None
    if not isinstance(raw, Mapping):
        problems.append(Problem("environment", f"must be a mapping, got {type(raw).__name__}"))
        return None
    fields = dict(raw)
    env_type = fields.get("env_type") or (type(algo).default_env_type if algo is not None else None)
    if env_type is None:
        problems.append(Problem("environment.env_type", "required when the algorithm is invalid or unknown"))
        return None
    fields["env_type"] = env_type
    try:
        spec_cls = ENV_TYPES.spec_class(env_type)
    except UnknownNameError as exc:
        problems.append(Problem("environment.env_type", str(exc)))
        return None
    try:
        return spec_cls.model_validate(fields)
    except ValidationError as exc:
        problems.extend(problems_from_validation(exc, "environment", spec_cls))
        return None


def _cross_checks(manifest: TrainingManifest) -> list[Problem]:
    problems: list[Problem] = []
    algo = manifest.algorithm
    numeric = algo.hyperparameters()
    if manifest.mutation is not None:
        for key in manifest.mutation.rl_hp_selection:
            field = type(algo).model_fields.get(key)
            is_bool = field is not None and field.annotation is bool
            if key not in numeric and not (field is not None and not is_bool and key in type(algo).hpo_ranges):
                hint = closest(key, list(numeric))
                msg = f"{key!r} is not a numeric hyperparameter of {algo.name}"
                msg += f"; did you mean {hint!r}?" if hint else f" (numeric fields: {', '.join(sorted(numeric))})"
                problems.append(Problem(f"mutation.rl_hp_selection.{key}", msg))
        probs = manifest.mutation.probabilities
        for op, weight in probs.operator_weights().items():
            # Only what the manifest asked for is an error; unsupported defaults are dropped below.
            if weight > 0 and op not in type(algo).supported_mutations and op in probs.model_fields_set:
                problems.append(Problem(
                    f"mutation.probabilities.{op}",
                    f"{algo.name} supports only {', '.join(sorted(type(algo).supported_mutations))}; "
                    f"set {op}: 0",
                ))  # fmt: skip
    problems.extend(algo.manifest_problems(manifest))
    return problems


def _network_without_lifted(
    data: Mapping[str, Any], network_raw: Mapping[str, Any], algo: AlgorithmSpec | None, problems: list[Problem]
) -> Mapping[str, Any] | None:
    """The ``network`` section less the fields algorithm specs lift onto themselves.

    Fields the algorithm lifts were moved onto it by :func:`_algorithm`. A field another registered
    algorithm lifts is an error naming who takes it (or, when the algorithm itself is invalid, left
    to that one error). ``None`` when nothing else is left.
    """
    takers: dict[str, list[str]] = {}
    for name, cls in MANIFEST_REGISTRY.items():
        for key in cls.lifted_network_fields:
            takers.setdefault(key, []).append(name)
    spec_cls = type(algo) if algo is not None else _algorithm_class(data)
    own = spec_cls.lifted_network_fields if spec_cls is not None else frozenset()
    rest: dict[str, Any] = {}
    for key, value in network_raw.items():
        if key in own:
            continue
        if key in takers:
            if spec_cls is not None and algo is not None:
                names = ", ".join(sorted(takers[key]))
                problems.append(Problem(f"network.{key}", f"only {names} take {key}; {algo.name} does not"))
            continue
        rest[key] = value
    return rest if rest or not own else None


def _algorithm_class(data: Mapping[str, Any]) -> type[AlgorithmSpec] | None:
    raw = data.get("algorithm")
    name = raw.get("name") if isinstance(raw, Mapping) else raw
    if isinstance(name, str) and name in MANIFEST_REGISTRY:
        return MANIFEST_REGISTRY.get(name)
    return None


def validate_manifest(data: Mapping[str, Any], *, source: str | None = None) -> TrainingManifest:
    """Validate a manifest given as a dict; raise :class:`ManifestError` listing every problem."""
    if isinstance(data, TrainingManifest):
        return data
    if not isinstance(data, Mapping):
        raise ManifestError([Problem("", f"a manifest is a mapping of sections, got {type(data).__name__}")], source)
    data = _drop_nulls(data)
    problems: list[Problem] = []
    normalised: dict[str, Any] = {}
    for key, value in data.items():
        canonical = ALIASES.get(key, key)
        if canonical not in SECTIONS:
            hint = closest(str(key), [*SECTIONS, *ALIASES])
            msg = "unknown section" + (f"; did you mean {hint!r}?" if hint else f" (sections: {', '.join(SECTIONS)})")
            problems.append(Problem(str(key), msg))
            continue
        if canonical in normalised:
            problems.append(Problem(str(key), f"given twice (as {canonical!r} and its alias)"))
        normalised[canonical] = value
    api = normalised.get("apiVersion", API_VERSION)
    if api != API_VERSION:
        problems.append(Problem("apiVersion", f"must be {API_VERSION!r}, got {api!r}"))
    selection = normalised.get("tournament_selection")
    if isinstance(selection, Mapping) and selection.get("strategy") == "multi_frequency":
        problems.append(Problem("selection_strategy.strategy",
                                "multi_frequency (MF-PBT) is not supported yet; use strategy: tournament"))  # fmt: skip
        normalised.pop("tournament_selection")
    network_raw = normalised.get("network") if isinstance(normalised.get("network"), Mapping) else None
    algo = _algorithm(normalised, network_raw, problems)
    env = _environment(normalised, algo, problems)
    if network_raw is not None:
        normalised["network"] = _network_without_lifted(normalised, network_raw, algo, problems)
    sections = {key: _section(normalised, key, model, problems) for key, model in SECTIONS.items() if model is not None}
    if problems:
        raise ManifestError(problems, source)
    manifest = TrainingManifest.model_validate(
        {"apiVersion": api, "algorithm": algo, "environment": env,
         **{k: v for k, v in sections.items() if v is not None}}
    )  # fmt: skip
    # Copy the environment's num_envs onto algorithms that declare it.
    if "num_envs" in type(manifest.algorithm).model_fields and "num_envs" not in manifest.algorithm.model_fields_set:
        num_envs = getattr(manifest.environment, "num_envs", None)
        if num_envs is not None:
            setattr(manifest.algorithm, "num_envs", num_envs)  # noqa: B010
    problems = _cross_checks(manifest)
    if problems:
        raise ManifestError(problems, source)
    if manifest.mutation is not None:
        supported = type(manifest.algorithm).supported_mutations
        probs = manifest.mutation.probabilities
        drop = {op: 0.0 for op, w in probs.operator_weights().items() if w > 0 and op not in supported}
        if drop:
            manifest.mutation.probabilities = probs.model_copy(update=drop)
    return manifest


def read_manifest_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a YAML or JSON file (safe loading); file, line and column on syntax errors."""
    p = Path(path)
    if not p.exists():
        raise ManifestFileError(f"manifest not found: {p} (check the path; it is relative to {Path.cwd()})")
    if p.is_dir():
        raise ManifestFileError(f"manifest path is a directory, not a file: {p}")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ManifestSyntaxError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        what = exc.problem or exc.context or "syntax error"
        raise ManifestSyntaxError(f"{where}: invalid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise ManifestSyntaxError(f"{p}: invalid YAML: {exc}") from None
    if data is None:
        raise ManifestSyntaxError(f"{p}: the manifest is empty")
    if not isinstance(data, dict):
        raise ManifestSyntaxError(f"{p}: a manifest is a mapping of sections, got {type(data).__name__}")
    return data


def load_manifest(source: str | os.PathLike[str] | Mapping[str, Any] | TrainingManifest) -> TrainingManifest:
    """Load and validate a manifest from a path (YAML or JSON), a dict, or a manifest."""
    if isinstance(source, TrainingManifest):
        return source
    if isinstance(source, Mapping):
        return validate_manifest(source)
    return validate_manifest(read_manifest_file(source), source=str(source))
