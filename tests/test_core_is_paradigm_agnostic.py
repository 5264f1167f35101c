"""Core knows no paradigm: its source (code, strings, comments, docstrings) names no paradigm, env
type, algorithm or plugin hyperparameter of any installed plugin.

The one exception is the seed API's forwarding: names AgileRL users import from core
(``agilerl.models.make_gym_env`` ...) and the table saying which plugin to install for a name
(``errors.KNOWN_PROVIDERS``). Both are listed here explicitly.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from agilerl.models import AlgorithmSpec, EnvSpec, sections
from agilerl.registry import BUILDERS, ENV_TYPES, MANIFEST_REGISTRY, STRATEGIES

CORE = Path(__file__).resolve().parents[1] / "core" / "src" / "agilerl"

#: The seed API's forwarding names (core resolves them from the plugin that registers them).
SEED_NAMES = {"make_gym_env", "make_pz_env", "make_single_env", "make_bandit_env", "make_llm_env",
              "make_rollout_env_factory"}  # fmt: skip
#: A key of AgileRL's manifest contract that it retired; core refuses it with the replacement.
SEED_NAMES.add("async_rollout")
#: Plugin names that are also words core uses in another sense: the gym plugin's ``offline`` env type
#: vs W&B's offline mode and the HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE variables core passes on.
HOMONYMS = {"offline"}
#: (file, top-level assignment) whose whole statement may name plugins' names: "pip install X" hints.
ALLOWED_ASSIGNMENTS = {("errors.py", "KNOWN_PROVIDERS")}


def _forbidden() -> dict[str, str]:
    words: dict[str, str] = {}
    for name in MANIFEST_REGISTRY.keys():
        cls = MANIFEST_REGISTRY.get(name)
        words[name.lower()] = f"algorithm {name}"
        words[cls.paradigm.lower()] = f"paradigm {cls.paradigm}"
    for env_type in ENV_TYPES.keys():
        words[env_type.lower()] = f"env type {env_type}"
    for key in BUILDERS.keys():
        words[key.lower()] = f"paradigm {key}"
    for key in STRATEGIES.keys():
        words[key.split("/")[0].lower()] = f"paradigm {key}"
    core_fields = set(AlgorithmSpec.model_fields) | set(EnvSpec.model_fields)
    for model in vars(sections).values():
        if isinstance(model, type) and issubclass(model, sections.Spec):
            core_fields |= set(model.model_fields)
    for name in MANIFEST_REGISTRY.keys():
        for field in set(MANIFEST_REGISTRY.get(name).model_fields) - core_fields:
            words.setdefault(field.lower(), f"hyperparameter {field} of {name}")
    for paradigm in ("llm", "gym", "bandit", "single_agent", "multi_agent", "pettingzoo", "gymnasium"):
        words.setdefault(paradigm, f"paradigm {paradigm}")
    return words


def _core_fields() -> set[str]:
    """Field names of core's own sections: AgileRL's manifest contract, core's to name."""
    names = set(AlgorithmSpec.model_fields) | set(EnvSpec.model_fields)
    for model in vars(sections).values():
        if isinstance(model, type) and issubclass(model, sections.Spec):
            names |= set(model.model_fields)
    return names


def _allowed_lines(path: Path) -> set[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines: set[int] = set()
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for t in targets:
            if isinstance(t, ast.Name) and (path.name, t.id) in ALLOWED_ASSIGNMENTS:
                lines |= set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def _violations(path: Path, forbidden: dict[str, str]) -> list[str]:
    out: list[str] = []
    core_fields = _core_fields()
    allowed = _allowed_lines(path)
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    for tok in tokens:
        if tok.type not in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT) or tok.start[0] in allowed:
            continue
        for word in re.findall(r"[A-Za-z0-9_]+", tok.string):
            if word in SEED_NAMES or word in core_fields:
                continue
            for part in {word, *word.strip("_").split("_")}:
                what = forbidden.get(part.lower())
                if what and part.lower() not in HOMONYMS:
                    out.append(f"{path.relative_to(CORE)}:{tok.start[0]}: {word!r} names {what}")
    return out


def test_core_source_names_no_paradigm_algorithm_or_plugin_hyperparameter() -> None:
    forbidden = _forbidden()
    assert "ppo" in forbidden and "llm" in forbidden and "ent_coef" in forbidden  # the plugins are installed
    found = [v for path in sorted(CORE.rglob("*.py")) for v in _violations(path, forbidden)]
    assert not found, "core names plugin things:\n" + "\n".join(found)
