"""Rollout sources: where the text envs a rollout algorithm plays against come from.

A source is registered through this plugin's own hook,
:func:`agilerl_plugin_llm.hookspecs.agilerl_llm_register_rollout_sources`, as
``register(field, build)``; the ``LLMEnvSpec`` field that is set picks the source. This plugin
registers its built-in sources through that same hook (see
:func:`agilerl_plugin_llm.rollout.registration.register_rollout_sources`):

* ``dataset_path`` / ``hf_dataset_id``: labelled rows scored by a rubric (single turn);
* ``entrypoint``: a Python text env (``module:Class``, ``path/to/file.py:Class`` or a factory),
  multi-turn up to ``max_turns``.

The OpenEnv plugin adds ``env_url``. No torch or transformers are imported here.
"""

from __future__ import annotations

import csv
import inspect
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError, closest
from agilerl.imports import get_attribute, import_object, load_file_module
from agilerl.registry import HookTable, resolve
from agilerl_plugin_llm.chat import ConversationError, plain, prompt_messages
from agilerl_plugin_llm.envs import TextEnv, as_reward
from agilerl_plugin_llm.rollout.catalog import CATALOG
from agilerl_plugin_llm.rollout.gem_envs import gem_config_problem, import_gem, uses_gem
from agilerl_plugin_llm.rollout.reward_funcs import BatchReward, batched_sources_set, build_reward_funcs

MakeEnv = Callable[[], TextEnv]
Build = Callable[..., tuple[MakeEnv, "int | None"]]

#: Source fields we know of but that only another plugin (or runtime) provides.
KNOWN_EXTERNAL_SOURCES: dict[str, str] = {
    "env_url": "an OpenEnv service needs the OpenEnv plugin: pip install agilerl-plugin-openenv",
    "env_image": "env_image needs the Ray runtime (env hosts as Kubernetes pods), which agilerl does not provide; "
    "serve the env yourself and use env_url, or use entrypoint",
}

#: LLMEnvSpec fields no rollout source implements (set: an error, never silently ignored).
UNSUPPORTED_ROLLOUT_FIELDS: dict[str, str] = {
    "env_packages": "installing packages at run time is not supported; install the env's packages beforehand",
    "adaptive_task_sampling": "adaptive task sampling is not supported yet",
    "observation_processor": "observation processors are not supported yet; transform the text in your env",
    "env_vars": "env_vars are not supported; set the variables in the environment that runs agilerl",
}
#: Fields that only configure the OpenEnv client (``env_url``); meaningless for the built-in sources.
ENV_URL_ONLY_FIELDS = (
    "action_field", "action_error_field", "observation_field", "mcp_tool", "request_timeout_s",
    "max_concurrent_resets", "invalid_action_reward", "env_url_headers_from_env",
)  # fmt: skip


def unsupported_fields(spec: Any, source_field: str) -> list[tuple[str, str]]:
    """``(field, why)`` for fields set on ``spec`` that the chosen source would not honour."""
    out = [(f, why) for f, why in UNSUPPORTED_ROLLOUT_FIELDS.items() if _is_set(getattr(spec, f, None))]
    if getattr(spec, "strict_chat_template_boundary", None) is False:
        out.append(("strict_chat_template_boundary", "turn boundaries are always rendered token-exactly (strict)"))
    out += batched_source_problems(spec, source_field)
    if source_field != "env_url":
        out += [
            (f, "only applies to env_url (OpenEnv) sources")
            for f in ENV_URL_ONLY_FIELDS
            if _is_set(getattr(spec, f, None))
        ]
    return out


def batched_source_problems(spec: Any, source_field: str) -> list[tuple[str, str]]:
    """``(field, why)`` for batched reward sources (``reward_funcs``, ``reward_model``) set on a source
    that is not dataset rows: they score rows' completions, and an env scores its own replies."""
    if source_field in ("dataset", "dataset_path", "hf_dataset_id"):
        return []
    return [(f, "scores dataset rows (dataset_path, hf_dataset_id or dataset); an env scores its own replies")
            for f in batched_sources_set(spec)]  # fmt: skip


