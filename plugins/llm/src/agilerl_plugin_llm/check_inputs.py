"""Validation-time checks of what an LLM run reads besides its rows: the model directory and the
rubric file. Standard library only (no torch, no transformers), and no user code runs.

- **Model** (``pretrained_model_name_or_path``): a local directory, or a Hub id's snapshot in the local
  Hugging Face cache (:mod:`agilerl_plugin_llm.hf_cache` reads its layout). A Hub id this machine has
  not cached is refused, as the run would refuse it (it never downloads), with where to cache it or
  put a local copy; validate on the machine that trains. The directory must hold a ``config.json``
  that parses and names its ``model_type``, a tokenizer file, and weights whose headers read back:
  a safetensors file's header parses and the file is as long as its tensors say (a truncated copy
  is caught); a sharded index names shards that are there; a ``.bin`` file starts like a torch save.
- **Rubric** (``rubric_file_path`` + ``rubric_name``): read and parsed with :mod:`ast`, never imported,
  because validating a manifest must be safe on a manifest one did not write. The file must parse;
  each named function must be bound at the top level of the module and, when its definition can be
  read (a ``def``, a ``lambda``, a class with ``__call__``), accept the call the run makes,
  ``fn(completion, answer, question)``. A name bound by an import or a computed expression cannot
  be judged without running the file: it passes here, and the run's probe call (one empty
  completion, before training) checks it.
"""

from __future__ import annotations

import ast
import json
import os
import struct
from pathlib import Path
from typing import Any

from agilerl.errors import Problem, closest
from agilerl_plugin_llm.hf_cache import hub_snapshot, not_cached_advice

MODEL_FIELD = "network.pretrained_model_name_or_path"
#: Files any of which gives transformers a tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model",
    "tiktoken.model", "qwen.tiktoken",
)  # fmt: skip
#: Weight files transformers loads, in its order of preference.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_MAX_JSON_BYTES = 16 << 20
_WEIGHTS_FIX = "copy the model again, or re-save it with model.save_pretrained(DIR)"
_BUILD_HINT = (
    "save one with model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR), or build a tiny one "
    "with python -m agilerl_plugin_llm.testing build-tiny-model DIR"
)


def looks_like_path(text: str) -> bool:
    """Whether a model name is written as a path (else it may be a Hub id, ``org/name``)."""
    return text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep in text.replace("/", "")


def model_problems(value: str | None, where: str = MODEL_FIELD) -> list[Problem]:
    """Problems with the model a run would load (nothing is loaded)."""
    if not value:
        return [
            Problem(where, "required: the model to fine-tune (a local directory or a model id in the local HF cache)")
        ]
    text = str(value)
    path = Path(text).expanduser()
    if not path.exists():
        if looks_like_path(text):
            return [Problem(where, f"{text!r}: no such directory (relative to {Path.cwd()}); {_BUILD_HINT}")]
        snapshot = hub_snapshot(text)
        if snapshot is None:  # the run would stop here: it never downloads
            return [Problem(where, not_cached_advice(text))]
        path = snapshot
    if not path.is_dir():
        return [Problem(where, f"{text!r} is a file; give the model's directory (the one holding config.json)")]
    why = model_dir_problem(path)
    return [Problem(where, f"{text!r}: {why}")] if why else []


def model_dir(value: str) -> Path | None:
    """The directory a run loads ``value`` from (a local directory, or its local hub snapshot)."""
    path = Path(value).expanduser()
    if path.is_dir():
        return path
    return None if path.exists() or looks_like_path(value) else hub_snapshot(value)


def weight_names(directory: Path) -> set[str] | None:
    """The tensor names of a model directory's safetensors weights, read from their headers (nothing
    is loaded); None when they are not safetensors or cannot be read."""
    index = directory / "model.safetensors.index.json"
    try:
        if index.is_file():
            return set(_read_json(index).get("weight_map") or {})
        with (directory / "model.safetensors").open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > 100 << 20:
                return None
            header = json.loads(fh.read(length).decode("utf-8"))
    except (OSError, ValueError, AttributeError, struct.error, UnicodeDecodeError):
        return None
    return {k for k in header if k != "__metadata__"} if isinstance(header, dict) else None


