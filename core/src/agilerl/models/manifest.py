"""The training manifest: one YAML/JSON file describing a whole run, validated before anything runs."""

from __future__ import annotations

import json
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, model_validator

from agilerl.checks import manifest_problems
from agilerl.errors import AmbiguousNameError, ManifestError, ManifestSyntaxError, Problem, UnknownNameError, closest
from agilerl.models.base import AlgorithmSpec, EnvSpec
from agilerl.models.composition import (
    ALIASES,
    SECTIONS,
    plugin_training_fields,
    section_models,
    training_spec_class,
)
from agilerl.models.sections import (
    LoggingSpec,
    MultiFrequencySelectionSpec,
    MutationSpec,
    TournamentSelectionSpec,
    TrainingSpec,
    ValidationSpec,
    unsupported_operators_message,
)
from agilerl.registry import ENV_TYPES, MANIFEST_REGISTRY, PLUGIN_SECTIONS, SECTION_SCHEMAS
from agilerl.safe_load import load_file

API_VERSION = "agilerl.com/v1"


def __getattr__(name: str) -> Any:
    if name == "ComposedTrainingSpec":  # how pickle finds the composed class in another process
        return training_spec_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: ``tournament_selection.strategy`` values: the model each selects.
SELECTION_STRATEGIES = ("tournament", "multi_frequency")


