"""The manifest's JSON Schema, with every registered algorithm and env type, for editors."""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

from pydantic import BaseModel

from agilerl.models import sections
from agilerl.models.composition import section_models
from agilerl.models.manifest import API_VERSION
from agilerl.registry import ENV_TYPES, MANIFEST_REGISTRY


def _model_schema(model: type[BaseModel], defs: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/$defs/{model}")
    defs.update(schema.pop("$defs", {}))
    return schema


def manifest_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a training manifest."""
    defs: dict[str, Any] = {}
    algo_variants = []
    for name, cls in MANIFEST_REGISTRY.items():
        s = _model_schema(cls, defs)
        s.setdefault("properties", {})["name"] = {"const": name, "description": f"Algorithm {name}"}
        s["required"] = sorted({*s.get("required", []), "name"})
        s["title"] = name
        ranges = cls.mutable_ranges()
        if ranges:
            s["x-hpo-ranges"] = {k: [r.low, r.high] for k, r in ranges.items()}
        s["x-paradigm"], s["x-regime"], s["x-default-env-type"] = cls.paradigm, cls.regime, cls.default_env_type
        algo_variants.append(s)
    env_variants = []
    for env_type, env_cls in ENV_TYPES.spec_classes().items():
        s = _model_schema(env_cls, defs)
        s.setdefault("properties", {})["env_type"] = {"const": env_type}
        s["title"] = f"{env_cls.__name__} (env_type {env_type})"
        env_variants.append(s)
    props: dict[str, Any] = {
        "apiVersion": {"const": API_VERSION, "default": API_VERSION},
        "algorithm": {"oneOf": algo_variants} if algo_variants else {"type": "object"},
        "environment": {"oneOf": env_variants} if env_variants else {"type": "object"},
    }
    for key, model in section_models().items():
        if model is not None:
            props[key] = _model_schema(model, defs)
    props["selection_strategy"] = {"$ref": "#/properties/tournament_selection"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "agilerl training manifest",
        "type": "object",
        "additionalProperties": False,
        "required": ["algorithm", "environment"],
        "properties": props,
        "$defs": defs,
    }


# --------------------------------------------------------------------------------------------------
# Markdown reference (agilerl schema --markdown -> docs/reference/manifest.md)
# --------------------------------------------------------------------------------------------------


def _type_text(ann: Any) -> str:
    """A short readable type: ``int | None``, ``list[int]``, ``FooSpec | BarSpec``."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is typing.Literal:
        return " \\| ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_text(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_text(a) for a in args)}]" if args else name
    if ann is type(None):
        return "None"
    return getattr(ann, "__name__", str(ann).replace("typing.", ""))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _fields_table(model: type[BaseModel]) -> list[str]:
    notes: dict[str, str] = getattr(model, "upstream_notes", {}) or {}
    rows = ["| field | type | default | description | vs AgileRL |", "|---|---|---|---|---|"]
    for fname, field in model.model_fields.items():
        default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
        ann = field.annotation
        va = field.validation_alias
        others = [c for c in getattr(va, "choices", ()) if isinstance(c, str) and c != fname]
        alias = f" (alias: {', '.join(others)})" if others else ""
        rows.append(
            f"| `{fname}`{alias} | {_type_text(ann)} | `{_cell(default)}` | {_cell(field.description or '')} "
            f"| {_cell(notes.get(fname, ''))} |"
        )
    return rows


def _first_line(obj: Any) -> str:
    return (inspect.getdoc(obj) or "").split("\n\n")[0].replace("\n", " ")


def _plugin_section(key: str, model: type[BaseModel] | None) -> list[tuple[str, type[BaseModel]]]:
    """A plugin-owned section and the parts its model lists in ``reference_parts`` (title, model)."""
    if model is None:
        return []
    return [(key, model), *getattr(model, "reference_parts", ())]


def manifest_markdown() -> str:
    """The manifest reference page: every section and field, its default, and how it differs from
    AgileRL's (the ``vs AgileRL`` column: empty means AgileRL's name, meaning and default)."""
    models = section_models()

    lines = [
        "# Manifest reference",
        "",
        "Generated by `agilerl schema --markdown` from the spec classes of core and of the plugins",
        "installed when it ran (`tests/test_reference_page.py` fails when this page is out of date).",
        'Unknown fields are errors; `null` means "use the default". The last column says where a field',
        "differs from AgileRL's: empty means the same name, meaning and default; a field we cannot",
        "honour is refused at validation with a message naming it.",
        "",
    ]
    shared: list[tuple[str, type[BaseModel]]] = [
        *_plugin_section("network", models["network"]),
        ("training", models["training"] or sections.TrainingSpec),
        ("mutation", sections.MutationSpec),
        ("mutation.probabilities", sections.MutationProbabilities),
        ("mutation.rl_hp_selection.<name>", sections.RLHyperparameter),
        ("tournament_selection (alias selection_strategy)", sections.TournamentSelectionSpec),
        ("selection_strategy (strategy: multi_frequency, MF-PBT)", sections.MultiFrequencySelectionSpec),
        *_plugin_section("replay_buffer", models["replay_buffer"]),
    ]
    for title, model in shared:
        lines += [f"## `{title}`", "", _first_line(model), "", *_fields_table(model), ""]
    lines += ["## `algorithm` (by `name`)", ""]
    for name, cls in MANIFEST_REGISTRY.items():
        entry = MANIFEST_REGISTRY.entry(name)
        head = f"### `{name}` — {cls.paradigm}/{cls.regime}, env_type `{cls.default_env_type}` ({entry.provider})"
        extra = []
        if cls.lifted_network_fields:
            extra.append(f"Also read from `network`: {', '.join(f'`{k}`' for k in sorted(cls.lifted_network_fields))}.")
        if cls.training_fields:
            extra.append(f"Reads `training`: {', '.join(f'`{k}`' for k in sorted(cls.training_fields))}.")
        lines += [head, "", _first_line(cls), "", *([" ".join(extra), ""] if extra else []), *_fields_table(cls), ""]
    refused = [(n, e.value.not_supported) for n, e in ((k, MANIFEST_REGISTRY.entry(k)) for k in MANIFEST_REGISTRY.keys())
               if e.value.not_supported]  # fmt: skip
    if refused:
        lines += ["### Known but not supported yet", "", "| name | validation says |", "|---|---|"]
        lines += [f"| `{n}` | {_cell(msg)} |" for n, msg in refused] + [""]
    lines += ["## `environment` (by `env_type`)", ""]
    for env_type, env_cls in ENV_TYPES.spec_classes().items():
        lines += [f"### `{env_type}` — `{env_cls.__name__}`", "", _first_line(env_cls), "", *_fields_table(env_cls), ""]
    return "\n".join(lines)