def lora_target_problems(value: str | None, target_modules: str | list[str], where: str) -> list[Problem]:
    """``target_modules`` that name no module of the local model (peft would refuse them when the
    model loads): read from the weights' tensor names (``...self_attn.q_proj.weight``: module
    ``q_proj``). ``all-linear`` and regular expressions (a string) are left to peft."""
    if not value or isinstance(target_modules, str):
        return []
    directory = model_dir(str(value))
    names = weight_names(directory) if directory is not None else None
    if not names:
        return []
    modules = {name.rsplit(".", 1)[0] for name in names}

    def found(target: str) -> bool:
        return any(m == target or m.endswith("." + target) for m in modules)

    missing = [t for t in target_modules if not found(t)]
    if not missing:
        return []
    leaves = sorted({m.rsplit(".", 1)[-1] for m in modules if not m.rsplit(".", 1)[-1].isdigit()})
    said = ", ".join(f"{t!r}" + (f" (did you mean {h!r}?)" if (h := closest(t, leaves)) else "") for t in missing)
    return [
        Problem(
            where,
            f"{said}: no such module in the model at {str(value)!r} (its modules: "
            f"{', '.join(leaves[:20])}{', ...' if len(leaves) > 20 else ''}); or use all-linear",
        )
    ]


def model_dir_problem(path: Path) -> str | None:
    """Why the directory ``path`` is not a model transformers can load, or None."""
    config = path / "config.json"
    if not config.is_file():
        return f"no config.json: not a Hugging Face model directory ({_BUILD_HINT})"
    try:
        data = _read_json(config)
    except (OSError, ValueError) as exc:
        return f"config.json does not parse as JSON ({exc}); re-save the model with save_pretrained"
    if not isinstance(data, dict) or not data.get("model_type"):
        return ("config.json names no model_type, which transformers needs to pick the architecture; re-save the "
                "model with model.save_pretrained(DIR)")  # fmt: skip
    if not any((path / name).is_file() and (path / name).stat().st_size > 0 for name in TOKENIZER_FILES):
        return (f"no tokenizer files (one of {', '.join(TOKENIZER_FILES[:4])}, ...); save the tokenizer into "
                "the same directory with tokenizer.save_pretrained(DIR)")  # fmt: skip
    tok_config = path / "tokenizer_config.json"
    if tok_config.is_file():
        try:
            _read_json(tok_config)
        except (OSError, ValueError) as exc:
            return (
                f"tokenizer_config.json does not parse as JSON ({exc}); re-save it with tokenizer.save_pretrained(DIR)"
            )
    present = [name for name in WEIGHT_FILES if (path / name).is_file()]
    if not present:
        return f"no weights ({' or '.join(WEIGHT_FILES[::2])}); save the model with model.save_pretrained(DIR)"
    return _weights_problem(path, present[0])


def _read_json(path: Path) -> Any:
    if path.stat().st_size > _MAX_JSON_BYTES:
        raise ValueError(f"larger than {_MAX_JSON_BYTES >> 20} MiB")
    return json.loads(path.read_text(encoding="utf-8"))


def _weights_problem(directory: Path, name: str) -> str | None:
    if name.endswith(".index.json"):
        try:
            index = _read_json(directory / name)
            shards = sorted(set((index.get("weight_map") or {}).values()))
        except (OSError, ValueError, AttributeError) as exc:
            return f"{name} does not parse as a weight index ({exc}); {_WEIGHTS_FIX}"
        if not shards:
            return f"{name} maps no weights to shard files; {_WEIGHTS_FIX}"
        for shard in shards:
            why = _weight_file_problem(directory / shard)
            if why:
                return f"shard {shard} (named in {name}): {why}; {_WEIGHTS_FIX}"
        return None
    why = _weight_file_problem(directory / name)
    return f"{name}: {why}; {_WEIGHTS_FIX}" if why else None