class TrainingManifest(BaseModel):
    """A validated manifest. Build it with :func:`load_manifest` or :func:`validate_manifest`."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)

    apiVersion: str = API_VERSION  # noqa: N815 - the manifest's own key
    algorithm: SerializeAsAny[AlgorithmSpec]
    environment: SerializeAsAny[EnvSpec]
    #: The owning plugin's model (``agilerl_register_sections``).
    network: SerializeAsAny[Any] = None
    training: SerializeAsAny[TrainingSpec] = Field(default_factory=lambda: training_spec_class()())
    mutation: MutationSpec | None = None
    #: The owning plugin's model.
    replay_buffer: SerializeAsAny[Any] = None
    #: ``selection_strategy`` in AgileRL's manifests: tournament selection or MF-PBT, by ``strategy``.
    tournament_selection: TournamentSelectionSpec | MultiFrequencySelectionSpec | None = Field(
        default=None, discriminator="strategy"
    )
    logging: LoggingSpec | None = None
    validation: ValidationSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _plugin_sections(cls, data: Any) -> Any:
        # Mappings given for plugin-owned sections (and training) validate with the registered models.
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for key in PLUGIN_SECTIONS:
            if isinstance(data.get(key), Mapping):
                owner = SECTION_SCHEMAS.owner(key)
                if owner is None:
                    raise ValueError(f"{key}: no installed plugin reads this section")
                data[key] = owner.model_validate(data[key])
        if isinstance(data.get("training"), Mapping):
            data["training"] = training_spec_class().model_validate(data["training"])
        return data

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
        """A plain dict that :func:`validate_manifest` turns back into this same manifest.

        Fields left at their default are omitted, except discriminators (``env_type``, a union
        member's tag, ...): without them a member's kind would be re-inferred from its keys. The
        copy stored in a checkpoint or run directory therefore re-validates to the same spec.
        """
        out: dict[str, Any] = {"apiVersion": self.apiVersion}
        out["algorithm"] = {"name": self.algorithm.name, **dump_spec(self.algorithm)}
        out["environment"] = {**dump_spec(self.environment), "env_type": self.environment.env_type}
        for key in (
            "network",
            "training",
            "mutation",
            "replay_buffer",
            "tournament_selection",
            "logging",
            "validation",
        ):
            value = getattr(self, key)
            if value is not None:
                out[key] = dump_spec(value)
        if isinstance(self.tournament_selection, MultiFrequencySelectionSpec):
            out["tournament_selection"]["strategy"] = self.tournament_selection.strategy
        result: dict[str, Any] = json.loads(json.dumps(out, default=str))
        return result


def _is_tag(info: Any) -> bool:
    """A field typed as one literal value: a discriminator, always written."""
    return typing.get_origin(info.annotation) is typing.Literal and len(typing.get_args(info.annotation)) == 1


def dump_spec(model: BaseModel) -> dict[str, Any]:
    """``model.model_dump(exclude_defaults=True)`` that keeps every nested model's discriminators."""
    out: dict[str, Any] = model.model_dump(exclude_defaults=True)
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if _is_tag(info):
            out[name] = value
        elif name in out:
            out[name] = _with_tags(value, out[name])
    return out


def _with_tags(value: Any, dumped: Any) -> Any:
    if isinstance(value, BaseModel):
        return dump_spec(value)
    if isinstance(value, Mapping) and isinstance(dumped, dict):
        return {k: _with_tags(v, dumped[k]) if k in dumped else dumped.get(k) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and isinstance(dumped, list) and len(value) == len(dumped):
        return [_with_tags(v, d) for v, d in zip(value, dumped, strict=True)]
    return dumped


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


def _model_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that validates the mapping holding ``loc[-1]`` inside ``model``."""
    current: Any = model
    for item in loc[:-1]:
        if current is None or not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(item))
        if field is None:
            return None
        ann = field.annotation
        current = None
        for cand in getattr(ann, "__args__", ()) or (ann,):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                current = cand
                break
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _fields_of(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """Field names (and aliases) valid at ``loc`` inside ``model``, for did-you-mean hints."""
    current = _model_at(model, loc)
    if current is None:
        return []
    names = list(current.model_fields)
    for f in current.model_fields.values():
        va = f.validation_alias
        if va is not None and hasattr(va, "choices"):
            names += [c for c in va.choices if isinstance(c, str) and c not in names]
    return names


def _synonym(model: type[BaseModel] | None, loc: tuple[Any, ...], key: str) -> str | None:
    """Our name for ``key`` when it is another library's name for a field (``field_synonyms``)."""
    current = _model_at(model, loc)
    synonyms: dict[str, str] = getattr(current, "field_synonyms", {}) or {}
    target = synonyms.get(key) or synonyms.get(key.lower())
    if target is None or current is None:
        return None
    if "." in target:  # another section's field
        section, _, name = target.partition(".")
        other = section_models().get(section)
        return target if other is not None and name in other.model_fields else None
    return target if target in _fields_of(model, loc) else None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The model classes an annotation names (``A | B | None``, ``Annotated[...]``, ``list[A]``...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _user_loc(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], type[BaseModel] | None]:
    """``loc`` as the user wrote it, without the tag pydantic inserts for a union of models
    (``a.kind.b`` is ``a.b`` in the manifest, ``kind`` being the union member's tag), and the
    model that holds its last key (None when unknown)."""
    out: list[Any] = []
    current: list[type[BaseModel]] = [model] if model is not None else []
    holder: type[BaseModel] | None = model
    for item in loc:
        if isinstance(item, str) and len(current) > 1 and not any(item in m.model_fields for m in current):
            tagged = [m for m in current if any(_is_tag(f) and item in typing.get_args(f.annotation)
                                                for f in m.model_fields.values())]  # fmt: skip
            if tagged:
                current = tagged[:1]
                continue  # a union's tag, not a key of the manifest
        out.append(item)
        holder = current[0] if len(current) == 1 else None
        if isinstance(item, str):
            fields = [m.model_fields[item] for m in current if item in m.model_fields]
            current = [c for f in fields for c in _models_in(f.annotation)]
    return tuple(out), holder


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def problems_from_validation(exc: ValidationError, prefix: str, model: type[BaseModel] | None = None) -> list[Problem]:
    """One :class:`Problem` per pydantic error, with did-you-mean for unknown keys."""
    out: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and "[" in x and x.endswith("]")))
        raw_loc = loc
        loc, holder = _user_loc(model, loc)
        path = _path(prefix, loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            key = str(loc[-1]) if loc else "?"
            # Behind a union's tag the holding model is known from the walk, not from the path.
            where, at = (holder, loc[-1:]) if raw_loc != loc and holder is not None else (model, loc)
            current = _model_at(where, at)
            same = sorted(_names_of_field(current, key) - {key}) if current is not None else []
            if same:  # a field's other name (a validation alias): pydantic read one, this one is left over
                out.append(Problem(path, f"{key} and {' / '.join(same)} name the same field; keep one of them"))
                continue
            synonym = _synonym(where, at, key)
            hint = synonym or closest(key, _fields_of(where, at))
            msg = "unknown field" + (f"; did you mean {hint!r}?" if hint else "")
            note = (getattr(current, "synonym_notes", {}) or {}).get(key) if synonym else None
            if note:
                msg += f" ({key}: {note})"
            elif synonym:
                msg += f" ({key} is another library's name for it)"
            valid = _fields_of(where, at)
            if not hint and valid:
                msg += f" (valid fields: {', '.join(sorted(valid))})"
        elif kind == "missing":
            msg = "required field missing"
        else:
            msg = err["msg"]
            if "input" in err and kind not in {"model_type", "dict_type"}:
                shown = repr(err["input"])
                msg += f" (got {shown if len(shown) < 60 else shown[:57] + '...'})"
            if kind == "list_type" and isinstance(err.get("input"), str):
                msg += f"; write a list in brackets, e.g. [{err['input']}] (with --set, quote it: --set '{path}=[...]')"
            elif kind in {"int_type", "float_type", "string_type", "bool_type"} and isinstance(err.get("input"), list):
                msg += "; this field takes one value, not a list"
            elif kind in {"int_parsing", "float_parsing", "bool_parsing"} and "," in _text(err.get("input")):
                msg += "; this field takes one value, not a list"  # --set x=64,64 reads as the text '64,64'
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


def _registered() -> str:
    names = MANIFEST_REGISTRY.names()
    return f"registered: {', '.join(names)}" if names else "no algorithm is registered: is a plugin installed?"


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
        problems.append(Problem("algorithm", f"required section missing (algorithm: {{name: ...}}; {_registered()})"))
        return None
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, Mapping):
        problems.append(Problem("algorithm", f"must be a mapping, got {type(raw).__name__}"))
        return None
    fields = dict(raw)
    name = fields.pop("name", None)
    if not isinstance(name, str) or not name:
        problems.append(Problem("algorithm.name", f"required field missing (the algorithm to train; {_registered()})"))
        return None
    try:
        spec_cls = MANIFEST_REGISTRY.get(name)
    except (UnknownNameError, AmbiguousNameError) as exc:
        problems.append(Problem("algorithm.name", str(exc)))
        return None
    lifted: set[str] = set()
    if network_raw:
        for key in spec_cls.lifted_network_fields:
            if key in network_raw and not _names_of_field(spec_cls, key) & fields.keys():
                fields[key] = network_raw[key]
                lifted.add(key)
    if spec_cls.not_supported:
        problems.append(Problem("algorithm.name", spec_cls.not_supported))
        raise _Refused
    try:
        return MANIFEST_REGISTRY.create(name, **fields)
    except ValidationError as exc:
        for problem in problems_from_validation(exc, "algorithm", spec_cls):
            # A field written under `network:` is reported where the user wrote it.
            key = problem.path.removeprefix("algorithm.").split(".")[0]
            if key in lifted and problem.path.startswith("algorithm."):
                problem = Problem("network." + problem.path.removeprefix("algorithm."), problem.message)
            problems.append(problem)
        return None


