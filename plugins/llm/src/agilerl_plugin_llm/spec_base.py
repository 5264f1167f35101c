"""The base spec of every LLM fine-tuning algorithm (``LLMAlgorithmSpec``) and its LoRA settings.

It lives in this plugin, not in core: core knows no paradigm. It subclasses core's public
:class:`~agilerl.models.AlgorithmSpec` and declares what is LLM-specific through core's generic
ClassVars (``paradigm``, ``lifted_network_fields``, ...). ``agilerl.models.LLMAlgorithmSpec`` still
resolves here through core's lazy forwarding of plugin-provided names.

Pure pydantic: importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AliasChoices, Field, field_validator

from agilerl.models.base import AlgorithmSpec, Mutable, Spec
from agilerl_plugin_llm import quantization_config
from agilerl_plugin_llm.fsdp_config import check_field


def resolve_local_path(value: Any) -> Any:
    """An existing local path as an absolute, resolved one (anything else unchanged: a Hub id, say).

    Stored manifests (checkpoints) then name the same files whatever directory a run resumes from.
    """
    if isinstance(value, str) and value:
        path = Path(value).expanduser()
        if path.exists():
            return str(path.resolve())
    return value


#: ``lr`` and TRL's (transformers') ``learning_rate``, the same AdamW learning rate.
LR_NAMES = AliasChoices("lr", "learning_rate")
LR_TEXT = "AdamW learning rate (TRL's learning_rate is accepted)."


class LoraConfigDict(Spec):
    """LoRA adapter settings (peft), written under the manifest's ``network`` section."""

    lora_r: Annotated[int, Field(ge=1)] = 16
    lora_alpha: Annotated[float, Field(gt=0)] = 32
    target_modules: str | list[str] = "all-linear"
    target_parameters: list[str] | None = None
    task_type: str = "CAUSAL_LM"
    lora_dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05