def check_supported(spec: Any, source_field: str) -> None:
    problems = unsupported_fields(spec, source_field)
    if problems:
        field, why = problems[0]
        raise RolloutSourceError(f"environment.{field}: {why}; remove it")


# Which canonical row columns a dataset-backed rollout reads.
QUESTION_COLUMNS = ("question", "prompt")
ANSWER_COLUMN = "answer"


class RolloutSourceError(AgileRLError):
    """A rollout env could not be built from the ``environment`` section (names the field and fix)."""


# --------------------------------------------------------------------------------------------------
# The source table, filled from the hook
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutSource:
    field: str
    build: Any
    provider: str
    #: Optional ``check(spec) -> [(field, why), ...]`` run at validation (must import nothing heavy).
    check: Any = None

    def resolve(self) -> Build:
        return resolve(self.build, f"rollout source for {self.field!r}")  # type: ignore[no-any-return]

    def problems(self, spec: Any, manifest: Any = None) -> list[tuple[str, str]]:
        """What the source's own validation check finds wrong with ``spec`` (nothing is built). A check
        taking a ``manifest`` argument also gets the whole manifest (its ``validation`` section, say)."""
        if self.check is None:
            return []
        check = resolve(self.check, f"validation check of rollout source {self.field!r}")
        try:
            takes_manifest = "manifest" in inspect.signature(check).parameters
        except (TypeError, ValueError):
            takes_manifest = False
        return list(check(spec, manifest=manifest) if takes_manifest else check(spec))


#: Every registered rollout source, by the spec field that selects it (core's generic hook table).
ROLLOUT_SOURCES = HookTable("agilerl_llm_register_rollout_sources", kind="rollout source")


def rollout_sources() -> dict[str, RolloutSource]:
    """Every registered rollout source, by the spec field that selects it."""
    return {e.key: RolloutSource(e.key, e.value, e.provider, e.extra.get("check")) for e in ROLLOUT_SOURCES.entries()}


def _is_set(value: Any) -> bool:
    return value not in (None, "", [], {}, False)


def select_source(spec: Any) -> RolloutSource:
    """The one source ``spec`` names (several fields may map to one source, e.g. the dataset ones)."""
    table = rollout_sources()
    present = [f for f in table if _is_set(getattr(spec, f, None))]
    for field, why in KNOWN_EXTERNAL_SOURCES.items():
        if field not in table and _is_set(getattr(spec, field, None)):
            raise RolloutSourceError(f"environment.{field}: {why}")
    builds = {id(table[f].build): table[f] for f in present}
    if not builds:
        fields = sorted({*table, "env_url"})
        name = str(getattr(spec, "name", "") or "")
        hint = closest(name, CATALOG) if name else None
        if hint is not None:  # a misspelt catalog name: it named no catalog env, so nothing was filled in
            raise RolloutSourceError(
                f"environment.name: {name!r} is not a catalog env; did you mean {hint!r}? "
                f"(catalog: {', '.join(sorted(CATALOG))}; any other rollout env needs one source: "
                f"{', '.join(fields)})"
            )
        raise RolloutSourceError(
            "environment: a rollout env needs exactly one source; set one of "
            f"{', '.join(fields)} (dataset rows also need rubric_file_path, reward_funcs or reward_model)"
        )
    if len(builds) > 1:
        raise RolloutSourceError(
            f"environment: a rollout env takes exactly one source, got {', '.join(present)}; keep one of them"
        )
    if len(present) > 1:  # several fields of one source (dataset_path and hf_dataset_id): one would be ignored
        raise RolloutSourceError(
            f"environment: {' and '.join(present)} both name where the rows come from, and only one would be "
            "read; keep one of them"
        )
    return next(iter(builds.values()))


