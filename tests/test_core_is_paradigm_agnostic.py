"""Core knows no paradigm: its source (code, strings, comments, docstrings) names no paradigm, env
type, algorithm or plugin hyperparameter of any installed plugin, and none of the vocabulary of the
sections plugins own: encoders (and the kinds in the gym plugin's encoder table), replay buffers,
exploration epsilons, the model classes and fields of a section schema a plugin registers
(``agilerl_register_sections``), nor the env RL floors are measured on (CartPole). Core knows the
sections' names only.

The one exception is the seed API's forwarding: names AgileRL users import from core
(``agilerl.models.make_gym_env`` ...) and the table saying which plugin to install for a name
(``known_plugins.KNOWN_PLUGINS``). Both are listed here explicitly.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import typing
from pathlib import Path

from agilerl.models import AlgorithmSpec, EnvSpec, sections
from agilerl.registry import BUILDERS, ENV_TYPES, MANIFEST_REGISTRY, PLUGIN_SECTIONS, SECTION_SCHEMAS, STRATEGIES
from agilerl_plugin_gym.sections.encoders import ENCODERS

CORE = Path(__file__).resolve().parents[1] / "core" / "src" / "agilerl"

#: The seed API's forwarding names (core resolves them from the plugin that registers them).
SEED_NAMES = {"make_gym_env", "make_pz_env", "make_single_env", "make_bandit_env", "make_llm_env",
              "make_rollout_env_factory"}  # fmt: skip
#: A key of AgileRL's manifest contract that it retired; core refuses it with the replacement.
SEED_NAMES.add("async_rollout")
#: The names of the sections plugins own: core routes them (their content is the plugins').
SEED_NAMES |= set(PLUGIN_SECTIONS)
#: The RL vocabulary of the plugin-owned sections, whatever fields the installed plugins declare.
SECTION_VOCABULARY = {"encoder": "encoder vocabulary", "encoders": "encoder vocabulary",
                      "replay": "replay-buffer vocabulary", "replaybuffer": "replay-buffer vocabulary",
                      "eps": "epsilon vocabulary", "epsilon": "epsilon vocabulary"}  # fmt: skip
#: Plugin names that are also words core uses in another sense: the gym plugin's ``offline`` env type
#: vs W&B's offline mode and the HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE variables core passes on.
HOMONYMS = {"offline"}
#: (file, top-level assignment) whose whole statement may name plugins' names: "pip install X" hints.
ALLOWED_ASSIGNMENTS = {("known_plugins.py", "KNOWN_PLUGINS")}


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
    words.update(SECTION_VOCABULARY)
    # the encoder kinds (the gym plugin's table), the model classes of the plugin-owned sections
    # (MlpSpec, NetworkSpec, ReplayBufferSpec, ...) and the env the RL floors were measured on
    for arch in ENCODERS:
        words.setdefault(arch.lower(), f"encoder kind {arch}")
    for section, model in _plugin_section_models():
        words.setdefault(model.__name__.lower(), f"{model.__name__}, a model of the plugin-owned {section} section")
    words.setdefault("cartpole", "the gym env CartPole")
    return words


#: Field names of plugin-owned sections that are also core's own words (its spec bases, mutation).
GENERIC_FIELDS = {"kind", "name", "activation", "arch", "alpha"}


def _section_fields(core_fields: set[str]) -> dict[str, str]:
    """Each field of a plugin-registered section schema (``max_size``, ``encoder_config``, ...)."""
    out: dict[str, str] = {}
    for section, model in _plugin_section_models():
        for field in set(model.model_fields) - core_fields - GENERIC_FIELDS:
            out.setdefault(field.lower(), f"field {field} of the plugin-owned {section} section")
    return out


def _plugin_section_models() -> list[tuple[str, type]]:
    """Every model of a plugin-registered section schema, nested models included."""
    todo = [(k, SECTION_SCHEMAS.owner(k)) for k in PLUGIN_SECTIONS] + [
        ("training", m) for m in SECTION_SCHEMAS.extensions("training")
    ]
    out: list[tuple[str, type]] = []
    while todo:
        section, model = todo.pop()
        if model is None or any(m is model for _, m in out):
            continue
        out.append((section, model))
        for info in model.model_fields.values():
            todo += [(section, m) for m in _models_in(info.annotation)]
    return out


def _models_in(annotation: object) -> list[type]:
    if isinstance(annotation, type) and issubclass(annotation, sections.Spec):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


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
    section_fields = _section_fields(core_fields)
    allowed = _allowed_lines(path)
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    for tok in tokens:
        if tok.type not in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT) or tok.start[0] in allowed:
            continue
        for word in re.findall(r"[A-Za-z0-9_]+", tok.string):
            if word in SEED_NAMES or word in core_fields:
                continue
            field = section_fields.get(word.lower())
            if field:  # a plugin-owned section's field, written whole
                out.append(f"{path.relative_to(CORE)}:{tok.start[0]}: {word!r} names {field}")
            for part in {word, *word.strip("_").split("_")}:
                what = forbidden.get(part.lower())
                if what and part.lower() not in HOMONYMS:
                    out.append(f"{path.relative_to(CORE)}:{tok.start[0]}: {word!r} names {what}")
            # ReplayBufferSpec, encoderConfig: the sections' vocabulary inside CamelCase names too
            for part in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", word):
                what = SECTION_VOCABULARY.get(part.lower())
                if what and part != word:
                    out.append(f"{path.relative_to(CORE)}:{tok.start[0]}: {word!r} names {what}")
    return out


def test_core_source_names_no_paradigm_algorithm_or_plugin_hyperparameter() -> None:
    forbidden = _forbidden()
    assert "ppo" in forbidden and "llm" in forbidden and "ent_coef" in forbidden  # the plugins are installed
    # the plugin-owned sections' fields are in the list: an encoder's or a buffer's field in core fails
    fields = _section_fields(_core_fields())
    assert {"encoder_config", "latent_dim", "max_size", "learning_delay", "weight_sync_backend"} <= set(fields)
    found = [v for path in sorted(CORE.rglob("*.py")) for v in _violations(path, forbidden)]
    assert not found, "core names plugin things:\n" + "\n".join(found)


def test_the_check_sees_section_vocabulary(tmp_path: Path) -> None:
    """What core held before the sections moved to the plugins is caught, word by word."""
    forbidden = _forbidden()
    sample = tmp_path / "sections.py"
    sample.write_text(
        "class ReplayBufferSpec: ...\n"
        "ENCODER_ARCHS = ('mlp', 'cnn')\n"
        "eps_start: float = 1.0  # the exploration epsilon\n"
        "size = manifest.replay_buffer.max_size\n"
        '"""A readable type: ``MlpSpec | CnnSpec``."""\n'
        "# the default network for CartPole is about 70 KiB\n"
        "KINDS = ('simba', 'multiinput', 'cnn_lstm')\n"
    )
    global CORE
    saved, CORE = CORE, tmp_path
    try:
        found = _violations(sample, forbidden)
    finally:
        CORE = saved
    assert any("ReplayBufferSpec" in v for v in found) and any("ENCODER_ARCHS" in v for v in found)
    assert any("eps_start" in v for v in found) and any("epsilon" in v for v in found)
    assert any("'max_size' names field max_size" in v for v in found)
    assert not any("'replay_buffer'" in v for v in found)  # the section's name is core's to know
    assert any("'MlpSpec' names MlpSpec" in v for v in found) and any("'CnnSpec' names CnnSpec" in v for v in found)
    assert any("'CartPole' names the gym env" in v for v in found)
    assert {"simba", "multiinput", "lstm"} <= {v.split("names encoder kind ")[-1] for v in found}