class _Refused(Exception):
    """The manifest needs a feature we do not have: that one problem is the whole answer."""


def _environment(data: Mapping[str, Any], algo: AlgorithmSpec | None, problems: list[Problem]) -> EnvSpec | None:
    raw = data.get("environment")
    if raw is None:
        problems.append(
            Problem(
                "environment",
                "required section missing: name the env to train on "
                "(environment: {name: ...}; its plugin's guide lists the fields)",
            )
        )
        return None
    if not isinstance(raw, Mapping):
        problems.append(Problem("environment", f"must be a mapping, got {type(raw).__name__}"))
        return None
    fields = dict(raw)
    env_type = fields.get("env_type") or (type(algo).default_env_type if algo is not None else None)
    if env_type == "" and algo is not None:
        problems.append(Problem("environment.env_type", f"required: {algo.name} declares no default env type"))
        return None
    if env_type is None:
        # The env type comes from the algorithm, whose problem is already reported: one root cause,
        # one error. The section is checked once the algorithm is fixed.
        return None
    fields["env_type"] = env_type
    try:
        spec_cls = ENV_TYPES.spec_class(env_type)
    except (UnknownNameError, AmbiguousNameError) as exc:
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
            if key not in numeric and not (field is not None and not is_bool and key in type(algo).mutable_ranges()):
                hint = closest(key, list(numeric))
                msg = f"{key!r} is not a numeric hyperparameter of {algo.name}"
                msg += f"; did you mean {hint!r}?" if hint else f" (numeric fields: {', '.join(sorted(numeric))})"
                problems.append(Problem(f"mutation.rl_hp_selection.{key}", msg))
        probs = manifest.mutation.probabilities
        supported = type(algo).supported_mutations
        # Only what the manifest asked for is an error; unsupported defaults are dropped below.
        refused = [op for op, weight in probs.operator_weights().items()
                   if weight > 0 and op not in supported and op in probs.model_fields_set]  # fmt: skip
        if refused:
            message = unsupported_operators_message(algo.name, refused, type(algo).unsupported_mutation_reason)
            problems.append(Problem("mutation.probabilities", message))
    selection = manifest.tournament_selection
    if isinstance(selection, MultiFrequencySelectionSpec):
        try:
            selection.brackets(manifest.training.pop_size)
        except ValueError as exc:
            problems.append(Problem("selection_strategy", str(exc)))
    if problems:  # the spec's own checks run once the shared sections are right: one cause, one error
        return problems
    training = manifest.training
    if "hpo" in training.model_fields_set and training.hpo != manifest.hpo:
        problems.append(Problem("training.hpo", (
            "true needs a mutation or tournament_selection section (evolution runs when one is given)"
            if training.hpo else "false, but a mutation or tournament_selection section is given: remove one"
        )))  # fmt: skip
    for key, default in plugin_training_fields().items():
        if key in training.model_fields_set and getattr(training, key) != default:
            if key not in type(algo).training_fields:
                problems.append(Problem(f"training.{key}", f"not used by {algo.name} (not supported yet); remove it"))

    problems.extend(manifest_problems(manifest))
    if problems:
        return problems
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
        try:
            return MANIFEST_REGISTRY.get(name)
        except AmbiguousNameError:  # reported once, at algorithm.name
            return None
    return None