def build_source(spec: Any, *, seed: int | None = None, split: str = "train") -> tuple[MakeEnv, int | None, str]:
    """``(make_env, max_turns, field)`` for ``spec``'s source. ``split`` reaches sources that take it."""
    source = select_source(spec)
    batched = batched_source_problems(spec, source.field)  # any source, a plugin's too
    if batched:
        raise RolloutSourceError(f"environment.{batched[0][0]}: {batched[0][1]}")
    build = source.resolve()
    kwargs: dict[str, Any] = {"seed": seed}
    try:
        params = inspect.signature(build).parameters
        if "split" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            kwargs["split"] = split
    except (TypeError, ValueError):
        pass
    result = build(spec, **kwargs)
    if not (isinstance(result, tuple) and len(result) == 2 and callable(result[0])):
        raise RolloutSourceError(
            f"the rollout source for {source.field!r} (from {source.provider!r}) must return "
            f"(make_env, max_turns), got {type(result).__name__}"
        )
    make_env, max_turns = result
    return make_env, max_turns, source.field


# --------------------------------------------------------------------------------------------------
# Loading user code: rubric files and env entrypoints
# --------------------------------------------------------------------------------------------------


def load_python_file(path: str | Path, field: str) -> Any:
    """Import a Python file as a module (core's :func:`agilerl.imports.load_file_module`)."""
    return load_file_module(path, what=f"environment.{field}", error=RolloutSourceError)


def load_object(ref: str, field: str) -> Any:
    """``module:attr`` or ``path/to/file.py:attr`` (core's :func:`agilerl.imports.import_object`)."""
    return import_object(ref, what=f"environment.{field}", error=RolloutSourceError)


# --------------------------------------------------------------------------------------------------
# Dataset rows + rubric
# --------------------------------------------------------------------------------------------------


#: The dataset loaders (``dataset.env``: torch and ``datasets``, runtime layer), resolved by name when a
#: run reads rows, the way builders are: the source table and its checks stay in the specs layer.
_DATASET_LOADERS = "agilerl_plugin_llm.dataset.env"


def _dataset_loader(name: str) -> Any:
    return resolve(f"{_DATASET_LOADERS}:{name}", what="dataset loader")


def _read_rows(spec: Any) -> list[dict[str, Any]]:
    path = getattr(spec, "dataset_path", None)
    hf_id = getattr(spec, "hf_dataset_id", None)
    named = getattr(spec, "dataset", None)
    if named and not path and not hf_id:
        # `dataset`: a local file if one exists, else a dataset id in the local HF cache.
        path, hf_id = (named, None) if Path(named).exists() else (None, named)
    if path:
        p = Path(path)
        if not p.exists():
            raise RolloutSourceError(f"environment.dataset_path: not found: {p} (relative to {Path.cwd()})")
        suffix = p.suffix.lower()
        try:
            if p.is_dir():  # a local copy of a Hub dataset: its data files or a save_to_disk directory
                try:
                    rows = [dict(r) for r in _dataset_loader("load_local_dataset")(p, "environment.dataset")]
                except _dataset_loader("DatasetError") as exc:
                    raise RolloutSourceError(str(exc)) from None
            elif suffix == ".jsonl":
                rows = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
            elif suffix == ".json":
                data = json.loads(p.read_text(encoding="utf-8"))
                rows = data if isinstance(data, list) else data.get("data", data.get("rows"))
            elif suffix == ".csv":
                with p.open(newline="", encoding="utf-8") as fh:
                    rows = list(csv.DictReader(fh))
            elif suffix == ".parquet":
                import pandas as pd

                rows = plain(pd.read_parquet(p).to_dict(orient="records"))  # list columns come as arrays
            else:
                raise RolloutSourceError(
                    f"environment.dataset_path: unsupported file type {suffix!r}; use .jsonl, .json, .csv or .parquet"
                )
        except (json.JSONDecodeError, UnicodeDecodeError, csv.Error) as exc:
            raise RolloutSourceError(f"environment.dataset_path: cannot parse {p}: {exc}") from exc
    elif hf_id:
        try:
            ds = _dataset_loader("load_cached_dataset")(
                hf_id,
                "environment.hf_dataset_id" if not named else "environment.dataset",
                config=getattr(spec, "hf_dataset_config", None),
            )
        except _dataset_loader("DatasetError") as exc:
            raise RolloutSourceError(str(exc)) from None
        rows = [dict(r) for r in ds]
    else:  # pragma: no cover - select_source guarantees one of them
        raise RolloutSourceError("environment: set dataset_path or hf_dataset_id")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise RolloutSourceError(f"environment.dataset_path: {path or hf_id} holds no rows (a list of records)")
    columns = getattr(spec, "columns", None) or {}
    if columns:
        copies = column_copies(columns, rows[0], where=path or hf_id)
        rows = [{**r, **{role: r[col] for col, role in copies.items() if col in r}} for r in rows]
    first = rows[0]
    if not any(c in first for c in QUESTION_COLUMNS):
        raise RolloutSourceError(
            f"environment: the rows of {path or hf_id} have no 'question' (or 'prompt') column "
            f"(columns: {', '.join(map(str, first))}); map one with columns: {{question: <your column>}}"
        )
    return rows