def _weight_file_problem(path: Path) -> str | None:
    """Why a weight file cannot be read back (checked from its header: nothing is loaded)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if path.suffix != ".safetensors":
                # torch.save writes a zip archive (PK..); older files are a pickle (protocol byte 0x80).
                ok = head[:2] == b"PK" or head[:1] == b"\x80"
                return None if ok else "not a torch checkpoint (neither a zip archive nor a pickle)"
            if len(head) < 8:
                return f"truncated: {size} bytes, not even a safetensors header"
            (length,) = struct.unpack("<Q", head)
            if length <= 0 or 8 + length > size or length > 100 << 20:
                return f"not a safetensors file, or truncated (header of {length} bytes in a {size}-byte file)"
            header = json.loads(fh.read(length).decode("utf-8"))
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except (ValueError, UnicodeDecodeError) as exc:
        return f"its safetensors header does not parse ({exc})"
    if not isinstance(header, dict):
        return "its safetensors header is not a JSON object"
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)
               and isinstance(v.get("data_offsets"), list) and len(v["data_offsets"]) == 2), default=0)  # fmt: skip
    if 8 + length + end > size:
        return f"truncated: its header describes {8 + length + end} bytes but the file has {size}"
    return None


# --------------------------------------------------------------------------------------------------
# Rubrics
# --------------------------------------------------------------------------------------------------

#: How the run calls a reward function (:func:`agilerl_plugin_llm.rollout.sources.load_rubric`).
RUBRIC_CALL = ("completion", "answer", "question")
_MAX_RUBRIC_BYTES = 4 << 20


def _bindings(body: list[ast.stmt]) -> tuple[dict[str, ast.AST | None], bool]:
    """Names bound at a module's top level (through if/try/with blocks) -> their definition when it
    can be read (None: bound by an import or a computed value); and whether ``import *`` is used."""
    names: dict[str, ast.AST | None] = {}
    star = False
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node.value
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    star = True
                else:
                    names[alias.asname or alias.name.split(".")[0]] = None
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            for block in blocks:
                inner, inner_star = _bindings(block)
                names.update(inner)
                star = star or inner_star
    return names, star


def _arity_problem(args: ast.arguments, name: str, skip_self: bool = False) -> str | None:
    """Why ``name(completion, answer, question)`` does not fit the signature ``args``, or None."""
    positional = [*args.posonlyargs, *args.args][1 if skip_self else 0 :]
    required = len(positional) - len(args.defaults)
    kw_required = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    takes = ", ".join(a.arg for a in positional) + (", *" + args.vararg.arg if args.vararg else "")
    call = f"{name}({', '.join(RUBRIC_CALL)})"
    fix = f"; define it to take {', '.join(RUBRIC_CALL)} (unused ones may default, e.g. question=None)"
    if kw_required:
        return f"{name} requires keyword argument(s) {', '.join(kw_required)}, but the run calls {call}{fix}"
    if required > len(RUBRIC_CALL):
        return f"{name}({takes}) needs {required} arguments, but the run calls {call}{fix}"
    if len(positional) < len(RUBRIC_CALL) and args.vararg is None:
        return f"{name}({takes}) takes {len(positional)} argument(s), but the run calls {call}{fix}"
    return None


def _definition_problem(name: str, node: ast.AST | None) -> str | None:
    if node is None:
        return None  # imported or computed: only running the file could tell (the run's probe call does)
    if isinstance(node, ast.AsyncFunctionDef):
        return (f"{name} is an async def; a reward function is called synchronously and must return a number: "
                "make it a plain def")  # fmt: skip
    if isinstance(node, ast.FunctionDef):
        return _arity_problem(node.args, name)
    if isinstance(node, ast.Lambda):
        return _arity_problem(node.args, name)
    if isinstance(node, ast.ClassDef):
        # The run makes an instance (no arguments) and calls it.
        methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
        init = methods.get("__init__")
        if init is not None:
            args = init.args
            required = len([*args.posonlyargs, *args.args]) - 1 - len(args.defaults)
            if required > 0:
                return (f"class {name} is instantiated without arguments by the run, but its __init__ needs "
                        f"{required}; give its arguments defaults")  # fmt: skip
        call = methods.get("__call__")
        if call is None:
            return None if node.bases else (f"class {name} has no __call__: its instances cannot score a completion; "
                                            f"define __call__(self, {', '.join(RUBRIC_CALL)})")  # fmt: skip
        return _arity_problem(call.args, f"{name}.__call__", skip_self=True)
    if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr, ast.ListComp,
                         ast.DictComp, ast.SetComp, ast.BinOp)):  # fmt: skip
        return (f"{name} is bound to a {type(node).__name__.lower()} value, not a function: it is not callable; "
                f"define def {name}({', '.join(RUBRIC_CALL)}) -> float")  # fmt: skip
    return None


def rubric_problems(spec: Any) -> list[tuple[str, str]]:
    """``(field, why)`` for the rubric of a dataset-backed rollout env (the file is parsed, not run)."""
    path_value = getattr(spec, "rubric_file_path", None)
    if not path_value:
        return [("rubric_file_path", "required with dataset rows: a Python file defining "
                 f"reward_fn({', '.join(RUBRIC_CALL)}) -> float (another name: set rubric_name); or "
                 "reward_funcs: ['module:function', ...], batched functions the TRL way, or reward_model: a "
                 "local reward model directory")]  # fmt: skip
    path = Path(str(path_value)).expanduser()
    if not path.exists():
        return [("rubric_file_path", f"no such file: {path_value} (relative to {Path.cwd()})")]
    if not path.is_file():
        return [("rubric_file_path", f"{path_value} is a directory; give the Python file defining the reward function")]
    try:
        if path.stat().st_size > _MAX_RUBRIC_BYTES:
            return [("rubric_file_path", f"{path_value} is larger than {_MAX_RUBRIC_BYTES >> 20} MiB: not a rubric; "
                     "give the Python file defining the reward function")]  # fmt: skip
        source = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        return [("rubric_file_path", f"{path_value}: not UTF-8 text (byte {exc.start}): not a Python file; give the "
                 ".py file defining the reward function, saved as UTF-8")]  # fmt: skip
    except OSError as exc:
        return [("rubric_file_path", f"{path_value} cannot be read ({exc.strerror or exc}); check its permissions")]
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        return [("rubric_file_path", f"{path_value}:{exc.lineno}:{(exc.offset or 0)}: syntax error: {exc.msg}; fix "
                 "the file (python -m py_compile FILE shows the same)")]  # fmt: skip
    names, star = _bindings(tree.body)
    wanted = [n for n, _ in getattr(spec, "reward_functions", None) or [("reward_fn", 1.0)]]
    problems: list[tuple[str, str]] = []
    functions = sorted(n for n, d in names.items() if isinstance(d, (ast.FunctionDef, ast.Lambda, ast.ClassDef)))
    for name in wanted:
        if name not in names:
            if star:
                continue  # may come from the star import: the run's probe call checks it
            hint = closest(name, functions)
            listed = f"it defines {', '.join(functions)}" if functions else "it defines no function"
            fix = f"; did you mean {hint!r}?" if hint else "; set environment.rubric_name to the function to use"
            problems.append(("rubric_name", f"{path_value} has no top-level {name!r} ({listed}){fix}"))
            continue
        why = _definition_problem(name, names[name])
        if why:
            problems.append(("rubric_name", f"{path_value}: {why}"))  # the function's field (default reward_fn)
    return problems


__all__ = ["RUBRIC_CALL", "TOKENIZER_FILES", "WEIGHT_FILES", "looks_like_path", "model_dir_problem", "model_problems",
           "rubric_problems"]  # fmt: skip
