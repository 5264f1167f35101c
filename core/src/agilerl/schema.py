"""The manifest's JSON Schema, with every registered algorithm and env type, for editors."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agilerl.models.manifest import API_VERSION, SECTIONS
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
        if cls.hpo_ranges:
            s["x-hpo-ranges"] = {k: list(v) for k, v in cls.hpo_ranges.items()}
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
    for key, model in SECTIONS.items():
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