def column_copies(columns: dict[str, str], first: dict[str, Any], *, where: Any) -> dict[str, str]:
    """``environment.columns`` as ``{dataset column: role}`` (AgileRL's reading: ``{nums: question,
    target: answer}`` makes the ``nums`` column the question and ``target`` the answer).

    ``{role: dataset column}`` (``{question: nums}``) is accepted too when the key is no column of
    the dataset; the original columns stay, for prompt templates that name them.
    """
    copies: dict[str, str] = {}
    for key, value in columns.items():
        if key in first:
            copies[key] = value
        elif value in first:
            copies[value] = key
        else:
            raise RolloutSourceError(
                f"environment.columns: neither {key!r} nor {value!r} is a column of {where} (columns: "
                f"{', '.join(map(str, first))}); write {{dataset column: role}}, e.g. {{nums: question, target: answer}}"
            )
    return copies


def split_rows(rows: list[dict[str, Any]], fraction: float | None, seed: int | None) -> tuple[list[Any], list[Any]]:
    """Seeded shuffle, then the first ``fraction`` for training and the rest held out."""
    order = list(range(len(rows)))
    random.Random(0 if seed is None else seed).shuffle(order)
    n_train = _train_count(len(rows), fraction)
    train = [rows[i] for i in order[:n_train]]
    test = [rows[i] for i in order[n_train:]] or train
    return train, test


def _train_count(rows: int, fraction: float | None) -> int:
    frac = 0.9 if fraction is None else float(fraction)
    return min(max(1, round(rows * frac)), rows)


def heldout_count(rows: int, fraction: float | None) -> int:
    """How many of ``rows`` rows :func:`split_rows` holds out (all of them when none is left over: the
    held-out split is then the training rows)."""
    return rows - _train_count(rows, fraction) or rows


@dataclass(frozen=True)
class RowsFactory:
    """A dataset source's env factory, with how many rows its split holds (the held-out evaluation's
    default size, :func:`agilerl_plugin_llm.training_fields.eval_prompt_count`)."""

    make: Callable[[], RubricEnv]
    rows: int

    def __call__(self) -> RubricEnv:
        return self.make()


def load_rubric(spec: Any) -> Callable[[str, Any, Any], float]:
    """The reward ``(completion, answer, question) -> float`` from ``rubric_file_path``: the function
    ``rubric_name`` names, or the weighted sum of the ones it lists (``reward_weights``)."""
    path = getattr(spec, "rubric_file_path", None) or getattr(spec, "reward_file_path", None)
    if not path:
        raise RolloutSourceError(
            "environment.rubric_file_path: dataset rows need a reward (or reward_funcs / reward_model): a Python file defining "
            "reward_fn(completion, answer, question) -> float"
        )
    named = getattr(spec, "reward_functions", None) or [(getattr(spec, "rubric_name", None) or "reward_fn", 1.0)]
    module = load_python_file(path, "rubric_file_path")
    parts: list[tuple[str, float, Callable[..., Any]]] = []
    for name, weight in named:
        fn = get_attribute(
            module, name, what="environment.rubric_name", error=RolloutSourceError, where=f"file {str(path)!r}"
        )
        if inspect.isclass(fn):
            fn = fn()
        if not callable(fn):
            raise RolloutSourceError(f"environment.rubric_name: {name!r} in {path} is not callable")
        parts.append((name, weight, fn))
    if len(parts) == 1 and parts[0][1] == 1.0:
        return parts[0][2]  # type: ignore[no-any-return]

    def weighted(completion: str, answer: Any, question: Any) -> float:
        return sum(weight * value for weight, value in rubric_parts(weighted, completion, answer, question).values())

    weighted.parts = parts  # type: ignore[attr-defined]  # each function's value goes to the completions log
    return weighted


