"""Manifest specs the LLM plugin's two parts share: the ``environment`` section (:class:`LLMEnvSpec`)
and the base of its algorithm specs (:class:`PluginLLMSpec`). Each part's own algorithm specs live
with it: :mod:`agilerl_plugin_llm.dataset.specs` (SFT, DPO) and :mod:`agilerl_plugin_llm.rollout.specs`.

Pure pydantic: importing this module imports neither torch nor transformers, so ``agilerl validate``
stays fast. Field names follow AgileRL's published ``LLMEnvSpec``; fields we do not implement yet
(Ray/pod hosting, segmented and restarted episodes) fail validation with a "not supported" message
instead of being silently ignored.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from agilerl.errors import Problem
from agilerl.models.base import EnvSpec, Spec
from agilerl_plugin_llm import quantization_config
from agilerl_plugin_llm.check_inputs import lora_target_problems, model_problems
from agilerl_plugin_llm.rollout.catalog import apply_catalog
from agilerl_plugin_llm.spec_base import LLMAlgorithmSpec, resolve_local_path

# --------------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------------

#: Fields of AgileRL's spec that need its Ray / Kubernetes runtime (env hosts, pods) or its async
#: per-episode path. Setting any of them is an error, not a silent no-op.
UNSUPPORTED_ENV_FIELDS: dict[str, str] = {
    "env_hosts": "env hosts need a Ray runtime",
    "env_image": "env images run as pods under a Ray/Kubernetes runtime",
    "env_port": "env hosts need a Ray runtime",
    "env_sessions_per_host": "env hosts need a Ray runtime",
    "env_session_ports": "env hosts need a Ray runtime",
    "cpus_per_env_host": "env hosts need a Ray runtime",
    "env_host_memory_bytes": "env hosts need a Ray runtime",
    "env_host_memory_limit_bytes": "env hosts need a Ray runtime",
    "env_host_ready_timeout_s": "env hosts need a Ray runtime",
    "env_services": "env services run beside env hosts under a Ray runtime",
    "env_host_resource": "env hosts need a Ray runtime",
    "segment_prompt_tokens": "segmented episodes need the async per-episode rollout path",
    "segment_max_images": "segmented episodes need the async per-episode rollout path",
    "restart_keep_turns": "restarted episodes need the async per-episode rollout path",
}

#: Fields that only mean something for ``env_type: rollout`` (rejected on a dataset env).
ROLLOUT_ONLY_FIELDS: tuple[str, ...] = (
    "prompt_template", "rubric_file_path", "rubric_name", "reward_funcs", "reward_weights", "max_reward", "entrypoint", "env_name", "factory",
    "env_config", "env_packages", "max_turns", "action_error_field", "strict_chat_template_boundary",
    "observation_field", "observation_processor", "env_url", "mcp_tool", "action_field",
    "request_timeout_s", "max_concurrent_resets", "adaptive_task_sampling", "env_vars", "invalid_action_reward",
    "env_url_headers_from_env",
)  # fmt: skip


#: AgileRL's task-flavoured env types and what each is here: (env_type, dataset objective).
LEGACY_ENV_TYPES: dict[str, tuple[str, str | None]] = {
    "reasoning": ("rollout", None),  # dataset rows + a reward function, single turn
    "multiturn": ("rollout", None),  # a multi-turn text env (env_name / entrypoint)
    "preference": ("dataset", "preference"),  # chosen/rejected pairs (DPO)
    "sft": ("dataset", "sft"),  # prompt -> response rows (SFT)
}
#: ``env_name`` prefixes of AgileRL's multi-turn game envs, built by GEM's ``gem.make``.
GEM_FACTORY = "gem:make"


def _translate_env_type(data: Any) -> Any:
    """AgileRL's ``env_type: reasoning|multiturn|preference|sft`` and ``env_name`` in our terms."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    legacy = data.get("env_type")
    if isinstance(legacy, str) and legacy in LEGACY_ENV_TYPES:
        kind, objective = LEGACY_ENV_TYPES[legacy]
        data["env_type"] = kind
        if objective is not None:
            given = data.get("objective")
            if given not in (None, objective):
                raise ValueError(f"env_type: {legacy} trains with objective {objective!r}, got objective: {given!r}")
            data["objective"] = objective
    env_name = data.get("env_name")
    if env_name is not None:
        if data.get("env_type") != "rollout":
            raise ValueError("env_name names a multi-turn env: use it with env_type: multiturn (or rollout)")
        if data.get("entrypoint") not in (None, env_name):
            raise ValueError("give env_name or entrypoint, not both")
        # AgileRL builds env_name with GEM (``gem.make(env_name)``); here it is an entrypoint whose factory
        # is gem.make unless the manifest names another factory.
        data["entrypoint"] = env_name
        data.setdefault("factory", GEM_FACTORY)
    return data


