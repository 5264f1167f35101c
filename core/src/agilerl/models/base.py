"""Spec base classes: the data a manifest's ``algorithm`` and ``environment`` sections validate into.

A spec is data. It declares its routing as class variables (``paradigm``, ``regime``,
``default_env_type``) and its default mutation ranges (``hpo_ranges``); builders and strategies,
looked up from those, turn it into a live algorithm and pick the loop that trains it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

if TYPE_CHECKING:
    from agilerl.errors import Problem
    from agilerl.models.manifest import TrainingManifest


class Spec(BaseModel):
    """Base of every manifest section: unknown fields and non-finite floats are errors."""

    # allow_inf_nan=False: a float field means a finite number (`lr: .inf` is refused, not trained on).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True, allow_inf_nan=False)


class AlgorithmSpec(Spec):
    """Fields every algorithm's manifest section carries."""

    #: Which builder makes it (``single_agent``, ``multi_agent``, ``llm``, ``bandit``, ...).
    paradigm: ClassVar[str] = ""
    #: Which loop trains it (``on_policy``, ``off_policy``, ``rollout``, ``dataset``, ...).
    regime: ClassVar[str] = ""
    #: ``environment.env_type`` used when the manifest omits it.
    default_env_type: ClassVar[str] = "gym"
    #: Env steps per agent between evaluations when ``training.evo_steps`` is not given.
    default_evo_steps: ClassVar[int] = 10_000
    #: Default (min, max) ranges for hyperparameter mutation, by field name.
    hpo_ranges: ClassVar[dict[str, tuple[float, float]]] = {}
    #: Hyperparameters mutated when ``mutation.rl_hp_selection`` is empty.
    default_mutable: ClassVar[tuple[str, ...]] = ()
    #: Mutation operators this family supports (``rl_hp_mut`` always; others if the algorithm can).
    supported_mutations: ClassVar[frozenset[str]] = frozenset(
        {"no_mut", "rl_hp_mut", "arch_mut", "new_layer", "params_mut", "act_mut"}
    )

    batch_size: Annotated[int, Field(ge=1, description="Samples per gradient step.")] = 64

    _registry_name: str | None = PrivateAttr(default=None)

    @classmethod
    def default_name(cls) -> str:
        name = cls.__name__
        return name[: -len("Spec")] if name.endswith("Spec") and len(name) > 4 else name

    @property
    def name(self) -> str:
        """The registry key this spec was resolved from."""
        return self._registry_name or self.default_name()

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        """Cross-section checks a spec wants run at validation time (override; default none)."""
        return []

    def hyperparameters(self) -> dict[str, Any]:
        """Numeric fields: candidates for hyperparameter mutation."""
        return {k: v for k, v in self.model_dump().items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class SingleAgentAlgorithmSpec(AlgorithmSpec):
    """Single-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "single_agent"
    regime: ClassVar[str] = "on_policy"

    learn_step: Annotated[int, Field(ge=1, description="Env steps between learning updates.")] = 5
    gamma: Annotated[float, Field(ge=0.0, le=1.0, description="Discount factor.")] = 0.99
    normalize_images: bool = True
    net_config: dict[str, Any] | None = None


class MultiAgentAlgorithmSpec(AlgorithmSpec):
    """Multi-agent reinforcement learning algorithms."""

    paradigm: ClassVar[str] = "multi_agent"
    regime: ClassVar[str] = "on_policy"

    learn_step: Annotated[int, Field(ge=1)] = 2048
    gamma: Annotated[float, Field(ge=0.0, le=1.0)] = 0.99
    normalize_images: bool = True
    torch_compiler: str | None = None
    net_config: dict[str, Any] | None = None


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

    ``pretrained_model_name_or_path``, ``max_model_len`` and ``lora_config`` may be written under
    the manifest's ``network`` section; they are lifted onto the algorithm at validation.
    """

    paradigm: ClassVar[str] = "llm"
    regime: ClassVar[str] = "rollout"
    default_env_type: ClassVar[str] = "rollout"
    default_evo_steps: ClassVar[int] = 20
    supported_mutations: ClassVar[frozenset[str]] = frozenset({"no_mut", "rl_hp_mut"})

    batch_size: Annotated[int, Field(ge=1)] = 16
    beta: Annotated[float, Field(ge=0.0, le=1.0)] = 0.001
    max_grad_norm: Annotated[float, Field(ge=0.0)] = 0.1
    update_epochs: Annotated[int, Field(ge=1)] = 1
    use_separate_reference_adapter: bool = True
    calc_position_embeddings: bool = True
    gradient_checkpointing: bool = True
    use_liger_loss: bool = True
    use_liger_kernel: bool | None = None
    use_mamba_kernels: bool | None = None
    cast_logprobs_to_fp32: bool = True
    seed: int = 42
    quantization: str | dict[str, Any] | None = None
    activation_offload: bool = False
    moe_lora_recompute: bool | None = None
    use_sequence_packing: bool = False
    lora_target_scope: str | None = None
    chunk_rows: Annotated[int | None, Field(ge=1)] = None
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
    max_model_len: Annotated[int, Field(ge=1)] = 1024
    lora_config: LoraConfigDict | None = None


class EnvSpec(Spec):
    """Base of environment sections. Plugins subclass it and register an ``env_type``."""

    env_type: str
    num_envs: Annotated[int, Field(ge=1)] = 1
    version: str | int | None = None

    @property
    def label(self) -> str:
        """A short human-readable name for logs and run directories."""
        name = getattr(self, "name", None)
        return str(name or self.env_type)