def rubric_parts(rubric: Any, completion: str, answer: Any, question: Any) -> dict[str, tuple[float, float]]:
    """``{name: (weight, value)}`` of each function of a rubric that lists several (``rubric_name``)."""
    return {
        name: (weight, as_reward(fn(completion, answer, question), f"{name}(completion, answer, question)"))
        for name, weight, fn in rubric.parts
    }


def render_prompt(template: dict[str, Any] | None, row: dict[str, Any]) -> tuple[str | None, str, str | None]:
    """``(system, user, assistant_prefix)`` from a ``prompt_template`` keyed ``system_0``, ``user_1``, ...

    Values are ``str.format`` templates over the row's columns. Without a template the user message
    is the row's question.
    """
    question = next((row[c] for c in QUESTION_COLUMNS if c in row), "")
    if not template:
        return None, str(question), None
    fields = {**row, "question": question}
    system = user = prefix = None
    for key in sorted(template, key=lambda k: int(k.rsplit("_", 1)[-1])):
        try:
            text = str(template[key]).format(**fields)
        except KeyError as exc:
            raise RolloutSourceError(
                f"environment.prompt_template.{key}: no column {exc.args[0]!r} in the rows "
                f"(columns: {', '.join(map(str, row))})"
            ) from None
        role = key.rsplit("_", 1)[0]
        if role == "system":
            system = text
        elif role == "user":
            user = text if user is None else f"{user}\n{text}"
        else:
            prefix = text
    return system, user if user is not None else str(question), prefix


def conversational_prompt(row: dict[str, Any], index: int) -> list[dict[str, Any]] | None:
    """Row ``index``'s prompt as messages when it is conversational (TRL's form), else None."""
    column = next((c for c in QUESTION_COLUMNS if c in row), None)
    if column is None:
        return None
    try:
        return prompt_messages(row[column], f"environment: row {index} column {column!r}")
    except ConversationError as exc:
        raise RolloutSourceError(str(exc)) from None


def check_conversational_rows(spec: Any, rows: list[dict[str, Any]]) -> None:
    """Every conversational prompt is a well-formed conversation, and can be rendered as the spec says."""
    chats = [i for i, row in enumerate(rows) if conversational_prompt(row, i) is not None]
    if not chats:
        return
    if not getattr(spec, "apply_chat_template", True):
        raise RolloutSourceError(
            f"environment.apply_chat_template: row {chats[0]}'s prompt is a list of messages, which only a chat "
            "template renders; remove apply_chat_template: false"
        )
    if getattr(spec, "prompt_template", None):
        raise RolloutSourceError(
            f"environment.prompt_template: row {chats[0]}'s prompt is already a list of messages; a prompt "
            "template formats text prompts only, so remove it (put a system message in the rows instead)"
        )


def check_prompt_template(template: dict[str, Any] | None) -> None:
    if not template:
        return
    roles = []
    for key in template:
        role, sep, index = str(key).rpartition("_")
        if not sep or not index.isdigit() or role not in {"system", "user", "assistant"}:
            raise RolloutSourceError(
                f"environment.prompt_template.{key}: keys are <role>_<position> with role system, user or "
                "assistant (e.g. system_0, user_1, assistant_2)"
            )
        roles.append((int(index), role))
    roles.sort()
    if "assistant" in [r for _, r in roles[:-1]]:
        raise RolloutSourceError(
            "environment.prompt_template: an assistant entry may only come last (it starts the reply)"
        )