#: Fields naming local files, stored absolute so a checkpoint resumes from any working directory.
PATH_FIELDS = ("dataset", "dataset_path", "rubric_file_path", "reward_file_path", "chat_template_path", "reward_model")
#: Fields of the form ``path/to/file.py:attr`` (or ``module:attr``): the file part is resolved.
FILE_REF_FIELDS = ("entrypoint", "factory", "observation_processor")


def _absolute_paths(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for key in PATH_FIELDS:
        if key in data:
            data[key] = resolve_local_path(data[key])
    for key in FILE_REF_FIELDS:
        value = data.get(key)
        if isinstance(value, str) and ":" in value:
            data[key] = _absolute_file_ref(value)
    if isinstance(data.get("reward_funcs"), str):  # one function: a list of one
        data["reward_funcs"] = [data["reward_funcs"]]
    if isinstance(data.get("reward_funcs"), list):
        data["reward_funcs"] = [_absolute_file_ref(v) if isinstance(v, str) else v for v in data["reward_funcs"]]
    return data


def _absolute_file_ref(value: str) -> str:
    head, _, attr = value.rpartition(":")
    if head.endswith(".py") and Path(head).expanduser().is_file():
        return f"{resolve_local_path(head)}:{attr}"
    return value


class LLMEnvSpec(EnvSpec):
    """The dataset or interactive environment an LLM algorithm fine-tunes against.

    ``env_type: dataset`` is teacher-forced over rows (``objective`` picks the loss: ``sft`` or
    ``preference``). ``env_type: rollout`` is generative and comes from exactly one source: dataset
    rows plus a rubric, an ``entrypoint`` (a Python text env), or an ``env_url`` (an OpenEnv service).
    """

    #: GEM's ``gem.make`` builds only the games registered with GEM (``game:...`` ids, never imported).
    registered_factories: ClassVar[frozenset[str]] = frozenset({GEM_FACTORY})

    env_type: Annotated[
        Literal["rollout", "dataset"],
        Field(description="rollout (generated episodes) or dataset (teacher-forced rows). AgileRL's reasoning and "
                          "multiturn mean rollout; preference and sft mean dataset with that objective."),
    ]  # fmt: skip
    num_envs: Annotated[int | None, Field(ge=1)] = None  # type: ignore[assignment]  # seed: optional for LLM envs
    version: str | int | None = None
    objective: Annotated[
        Literal["preference", "sft"] | None,
        Field(description="Dataset env loss: sft (prompt -> response) or preference (chosen vs rejected). "
                          "Defaults to the algorithm's (SFT: sft, DPO: preference)."),
    ] = None  # fmt: skip
    dataset: Annotated[
        str | None, Field(description="A dataset by name: a local file or directory, else a cached HF dataset id.")
    ] = None
    dataset_path: Annotated[
        str | None, Field(description="Local rows: .json, .jsonl, .csv or .parquet (or a save_to_disk dir).")
    ] = None
    hf_dataset_id: Annotated[
        str | None, Field(description="A Hugging Face dataset id, read from the local cache only (no downloads).")
    ] = None
    hf_dataset_config: Annotated[
        str | None, Field(description="The configuration (subset) of hf_dataset_id, e.g. main for openai/gsm8k.")
    ] = None
    columns: Annotated[
        dict[str, str] | None,
        Field(description="Column remapping {expected: actual}, e.g. {prompt: question, response: answer}."),
    ] = None
    response_column: Annotated[
        str | None, Field(description="SFT: the column holding the target response (default 'response').")
    ] = None
    prompt_template: dict[str, Any] | None = None
    rubric_file_path: Annotated[
        str | None, Field(validation_alias=AliasChoices("rubric_file_path", "reward_file_path"))
    ] = None
    rubric_name: Annotated[
        str | list[str] | dict[str, float] | None,
        Field(
            validation_alias=AliasChoices("rubric_name", "reward_fn_name"),
            description="The reward function(s) in rubric_file_path: one name, a list of names (summed, weighted "
                        "by reward_weights) or a mapping {name: weight}. Default: reward_fn.",
        ),
    ] = None  # fmt: skip
    reward_funcs: Annotated[
        list[str] | None,
        Field(description="Batched reward functions, the TRL way: 'module:function' (importable from the working "
                          "directory or an installed package) or 'path/to/file.py:function', each called as "
                          "f(prompts=..., completions=..., completion_ids=..., **columns) -> list[float | None] "
                          "(async def too); the reward is the sum weighted by reward_weights. Instead of "
                          "rubric_file_path."),
    ] = None  # fmt: skip
    reward_weights: Annotated[
        list[float] | None,
        Field(description="Weights of the functions listed in rubric_name, or of reward_funcs followed by the "
                          "reward_model's when it is set, as in TRL (default 1 each); the reward is the weighted sum."),
    ] = None  # fmt: skip
    max_reward: float | None = None
    train_test_split: Annotated[
        float | None,
        Field(ge=0.0, le=1.0, description="Fraction of rows used for training; the rest is held out (default 0.9)."),
    ] = None
    entrypoint: str | None = None
    env_name: Annotated[
        str | None,
        Field(description="A multi-turn env id (AgileRL's GEM games, e.g. game:GuessTheNumber-v0-easy): built "
                          "with factory (default gem:make, from the gem-llm package)."),
    ] = None  # fmt: skip
    factory: str | None = None
    env_config: dict[str, Any] | None = None
    name: Annotated[
        str | None,
        Field(
            description="A label; a name in the env catalog (gsm8k) also stands for its dataset, rubric and "
            "prompt template (fields given here win; dataset_path replaces the dataset)."
        ),
    ] = None
    env_packages: dict[str, Any] | None = None
    max_turns: Annotated[int | None, Field(ge=1)] = None
    segment_prompt_tokens: Annotated[int | None, Field(ge=1)] = None
    segment_max_images: Annotated[int | None, Field(ge=1)] = None
    restart_keep_turns: Annotated[int, Field(ge=0)] = 0
    action_error_field: str = ""
    strict_chat_template_boundary: bool | None = None
    observation_field: str | None = None
    observation_processor: str | None = None
    env_url: str | list[str] | None = None
    mcp_tool: str | None = None
    action_field: str | None = None
    request_timeout_s: Annotated[
        float | None,
        Field(ge=0.0, description="env_url: seconds a request to the server may take (default 30; 0 is refused)."),
    ] = None
    max_concurrent_resets: Annotated[int | None, Field(ge=1)] = None
    invalid_action_reward: Annotated[
        float,
        Field(description="env_url: reward for a reply the server cannot take as an action (unparseable or "
                          "rejected); the episode goes on with a feedback observation."),
    ] = 0.0  # fmt: skip
    env_url_headers_from_env: Annotated[
        dict[str, str],
        Field(description="env_url: HTTP headers sent to the OpenEnv server, each read from the environment "
                          "variable named here (e.g. {Authorization: OPENENV_AUTH}); keeps credentials out of manifests."),
    ] = Field(default_factory=dict)  # fmt: skip
    adaptive_task_sampling: bool = False
    env_hosts: Annotated[int | None, Field(ge=1)] = None
    env_image: str | None = None
    env_port: Annotated[int | None, Field(ge=1, le=65535)] = None
    env_sessions_per_host: Annotated[int | None, Field(ge=1)] = None
    env_session_ports: dict[str, int] = Field(default_factory=dict)
    cpus_per_env_host: Annotated[float | None, Field(gt=0.0)] = None
    env_host_memory_bytes: Annotated[int | None, Field(gt=0)] = None
    env_host_memory_limit_bytes: Annotated[int | None, Field(gt=0)] = None
    env_host_ready_timeout_s: Annotated[float | None, Field(gt=0.0)] = None
    env_services: list[dict[str, Any]] = Field(default_factory=list)
    env_host_resource: str | None = None
    env_vars: dict[str, str] = Field(default_factory=dict)
    chat_template_kwargs: Annotated[
        dict[str, Any], Field(description="Extra keyword arguments for tokenizer.apply_chat_template.")
    ] = Field(default_factory=dict)
    chat_template_path: Annotated[
        str | None, Field(description="A Jinja chat template file that replaces the tokenizer's own.")
    ] = None
    apply_chat_template: Annotated[
        bool, Field(description="Format prompts with the tokenizer's chat template (false: plain text).")
    ] = True
    reward_model: Annotated[
        str | None,
        Field(description="Rollout reward from a local AutoModelForSequenceClassification directory with one "
                          "output (e.g. an exported RewardModel run): it scores each prompt + completion in "
                          "batches on the rollout device, chat-templated when the rows are conversational: "
                          "one more batched reward function beside reward_funcs (its weight is the last of "
                          "reward_weights). Instead of rubric_file_path."),
    ] = None  # fmt: skip

    @model_validator(mode="after")
    def _reward_model_scores_rows(self) -> LLMEnvSpec:
        if self.reward_model and self.env_type == "dataset":
            raise ValueError("reward_model scores generated completions (env_type: rollout); a RewardModel run "
                             "trains one from preference rows with algorithm: {name: RewardModel}")  # fmt: skip
        if self.reward_model and (self.entrypoint or self.env_url):
            raise ValueError("reward_model scores dataset rows' completions (dataset_path, hf_dataset_id or "
                             "dataset); an entrypoint or env_url env scores its own replies")  # fmt: skip
        return self

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("env_type") in (None, "rollout", "reasoning"):
            data = apply_catalog(data)
        return _absolute_paths(_translate_env_type(data))

    @field_validator("request_timeout_s")
    @classmethod
    def _positive_timeout(cls, value: float | None) -> float | None:
        if value == 0:
            raise ValueError("0 seconds would fail every request at once; give the seconds a request to the "
                             "server may take (e.g. 10), or remove it for the default (30)")  # fmt: skip
        return value

    @property
    def reward_functions(self) -> list[tuple[str, float]]:
        """``(name, weight)`` of every reward function ``rubric_name`` names."""
        names = self.rubric_name
        if isinstance(names, dict):
            return [(str(k), float(v)) for k, v in names.items()]
        listed = [names] if isinstance(names, str) else list(names or ["reward_fn"])
        weights = self.reward_weights or [1.0] * len(listed)
        return list(zip(listed, map(float, weights), strict=True))

    @model_validator(mode="after")
    def _check(self) -> LLMEnvSpec:
        names = self.rubric_name
        if names is not None and (not names or any(not n for n in ([names] if isinstance(names, str) else names))):
            raise ValueError("rubric_name: give a function name (or a non-empty list / mapping of them)")
        if self.reward_funcs is not None or self.reward_model:
            self._check_reward_funcs()
        elif self.reward_weights is not None:
            if isinstance(names, dict):
                raise ValueError("reward_weights: the rubric_name mapping already gives the weights; remove one")
            count = len(names) if isinstance(names, list) else 1
            if len(self.reward_weights) != count:
                raise ValueError(f"reward_weights has {len(self.reward_weights)} weights for {count} reward "
                                 "function(s) in rubric_name")  # fmt: skip
        if self.env_name and self.factory == GEM_FACTORY and importlib.util.find_spec("gem") is None:
            raise ValueError(
                f"env_name {self.env_name!r} is a GEM env, built with gem.make: install gem-llm "
                "(pip install gem-llm), or give entrypoint: module:Class for your own text env"
            )
        unsupported = [
            f"{name} ({why})"
            for name, why in UNSUPPORTED_ENV_FIELDS.items()
            if name in self.model_fields_set and getattr(self, name) not in (None, 0, {}, [])
        ]
        if unsupported:
            raise ValueError(
                "not supported by agilerl-plugin-llm yet: " + "; ".join(unsupported) + ". Remove these fields."
            )
        if self.env_type == "dataset":
            misplaced = [
                n for n in ROLLOUT_ONLY_FIELDS if n in self.model_fields_set and getattr(self, n) not in (None, {}, [])
            ]
            if misplaced:
                raise ValueError(
                    f"{', '.join(misplaced)} only apply to env_type: rollout; a dataset env reads rows "
                    "(dataset_path / hf_dataset_id) and needs none of them"
                )
            if not self.has_rows:
                raise ValueError("a dataset env needs rows: set dataset_path (a local file) or hf_dataset_id")
        return self

    def _check_reward_funcs(self) -> None:
        """The batched reward sources: ``reward_funcs``, then the reward model, each with one weight (as in
        TRL, where a reward model is one of ``reward_funcs`` and has its weight in ``reward_weights``)."""
        funcs = self.reward_funcs
        if funcs is not None and (not funcs or not all(isinstance(f, str) and ":" in f for f in funcs)):
            raise ValueError("reward_funcs: give a list of 'module:function' (or 'path/to/file.py:function') names")
        funcs = funcs or []
        count = len(funcs) + (1 if self.reward_model else 0)
        if self.reward_weights is not None and len(self.reward_weights) != count:
            if self.reward_model:
                raise ValueError(f"reward_weights has {len(self.reward_weights)} weights for {count} reward sources: "
                                 f"one per reward_funcs entry ({len(funcs)}), then the reward_model's (as TRL, where "
                                 "a reward model is one of reward_funcs)")  # fmt: skip
            raise ValueError(f"reward_weights has {len(self.reward_weights)} weights for {len(funcs)} reward "
                             "function(s) in reward_funcs")  # fmt: skip
        if funcs and self.rubric_name is not None:
            raise ValueError("rubric_name names functions of rubric_file_path; with reward_funcs list every "
                             "function there")  # fmt: skip
        names = [str(f).rpartition(":")[2] for f in funcs] + (["reward_model"] if self.reward_model else [])
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"reward_funcs: {', '.join(repeated)} would name two reward sources (each function's "
                             "value is logged under its name, the reward model's as reward_model); give the "
                             "functions distinct names")  # fmt: skip

    @property
    def has_rows(self) -> bool:
        """Whether the spec names dataset rows."""
        return bool(self.dataset_path or self.hf_dataset_id or self.dataset)

    @property
    def dataset_backed_rollout(self) -> bool:
        """Whether this rollout env serves labelled rows scored by a rubric."""
        return self.env_type == "rollout" and self.has_rows and not (self.entrypoint or self.env_url)

    @property
    def label(self) -> str:
        """Human-readable label: name, dataset, URL, entrypoint, or image."""
        url = self.env_url[0] if isinstance(self.env_url, list) and self.env_url else self.env_url
        for value in (self.name, self.dataset, self.dataset_path, self.hf_dataset_id, url, self.entrypoint):
            if value:
                text = str(value).rstrip("/")
                return text.rsplit("/", 1)[-1] if self.dataset_path == value else text
        return self.env_type