class LLMAlgorithmSpec(AlgorithmSpec):
    """LLM fine-tuning algorithms.

    ``pretrained_model_name_or_path``, ``max_context_length`` (this spec's ``max_model_len``) and
    ``lora_config`` may be written under the manifest's ``network`` section, as in AgileRL; they are
    lifted onto the algorithm at validation.
    """

    paradigm: ClassVar[str] = "llm"
    regime: ClassVar[str] = "rollout"
    default_env_type: ClassVar[str] = "rollout"
    default_evo_steps: ClassVar[int] = 20
    supported_mutations: ClassVar[frozenset[str]] = frozenset({"no_mut", "rl_hp_mut"})
    unsupported_mutation_reason: ClassVar[str] = (
        "LLM algorithms get hyperparameter mutation only: their weights are a pretrained model"
        " or its adapters, which architecture and parameter mutation would break"
    )
    #: training.rollout_mode is read by the builder (colocated only); evaluation_interval by both LLM
    #: strategies (held-out evaluation every N iterations: agilerl_plugin_llm.evaluation). num_epochs
    #: is read by the dataset algorithms only (DatasetLLMSpec); evo_epochs by none, so it is refused.
    training_fields: ClassVar[frozenset[str]] = frozenset({"rollout_mode", "evaluation_interval"})
    lifted_network_fields: ClassVar[frozenset[str]] = frozenset(
        {"pretrained_model_name_or_path", "max_context_length", "lora_config"}
    )

    #: TRL / OpenRLHF names (hints only; a name whose target a subclass lacks is not suggested).
    field_synonyms: ClassVar[dict[str, str]] = {
        "learning_rate": "lr", "num_generations": "group_size", "max_completion_length": "max_output_tokens",
        "max_new_tokens": "max_output_tokens", "per_device_train_batch_size": "micro_batch_size_per_gpu",
        "num_iterations": "update_epochs", "ppo_epochs": "update_epochs", "epsilon": "clip_coef",
        "cliprange": "clip_coef", "kl_coef": "beta", "init_kl_coef": "beta", "max_length": "max_model_len",
        "max_seq_length": "max_model_len", "model_name_or_path": "pretrained_model_name_or_path",
        "model": "pretrained_model_name_or_path", "epsilon_high": "clip_coef", "ent_coef": "entropy_coef",
        "entropy_coeff": "entropy_coef", "num_completions_to_print": "log_completions_count",
        "log_completions": "log_completions_steps", "gradient_accumulation_steps": "mini_batch_size",
        "lr_scheduler_type": "lr_scheduler", "sync_ref_model": "update_reference_every",
        "ref_model_sync_steps": "update_reference_every", "num_train_epochs": "training.num_epochs",
    }  # fmt: skip
    #: How the TRL names above that are not accepted differ from ours (said after the hint; docs/llm.md's
    #: table). num_generations, learning_rate and num_iterations are accepted (validation aliases).
    synonym_notes: ClassVar[dict[str, str]] = {
        "num_train_epochs": "the same passes over the training rows, written in the training section here "
        "(SFT, DPO, RewardModel)",
        "max_completion_length": "TRL's bounds the whole completion, tool turns included; max_output_tokens bounds "
        "each turn's new tokens (the same number for a single-turn task)",
        "per_device_train_batch_size": "TRL's counts completions per device per optimizer micro-step, accumulated "
        "over gradient_accumulation_steps; micro_batch_size_per_gpu is the rows of one forward pass, batch_size the "
        "prompts of an iteration",
        "gradient_accumulation_steps": "a count of micro-steps in TRL; here an optimizer step takes mini_batch_size "
        "rows, accumulated in forward passes of micro_batch_size_per_gpu rows",
        "epsilon": "TRL's is the lower clip (the upper too unless epsilon_high is set) and, under loss_type cispo, "
        "the ratio cap itself; clip_coef c clips the ratio to [1 - c, 1 + c], or give the bounds [low, high]",
        "epsilon_high": "write clip_coef: [1 - epsilon, 1 + epsilon_high] (under loss_type cispo TRL's epsilon_high "
        "caps the ratio itself)",
        "num_completions_to_print": "TRL prints that many to the console (its W&B table gets all); "
        "log_completions_count is how many each logging writes everywhere",
        "log_completions": "TRL's is a switch; log_completions_steps is how often (0: off)",
        "lr_scheduler_type": "TRL's takes transformers' schedule names (its constant ignores warmup); lr_scheduler is "
        "constant, linear or cosine, each after warmup_ratio",
        "sync_ref_model": "TRL mixes ref_model_mixup_alpha of the policy into the reference every "
        "ref_model_sync_steps; update_reference_every N copies the policy into the reference every N iterations",
        "ref_model_sync_steps": "TRL mixes ref_model_mixup_alpha of the policy into the reference; "
        "update_reference_every N copies the policy into the reference every N iterations",
    }

    batch_size: Annotated[int, Field(ge=1), Mutable(1, 32)] = 16
    beta: Annotated[float, Field(ge=0.0, le=1.0), Mutable(1e-4, 1e-2)] = 0.001
    max_grad_norm: Annotated[float, Field(ge=0.0), Mutable(0.01, 10.0)] = 0.1
    update_epochs: Annotated[int, Field(ge=1), Mutable(1, 10)] = 1
    use_separate_reference_adapter: bool = True
    calc_position_embeddings: bool = True
    gradient_checkpointing: bool = True
    use_liger_loss: Annotated[
        bool,
        Field(description="Liger's effect without its GPU kernels: log-probs are computed from lm_head in chunks "
                          "of rows (chunk_rows, default a ~256 MB float32 logit tile) under activation "
                          "checkpointing, so the [tokens, vocab] logits are never all in memory. Same result; "
                          "false: all scored tokens' logits at once (slightly faster for small vocabularies)."),
    ] = True  # fmt: skip
    use_liger_kernel: bool | None = None
    use_mamba_kernels: bool | None = None
    cast_logprobs_to_fp32: bool = True
    seed: int = 42
    quantization: str | dict[str, Any] | None = None
    activation_offload: Annotated[
        bool,
        Field(description="Keep the tensors the training forward saves for the backward in host memory "
                          "(torch.autograd.graph.save_on_cpu, pinned on CUDA): less GPU memory, a copy each way. "
                          "On the CPU they are there already."),
    ] = False  # fmt: skip
    moe_lora_recompute: bool | None = None
    use_sequence_packing: Annotated[
        bool,
        Field(description="Pack the log-prob forward passes padding-free: the sequences of a micro-batch share "
                          "rows (each numbered from position 0, kept apart by the attention masks), so no padding "
                          "is computed. Same log-probs and gradients within float tolerance; fewer tokens "
                          "computed where lengths differ (docs/llm.md). Replaces GRPO's shared-prompt pass."),
    ] = False  # fmt: skip
    lora_target_scope: Annotated[
        str | None,
        Field(description="LoRA targets only the modules under this path component, e.g. language_model: the "
                          "text decoder of a multimodal model, not its vision/audio towers. target_modules "
                          "names projections (q_proj, or q_proj.linear for Gemma's ClippableLinear) or all-linear."),
    ] = None  # fmt: skip
    chunk_rows: Annotated[
        int | None,
        Field(ge=1, description="Rows (scored tokens) per chunk of the log-prob computation; set, it chunks even "
                                "with use_liger_loss: false. Default: the ~256 MB tile (128 to 4096 rows)."),
    ] = None  # fmt: skip
    attn_implementation: str | None = None
    micro_batch_size_per_gpu: Annotated[int | None, Field(ge=1)] = None
    mini_batch_size: Annotated[int | None, Field(ge=1)] = None
    hf_generate_chunk_size: Annotated[int | None, Field(ge=1)] = None
    thinking_token_budget: Annotated[int | None, Field(ge=0)] = None
    constrain_answer_pattern: str | None = None
    answer_continuation: bool = False
    fsdp: bool | dict[str, Any] | None = None
    vllm_engine_args: dict[str, Any] = Field(default_factory=dict)
    vllm_lora_export_dir: str | None = None
    pretrained_model_name_or_path: Annotated[str | None, Field(min_length=1)] = None
    max_model_len: Annotated[int, Field(ge=1, validation_alias=AliasChoices("max_model_len", "max_context_length"))] = (
        1024
    )
    lora_config: LoraConfigDict | None = None

    @field_validator("cast_logprobs_to_fp32")
    @classmethod
    def _fp32_logprobs(cls, value: bool) -> bool:
        if not value:
            raise ValueError("false is not supported: log-probs are always computed in float32 here")
        return value

    @field_validator("fsdp")
    @classmethod
    def _fsdp_runs_here(cls, value: Any) -> Any:
        # Each problem at algorithm.fsdp.<key> (agilerl_plugin_llm.fsdp_config, no torch).

        return check_field(value)

    @field_validator("quantization", mode="before")
    @classmethod
    def _quantization_as_written(cls, value: Any) -> Any:
        # Its type only; each other problem at algorithm.quantization.<key> (specs.llm_algorithm_problems).
        return quantization_config.check_type(value)

    @field_validator("pretrained_model_name_or_path", "vllm_lora_export_dir", mode="before")
    @classmethod
    def _absolute_path(cls, value: Any) -> Any:
        return resolve_local_path(value)


__all__ = ["LR_NAMES", "LR_TEXT", "LLMAlgorithmSpec", "LoraConfigDict", "resolve_local_path"]