class RubricEnv:
    """Single-turn text env over labelled rows: the reply is scored by the rubric and the episode ends.

    ``reset(seed)`` picks row ``seed % len(rows)`` (a random row when ``seed`` is None).
    """

    max_turns = 1

    def __init__(
        self,
        rows: list[dict[str, Any]],
        rubric: Callable[[str, Any, Any], float],
        *,
        prompt_template: dict[str, Any] | None = None,
        max_reward: float | None = None,
        seed: int | None = None,
        batch_reward: Any = None,
    ) -> None:
        self.rows = rows
        self.rubric = rubric
        #: Batched reward sources (``reward_funcs``, ``reward_model``): the reply is scored with its batch after the
        #: rollout (:class:`~agilerl_plugin_llm.rollout.reward_funcs.BatchReward`), not here.
        self.batch_reward = batch_reward
        self.user_prompt = ""
        self.prompt_template = prompt_template
        self.max_reward = max_reward
        self.rng = random.Random(seed)
        self.system_prompt: str | None = None
        self.assistant_prefix: str | None = None
        #: A conversational row's prompt messages (the harness renders them with the chat template).
        self.prompt_messages: list[dict[str, Any]] | None = None
        self.row: dict[str, Any] = {}

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        index = self.rng.randrange(len(self.rows)) if seed is None else seed % len(self.rows)
        self.row = self.rows[index]
        self.prompt_messages = conversational_prompt(self.row, index)
        if self.prompt_messages is not None:
            self.system_prompt = self.assistant_prefix = None
            return str(self.prompt_messages[-1]["content"]), {"row": index}
        self.system_prompt, user, self.assistant_prefix = render_prompt(self.prompt_template, self.row)
        self.user_prompt = user
        return user, {"row": index}

    def score(self, completion: str) -> float:
        question = next((self.row[c] for c in QUESTION_COLUMNS if c in self.row), None)
        answer = self.row.get(ANSWER_COLUMN)
        return as_reward(self.rubric(completion, answer, question), "the rubric")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.batch_reward is not None:  # scored with its batch after the rollout (TRL's batched functions)
            prompt = self.row["prompt"] if "prompt" in self.row else self.user_prompt
            columns = {k: v for k, v in self.row.items() if k != "prompt"}
            return "", 0.0, True, False, {"reward_row": {"prompt": prompt, "completion": action, "columns": columns}}
        info: dict[str, Any] = {}
        if getattr(self.rubric, "parts", None):  # several functions: each one's value for the completions log
            question = next((self.row[c] for c in QUESTION_COLUMNS if c in self.row), None)
            parts = rubric_parts(self.rubric, action, self.row.get(ANSWER_COLUMN), question)
            info["rewards"] = {name: value for name, (_, value) in parts.items()}
            reward = float(sum(weight * value for weight, value in parts.values()))
        else:
            reward = self.score(action)
        if self.max_reward is not None:
            info["success"] = reward >= self.max_reward
        return "", reward, True, False, info