# --------------------------------------------------------------------------------------------------
# Dataset algorithms
# --------------------------------------------------------------------------------------------------

#: Inherited ``LLMAlgorithmSpec`` fields no code path here implements yet; setting one is an error.
UNSUPPORTED_ALGORITHM_FIELDS: dict[str, str] = {
    "moe_lora_recompute": "MoE LoRA recomputation is not supported yet",
    "use_liger_kernel": "Liger kernels are not supported yet",
    "use_mamba_kernels": "Mamba kernels are not supported yet",
}
#: Values that mean "off" for the fields above (``quantization: none`` is AgileRL's full-precision recipe).
_OFF_VALUES: tuple[Any, ...] = (None, False, {}, "none", "None")


def quantization_problems(value: Any) -> list[str]:
    """Why ``quantization: value`` cannot run here, each as ``quantization[.<key>]: why`` (none: it can, or
    it is off): the value's own problems (:func:`agilerl_plugin_llm.quantization_config.field_problems`)
    or, for a valid one, a missing bitsandbytes. Nothing is imported."""
    problems = [f"quantization{'.' + key if key else ''}: {why}"
                for key, why, _ in quantization_config.field_problems(value)]  # fmt: skip
    if (
        not problems
        and quantization_config.is_quantized(value)
        and (missing := quantization_config.missing_bitsandbytes())
    ):
        problems.append(f"quantization: {missing}")
    return problems


