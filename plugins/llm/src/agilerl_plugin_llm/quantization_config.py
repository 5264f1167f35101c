"""The ``quantization`` field (QLoRA), read without torch or transformers: AgileRL's presets or a mapping
of ``transformers.BitsAndBytesConfig`` arguments, each checked as the user wrote it
(``algorithm.quantization.<key>``) before a run loads anything.

``BitsAndBytesConfig`` keeps an unknown key as an attribute and quantizes by its defaults, loads the
base in full precision when neither ``load_in_4bit`` nor ``load_in_8bit`` is set, and fails only when
the model loads on a wrong type or dtype name: each is refused here instead. The loader itself is
:func:`agilerl_plugin_llm.model.bnb_config`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agilerl.errors import closest

#: AgileRL's ``quantization`` presets: a bitsandbytes base under a LoRA adapter (QLoRA).
QUANTIZATION_PRESETS = ("nf4", "fp4", "int8")
#: Values that mean full precision (``quantization: none`` is AgileRL's recipe).
QUANTIZATION_OFF: tuple[Any, ...] = (None, False, "none", "None")
#: bitsandbytes' 4-bit data types (``BitsAndBytesConfig`` quietly takes any string and loads neither).
QUANT_TYPES = ("nf4", "fp4")
#: torch's floating dtypes by name (with their aliases): what a 4-bit layer can compute in.
COMPUTE_DTYPES = ("bfloat16", "float16", "half", "float32", "float", "float64", "double")
#: What ``BitsAndBytesConfig`` takes for ``bnb_4bit_quant_storage`` (its own list).
QUANT_STORAGE = ("float16", "float32", "int8", "uint8", "float64", "bfloat16")
#: The arguments ``BitsAndBytesConfig`` checks to be booleans.
_BOOLS = (
    "load_in_4bit",
    "load_in_8bit",
    "bnb_4bit_use_double_quant",
    "llm_int8_enable_fp32_cpu_offload",
    "llm_int8_has_fp16_weight",
)


def bnb_arguments() -> set[str]:
    """The named arguments of ``transformers.BitsAndBytesConfig.__init__``, read from the source of
    the installed transformers (parsed, not imported: validation imports no heavy package)."""
    import ast

    try:
        spec = importlib.util.find_spec("transformers")  # the top package only: nothing is imported
    except (ImportError, ValueError):
        return set()
    if spec is None or not spec.submodule_search_locations:
        return set()
    source = Path(next(iter(spec.submodule_search_locations))) / "utils" / "quantization_config.py"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "BitsAndBytesConfig":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = [*item.args.posonlyargs, *item.args.args, *item.args.kwonlyargs]
                    return {a.arg for a in args if a.arg != "self"}
    return set()


def _one_of(name: str, choices: tuple[str, ...], what: str) -> str:
    hint = closest(name, choices)
    return f"{what}; did you mean {hint!r}?" if hint else f"{what}: one of {', '.join(choices)}"


def field_problems(value: Any) -> list[tuple[str, str, Any]]:
    """Why ``quantization: value`` cannot run, as ``(key, why, value)`` per ``quantization.<key>`` (key
    ``""``: the field itself); empty when it can or when it is off. Nothing is imported."""
    if value in QUANTIZATION_OFF:
        return []
    if isinstance(value, str):
        if value in QUANTIZATION_PRESETS:
            return []
        return [("", f"{value!r} is not a preset; use one of none, {', '.join(QUANTIZATION_PRESETS)} or a mapping "
                     "of transformers.BitsAndBytesConfig arguments", value)]  # fmt: skip
    if not isinstance(value, Mapping):
        return [("", f"expected none, one of {', '.join(QUANTIZATION_PRESETS)} or a mapping of "
                     "transformers.BitsAndBytesConfig arguments", value)]  # fmt: skip
    problems: list[tuple[str, str, Any]] = []
    known = bnb_arguments()
    for key in value:
        if known and key not in known:
            hint = closest(str(key), known)
            fix = f"did you mean {hint!r}?" if hint else f"its arguments are {', '.join(sorted(known))}"
            problems.append((str(key), f"transformers.BitsAndBytesConfig takes no such argument; {fix}", value[key]))
    for key in _BOOLS:
        if key in value and not isinstance(value[key], bool):
            problems.append((key, "expected true or false", value[key]))
    four, eight = value.get("load_in_4bit") is True, value.get("load_in_8bit") is True
    if four and eight:
        problems.append(("load_in_8bit", "load_in_4bit and load_in_8bit are both true: bitsandbytes loads one way; "
                                         "keep one (QLoRA's recipe is load_in_4bit with nf4)", True))  # fmt: skip
    elif not four and not eight and not _non_bool_loads(value):
        problems.append(("", "quantizes nothing: transformers loads the base in full precision unless load_in_4bit "
                             "or load_in_8bit is true; set one (or write quantization: none for full precision)",
                         dict(value)))  # fmt: skip
    quant_type = value.get("bnb_4bit_quant_type")
    if "bnb_4bit_quant_type" in value and quant_type not in QUANT_TYPES:
        why = _one_of(str(quant_type), QUANT_TYPES, "bitsandbytes' 4-bit types are nf4 and fp4")
        problems.append(("bnb_4bit_quant_type", why, quant_type))
    for key, choices, what in (
        ("bnb_4bit_compute_dtype", COMPUTE_DTYPES, "not a floating torch dtype"),
        ("bnb_4bit_quant_storage", QUANT_STORAGE, "not a storage dtype BitsAndBytesConfig takes"),
    ):
        if key in value and value[key] not in choices:
            problems.append((key, _one_of(str(value[key]), choices, what), value[key]))
    threshold = value.get("llm_int8_threshold", 6.0)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0:
        problems.append(("llm_int8_threshold", "expected a number >= 0 (the outlier threshold, 6.0 by default)",
                         threshold))  # fmt: skip
    skip = value.get("llm_int8_skip_modules")
    if skip is not None and (not isinstance(skip, list) or not all(isinstance(s, str) for s in skip)):
        problems.append(("llm_int8_skip_modules", "expected a list of module names, e.g. [lm_head]", skip))
    if eight and not four:
        for key in value:
            if str(key).startswith("bnb_4bit_"):
                problems.append((str(key), "applies to 4-bit loading and is ignored under load_in_8bit; remove it "
                                           "or load with load_in_4bit", value[key]))  # fmt: skip
    return problems


def _non_bool_loads(value: Mapping[str, Any]) -> bool:
    """Whether a load_in_* key has a non-boolean value (reported on its own, not as "quantizes nothing")."""
    return any(k in value and not isinstance(value[k], bool) for k in ("load_in_4bit", "load_in_8bit"))


def check_type(value: Any) -> Any:
    """``value`` when it is a preset's text, a mapping or off; else a ``ValueError`` saying what the field
    takes (a field validator before pydantic's own, whose union errors name its types, not the field).
    The rest of :func:`field_problems` is reported by the spec's model validator, with its other problems."""
    if value in QUANTIZATION_OFF or isinstance(value, (str, Mapping)):
        return value
    raise ValueError(f"expected none, one of {', '.join(QUANTIZATION_PRESETS)} or a mapping of "
                     "transformers.BitsAndBytesConfig arguments")  # fmt: skip


def is_quantized(value: Any) -> bool:
    """Whether ``quantization: value`` loads the base through bitsandbytes (a preset or a mapping)."""
    return value not in QUANTIZATION_OFF


def missing_bitsandbytes() -> str | None:
    """Why QLoRA cannot run here: bitsandbytes (4-bit nf4/fp4 and 8-bit layers on a CUDA GPU and, from
    0.48 on, the CPU too) is not installed; None when it is. Nothing is imported."""
    if importlib.util.find_spec("bitsandbytes") is not None:
        return None
    return ("QLoRA (a bitsandbytes 4-bit/8-bit base under a LoRA adapter) needs the bitsandbytes package, which "
            "is not installed here: pip install 'agilerl-plugin-llm[qlora]'. Remove it (or set quantization: none) "
            "to train in full precision")  # fmt: skip


__all__ = [
    "COMPUTE_DTYPES",
    "QUANTIZATION_OFF",
    "QUANTIZATION_PRESETS",
    "QUANT_STORAGE",
    "QUANT_TYPES",
    "bnb_arguments",
    "check_type",
    "field_problems",
    "is_quantized",
    "missing_bitsandbytes",
]