def build_dataset_source(spec: Any, *, seed: int | None = None, split: str = "train") -> tuple[MakeEnv, int]:
    """Dataset rows + rubric. Checks the rubric on a real row now, so mistakes surface before training."""
    check_supported(spec, "dataset_path")
    template = getattr(spec, "prompt_template", None)
    check_prompt_template(template)
    rows = _read_rows(spec)
    check_conversational_rows(spec, rows)
    train, test = split_rows(rows, getattr(spec, "train_test_split", None), seed)
    chosen = test if split == "test" else train
    max_reward = getattr(spec, "max_reward", None)
    batched = _batched_reward(spec, max_reward)
    if batched is not None:
        turns = getattr(spec, "max_turns", None)
        if turns not in (None, 1):
            raise RolloutSourceError("environment.max_turns: a dataset rollout is single-turn; remove max_turns")
        base_seed = 0 if seed is None else seed

        def make_batched_env() -> RubricEnv:
            nonlocal base_seed
            base_seed += 1
            return RubricEnv(chosen, _no_rubric, prompt_template=template, max_reward=max_reward, seed=base_seed,
                             batch_reward=batched)  # fmt: skip

        return RowsFactory(make_batched_env, len(chosen)), 1
    rubric = load_rubric(spec)
    probe = RubricEnv(chosen, rubric, prompt_template=template, max_reward=max_reward)
    probe.reset(seed=0)
    name = "+".join(n for n, _ in getattr(spec, "reward_functions", None) or [("reward_fn", 1.0)])
    try:
        value = rubric("", probe.row.get(ANSWER_COLUMN), next(probe.row[c] for c in QUESTION_COLUMNS if c in probe.row))
    except Exception as exc:
        raise RolloutSourceError(
            f"environment.rubric_name: {name}(completion, answer, question) raised on a probe call with an "
            f"empty completion: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        as_reward(value, f"{name}(completion, answer, question)")
    except AgileRLError as exc:
        raise RolloutSourceError(f"environment.rubric_name: {exc}") from None
    turns = getattr(spec, "max_turns", None)
    if turns not in (None, 1):
        raise RolloutSourceError("environment.max_turns: a dataset + rubric rollout is single-turn; remove max_turns")
    base = 0 if seed is None else seed

    def make_env() -> RubricEnv:
        nonlocal base
        base += 1
        return RubricEnv(chosen, rubric, prompt_template=template, max_reward=max_reward, seed=base)

    return RowsFactory(make_env, len(chosen)), 1


def _no_rubric(completion: str, answer: Any, question: Any) -> float:  # pragma: no cover - never called
    raise AssertionError("a batched reward env scores after the rollout")


def _batched_reward(spec: Any, max_reward: float | None) -> Any:
    """The shared batched scorer when the spec names batched reward sources (``reward_funcs``, ``reward_model``)."""
    fields = batched_sources_set(spec)
    if not fields:
        return None
    if getattr(spec, "rubric_file_path", None):
        raise RolloutSourceError(
            f"environment.rubric_file_path: {', '.join(fields)} already score the completions; keep one way of "
            "scoring (a rubric function can become a reward function taking completions and **kwargs)"
        )
    return BatchReward(build_reward_funcs(spec), max_reward=max_reward)


# --------------------------------------------------------------------------------------------------
# Python entrypoint
# --------------------------------------------------------------------------------------------------


def build_entrypoint_source(spec: Any, *, seed: int | None = None) -> tuple[MakeEnv, int | None]:
    """A Python text env: ``entrypoint`` is a class or factory; ``factory`` (optional) is called with
    the entrypoint string and ``env_config``; ``env_config`` are keyword arguments."""
    check_supported(spec, "entrypoint")
    entrypoint = spec.entrypoint
    config = dict(getattr(spec, "env_config", None) or {})
    factory_ref = getattr(spec, "factory", None)
    if uses_gem(factory_ref) or uses_gem(entrypoint):
        import_gem()  # before load_object imports it: GEM's import would double every log line
        problem = gem_config_problem(entrypoint, config) if config and uses_gem(factory_ref) else None
        if problem is not None:
            raise RolloutSourceError(f"environment.env_config: {problem}")
    if factory_ref:
        factory = load_object(factory_ref, "factory")

        def make_env() -> TextEnv:
            return factory(entrypoint, **config)  # type: ignore[no-any-return]

    else:
        target = load_object(entrypoint, "entrypoint")
        if not callable(target):
            raise RolloutSourceError(f"environment.entrypoint: {entrypoint!r} is not a class or callable")

        def make_env() -> TextEnv:
            return target(**config)  # type: ignore[no-any-return]

    try:
        probe = make_env()
    except Exception as exc:  # the user's constructor: report it, don't crash mid-setup
        raise RolloutSourceError(
            f"environment.entrypoint: creating {entrypoint!r} with env_config {config} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    missing = [m for m in ("reset", "step") if not callable(getattr(probe, m, None))]
    if missing:
        raise RolloutSourceError(
            f"environment.entrypoint: {entrypoint!r} made a {type(probe).__name__}, which has no "
            f"{' or '.join(missing)}(); a text env needs reset(seed) -> (str, info) and "
            "step(str) -> (str, reward, terminated, truncated, info)"
        )
    turns = getattr(probe, "max_turns", None)
    close = getattr(probe, "close", None)
    if callable(close):
        close()
    return make_env, turns if isinstance(turns, int) and turns > 0 else None


__all__ = [
    "KNOWN_EXTERNAL_SOURCES",
    "ROLLOUT_SOURCES",
    "RolloutSource",
    "RolloutSourceError",
    "RowsFactory",
    "RubricEnv",
    "build_dataset_source",
    "build_entrypoint_source",
    "build_source",
    "heldout_count",
    "load_object",
    "load_rubric",
    "rollout_sources",
    "select_source",
]