def raise_problems(spec: LLMAlgorithmSpec, problems: list[str]) -> None:
    """Raise a spec validator's problems (nothing when there are none): each about ``quantization`` at
    ``algorithm.quantization``, where the user wrote it; the others together, at ``algorithm``."""
    if not problems:
        return
    located = [p for p in problems if p.startswith(("quantization: ", "quantization."))]
    if not located:
        raise ValueError("; ".join(problems))
    from pydantic import ValidationError
    from pydantic_core import InitErrorDetails, PydanticCustomError

    errors = []
    for p in located:
        where, _, why = p.partition(": ")
        key = where.removeprefix("quantization").removeprefix(".")
        value = spec.quantization
        given = value.get(key) if key and isinstance(value, Mapping) else value
        errors.append(InitErrorDetails(type=PydanticCustomError("quantization", why),
                                       loc=("quantization", key) if key else ("quantization",), input=given))  # fmt: skip
    rest = [p for p in problems if p not in located]
    if rest:
        errors.append(InitErrorDetails(type=PydanticCustomError("value_error", "; ".join(rest)), loc=(),
                                       input=spec.model_dump(exclude_unset=True)))  # fmt: skip
    raise ValidationError.from_exception_data(type(spec).__name__, errors)


def llm_algorithm_problems(spec: LLMAlgorithmSpec, unsupported: dict[str, str] | None = None) -> list[str]:
    """Problems shared by every LLM algorithm of this plugin (used by the spec validators)."""
    problems: list[str] = []
    if "quantization" in spec.model_fields_set:
        found = quantization_problems(spec.quantization)
        if not found and quantization_config.is_quantized(spec.quantization) and spec.lora_config is None:
            found = ["quantization: QLoRA trains a LoRA adapter on the quantized base, and quantized weights "
                     "cannot be fine-tuned themselves; add network.lora_config or remove quantization"]  # fmt: skip
        problems += found
    if spec.lora_target_scope and spec.lora_config is None:
        problems.append("lora_target_scope: it limits the LoRA adapter's target modules; add network.lora_config "
                        "or remove it")  # fmt: skip
    for name, why in (unsupported if unsupported is not None else UNSUPPORTED_ALGORITHM_FIELDS).items():
        if name in spec.model_fields_set and getattr(spec, name) not in _OFF_VALUES:
            problems.append(f"{name}: {why}")
    micro, mini = spec.micro_batch_size_per_gpu, spec.mini_batch_size
    if micro is not None and mini is not None and mini % micro:
        problems.append(f"mini_batch_size ({mini}) must be a multiple of micro_batch_size_per_gpu ({micro})")
    if mini is not None and mini > spec.batch_size:
        problems.append(f"mini_batch_size ({mini}) cannot exceed batch_size ({spec.batch_size})")
    return problems