def _unread_section(key: str, algo: AlgorithmSpec | None) -> str:
    """The message for a plugin-owned section no installed plugin reads."""
    who = f"{algo.name} does not read it" if algo is not None else "remove it"
    return (
        f"no installed plugin reads the {key} section ({who}, or install the plugin that owns it; "
        f"`agilerl plugins` lists what is installed)"
    )


def _as_written(problems: list[Problem], data: Mapping[str, Any]) -> list[Problem]:
    """``problems`` with the selection section named as the manifest wrote it (``selection_strategy``
    or ``tournament_selection``, aliases of one section), in each path and message."""
    written = next((str(k) for k in data if ALIASES.get(k, k) == "tournament_selection"), None)
    if written is None:
        return problems
    other = "selection_strategy" if written == "tournament_selection" else "tournament_selection"
    renamed = []
    for p in problems:
        head, dot, rest = p.path.partition(".")
        path = f"{written}{dot}{rest}" if head == other else p.path
        renamed.append(Problem(path, p.message.replace(f"{other} section", f"{written} section")))
    return renamed


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
    network_raw = normalised.get("network") if isinstance(normalised.get("network"), Mapping) else None
    try:
        algo = _algorithm(normalised, network_raw, problems)
    except _Refused:
        raise ManifestError(problems[-1:], source) from None
    env = _environment(normalised, algo, problems)
    if network_raw is not None:
        normalised["network"] = _network_without_lifted(normalised, network_raw, algo, problems)
    selection = normalised.get("tournament_selection")
    multi_frequency = isinstance(selection, Mapping) and selection.get("strategy") == "multi_frequency"
    strategy = selection.get("strategy") if isinstance(selection, Mapping) else None
    if strategy is not None and strategy not in SELECTION_STRATEGIES:
        # One error naming the choices, not the tournament spec's complaints about MF-PBT's fields.
        key = next((k for k in data if ALIASES.get(k, k) == "tournament_selection"), "tournament_selection")
        hint = closest(str(strategy), list(SELECTION_STRATEGIES))
        problems.append(Problem(f"{key}.strategy", (
            f"unknown strategy {strategy!r}" + (f"; did you mean {hint!r}?" if hint else "")
            + f" (one of: {', '.join(SELECTION_STRATEGIES)})")))  # fmt: skip
        normalised.pop("tournament_selection")
    models = {**section_models(), **({"tournament_selection": MultiFrequencySelectionSpec} if multi_frequency else {})}
    for key in PLUGIN_SECTIONS:
        if models[key] is None and normalised.get(key) is not None:
            problems.append(Problem(key, _unread_section(key, algo)))
    sections = {key: _section(normalised, key, model, problems) for key, model in models.items() if model is not None}
    if sections.get("training") is None and not any(p.path.startswith("training") for p in problems):
        sections["training"] = training_spec_class()()
    if problems:
        raise ManifestError(_as_written(problems, data), source)
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
        raise ManifestError(_as_written(problems, data), source)
    if manifest.mutation is not None:
        supported = type(manifest.algorithm).supported_mutations
        probs = manifest.mutation.probabilities
        drop = {op: 0.0 for op, w in probs.operator_weights().items() if w > 0 and op not in supported}
        if drop:
            manifest.mutation.probabilities = probs.model_copy(update=drop)
    return manifest


def read_manifest_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a YAML or JSON file strictly and within limits (:mod:`agilerl.safe_load`)."""
    p = Path(path)
    data = load_file(p)
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