class CosineLRScheduleConfig(Spec):
    """AgileRL's ``cosine_lr_schedule_config`` (sets ``lr_scheduler: cosine`` and the fields below)."""

    num_steps: Annotated[int | None, Field(ge=1)] = None
    warmup_proportion: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    min_lr_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.1


class PluginLLMSpec(LLMAlgorithmSpec):
    """Fields every LLM algorithm of this plugin adds to the core's ``LLMAlgorithmSpec``."""

    lr_scheduler: Annotated[
        Literal["constant", "linear", "cosine"],
        Field(description="Learning-rate schedule over the run's iterations (after warmup): constant, linear "
                          "decay or cosine decay to lr * lr_min_ratio."),
    ] = "constant"  # fmt: skip
    warmup_ratio: Annotated[
        float, Field(ge=0.0, lt=1.0, description="Fraction of the schedule's iterations spent ramping lr up from 0.")
    ] = 0.0
    lr_min_ratio: Annotated[
        float, Field(ge=0.0, le=1.0, description="Where linear and cosine decay end, as a fraction of lr.")
    ] = 0.0
    lr_schedule_steps: Annotated[
        int | None, Field(ge=1, description="Iterations the schedule spans (default: training.max_steps).")
    ] = None
    cosine_lr_schedule_config: Annotated[
        CosineLRScheduleConfig | None, Field(description="AgileRL's cosine schedule (see CosineLRScheduleConfig).")
    ] = None
    update_reference_every: Annotated[
        int | None,
        Field(ge=1, description="Every this many iterations, the reference policy becomes a copy of the current "
                                "policy (None: the reference stays the starting policy). Under LoRA it needs "
                                "use_separate_reference_adapter: true."),
    ] = None  # fmt: skip

    @model_validator(mode="after")
    def _reference_refresh(self) -> PluginLLMSpec:
        if self.update_reference_every is None:
            return self
        if not getattr(type(self), "has_reference", True) or float(getattr(self, "beta", 1.0)) == 0.0:
            raise ValueError(f"update_reference_every: {self.name} has no reference policy here (beta 0 or none "
                             "in its loss); remove it")  # fmt: skip
        if self.lora_config is not None and not self.use_separate_reference_adapter:
            raise ValueError("update_reference_every under LoRA refreshes the reference adapter: set "
                             "use_separate_reference_adapter: true (without it the reference is the frozen base)")  # fmt: skip
        return self

    @model_validator(mode="before")
    @classmethod
    def _agilerl_cosine_schedule(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("cosine_lr_schedule_config"), dict):
            cfg = CosineLRScheduleConfig.model_validate(data["cosine_lr_schedule_config"])
            data = dict(data)
            if data.get("lr_scheduler", "cosine") != "cosine":
                raise ValueError("cosine_lr_schedule_config contradicts lr_scheduler; keep one")
            data.update(lr_scheduler="cosine", warmup_ratio=cfg.warmup_proportion, lr_min_ratio=cfg.min_lr_ratio)
            if cfg.num_steps is not None:
                data["lr_schedule_steps"] = cfg.num_steps
        return data

    def lr_factor(self, step: int, total: int) -> float:
        """The learning-rate multiplier at iteration ``step`` (0-based) of ``total``."""
        total = max(int(self.lr_schedule_steps or total), 1)
        warm = round(self.warmup_ratio * total)
        if step < warm:
            return (step + 1) / (warm + 1)
        if self.lr_scheduler == "constant":
            return 1.0
        progress = min(max((step - warm) / max(total - warm, 1), 0.0), 1.0)
        low = self.lr_min_ratio
        if self.lr_scheduler == "linear":
            return 1.0 - (1.0 - low) * progress
        return low + (1.0 - low) * 0.5 * (1.0 + math.cos(math.pi * progress))

    strip_multimodal_towers: Annotated[
        bool,
        Field(description="Drop a multimodal checkpoint's vision/audio towers (and projectors) when the model "
                          "loads, before training: text-only fine-tuning never runs them. AgileRL's "
                          "vllm_config.strip_multimodal_towers sets it."),
    ] = False  # fmt: skip

    reduce_memory_peak: Annotated[
        bool,
        Field(description="AgileRL's low-memory switch: forward passes one row at a time (a micro-batch of 1 "
                          "unless micro_batch_size_per_gpu is set). Same result, lower peak memory, slower."),
    ] = False  # fmt: skip


def model_path_problems(name_or_path: str | None, lora_config: Any = None) -> list[Problem]:
    """Validation-time check of ``pretrained_model_name_or_path``: given, and a model directory the run
    can load (config, tokenizer, readable weights), read without transformers
    (:func:`agilerl_plugin_llm.check_inputs.model_problems`); then that ``lora_config.target_modules``
    names modules the model has."""
    problems = model_problems(name_or_path)
    if not problems and lora_config is not None:
        targets = getattr(lora_config, "target_modules", "all-linear")
        problems = lora_target_problems(name_or_path, targets, "network.lora_config.target_modules")
    return problems


__all__ = [
    "LLMEnvSpec",
    "PluginLLMSpec",
    "ROLLOUT_ONLY_FIELDS",
    "UNSUPPORTED_ALGORITHM_FIELDS",
    "UNSUPPORTED_ENV_FIELDS",
    "llm_algorithm_problems",
    "raise_problems",
    "model_path_problems",
]
