"""The dataset (teacher-forced) algorithms' specs: SFT and DPO, and the fields they share.

Pure pydantic, as :mod:`agilerl_plugin_llm.rollout.specs`: importing this module imports neither
torch nor transformers, so ``agilerl validate`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar

from pydantic import Field, model_validator

from agilerl.errors import Problem
from agilerl.models.base import Mutable
from agilerl_plugin_llm.check_data import chat_template_problems, dataset_problems
from agilerl_plugin_llm.spec_base import LR_NAMES, LR_TEXT
from agilerl_plugin_llm.specs import PluginLLMSpec, llm_algorithm_problems, model_path_problems, raise_problems
from agilerl_plugin_llm.training_fields import llm_training

if TYPE_CHECKING:
    from agilerl.models.manifest import TrainingManifest


class DatasetLLMSpec(PluginLLMSpec):
    """Fields every teacher-forced (dataset) LLM algorithm shares.

    ``batch_size`` is the number of rows (SFT) or preference pairs (DPO) per training iteration;
    ``training.max_steps`` and ``evo_steps`` count those iterations. Each iteration is split into
    optimizer steps of ``mini_batch_size`` rows (default: all of them), each accumulated over forward
    passes of ``micro_batch_size_per_gpu`` rows (default: the whole mini-batch).
    """

    regime: ClassVar[str] = "dataset"
    default_env_type: ClassVar[str] = "dataset"
    #: training.num_epochs: the run stops after that many passes over the training rows (or at
    #: max_steps, whichever comes first), as in AgileRL's finetune_llm_sft / finetune_llm_preference.
    training_fields: ClassVar[frozenset[str]] = PluginLLMSpec.training_fields | {"num_epochs"}
    #: The dataset env objective this algorithm trains on.
    objective: ClassVar[str] = "sft"
    #: ``"module:attr"`` of the function that builds its env (``make_llm_env``'s signature).
    env_factory: ClassVar[str] = "agilerl_plugin_llm.dataset.env:make_llm_env"

    batch_size: Annotated[int, Field(ge=1, description="Rows per training iteration."), Mutable(1, 32)] = 16

    @model_validator(mode="after")
    def _dataset_checks(self) -> DatasetLLMSpec:
        raise_problems(self, llm_algorithm_problems(self))
        return self

    def manifest_problems(self, manifest: TrainingManifest) -> list[Problem]:
        problems: list[Problem] = []
        env = manifest.environment
        if getattr(env, "env_type", None) != "dataset":
            problems.append(Problem("environment.env_type", f"{self.name} trains on env_type: dataset"))
        elif getattr(env, "objective", None) not in (None, type(self).objective):
            problems.append(Problem(
                "environment.objective",
                f"{self.name} trains with objective {type(self).objective!r}, got {env.objective!r}; "  # type: ignore[attr-defined]
                f"remove the field or set objective: {type(self).objective}",
            ))  # fmt: skip
        else:
            problems += dataset_problems(env, type(self).objective)
            problems += chat_template_problems(env, self.pretrained_model_name_or_path, type(self).objective)
        problems += model_path_problems(self.pretrained_model_name_or_path, self.lora_config)
        mutation = manifest.mutation
        if (
            llm_training(manifest).num_epochs is not None
            and mutation is not None
            and mutation.probabilities.rl_hp_mut > 0
        ):
            from agilerl.hpo import resolve_hp_ranges

            if "batch_size" in resolve_hp_ranges(self, mutation):
                problems.append(Problem(
                    "training.num_epochs",
                    "counts passes in iterations of algorithm.batch_size rows, so batch_size cannot be mutated "
                    "with it; remove batch_size from mutation.rl_hp_selection or remove num_epochs",
                ))  # fmt: skip
        return problems


class SFTSpec(DatasetLLMSpec):
    """Supervised fine-tuning: next-token cross-entropy on the response tokens only."""

    objective: ClassVar[str] = "sft"
    has_reference: ClassVar[bool] = False
    default_mutable: ClassVar[tuple[str, ...]] = ("lr",)

    lr: Annotated[float, Field(gt=0.0, validation_alias=LR_NAMES, description=LR_TEXT), Mutable(1e-7, 1e-3)] = 5e-5
    use_separate_reference_adapter: Annotated[bool, Field(description="SFT needs no reference policy; keep false.")] = (
        False
    )


class DPOSpec(DatasetLLMSpec):
    """Direct Preference Optimization (Rafailov et al. 2023) with an optional NLL term on chosen."""

    objective: ClassVar[str] = "preference"
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "beta")

    lr: Annotated[float, Field(gt=0.0, validation_alias=LR_NAMES, description=LR_TEXT), Mutable(1e-7, 1e-3)] = 5e-6
    beta: Annotated[
        float,
        Field(gt=0.0, le=10.0, description="DPO temperature: scale of the implicit reward log(pi/pi_ref)."),
        Mutable(0.01, 0.5),
    ] = 0.1
    nll_alpha: Annotated[
        float,
        Field(ge=0.0, description="Weight of the NLL loss on chosen responses (0: pure DPO; RPO-style)."),
        Mutable(0.1, 2.0),
    ] = 1.0


#: Fields of the LLM specs that drive token log-prob computations, which a reward model never makes.
_NO_LOGPROB_FIELDS: dict[str, str] = {
    "quantization": "QLoRA is not supported for reward models yet; train in full precision (LoRA or full)",
    "use_sequence_packing": "packing applies to token log-prob passes; a reward model scores whole sequences",
    "chunk_rows": "chunking applies to token log-prob passes; a reward model has no vocabulary projection",
    "use_liger_loss": "it chunks token log-prob passes; a reward model scores whole sequences",
    "calc_position_embeddings": "it numbers positions for token log-probs; the classifier numbers its own",
    "beta": "a reward model has no reference policy to regularise against",
    "hf_generate_chunk_size": "a reward model generates nothing",
    "thinking_token_budget": "a reward model generates nothing",
    "constrain_answer_pattern": "a reward model generates nothing",
    "answer_continuation": "a reward model generates nothing",
    "vllm_engine_args": "a reward model generates nothing (no vLLM engine)",
    "vllm_lora_export_dir": "a reward model generates nothing (no vLLM engine)",
}


class RewardModelSpec(DatasetLLMSpec):
    """A reward model trained on preference pairs (TRL's RewardTrainer): the base model with a one-logit
    sequence-classification head scores ``prompt + chosen`` above ``prompt + rejected``.

    Loss per pair: ``-log sigmoid(r_chosen - r_rejected - margin)`` (Bradley-Terry; ``margin`` from the
    rows' optional ``margin`` column, else 0), plus ``center_rewards_coefficient * (r_chosen + r_rejected)^2``
    when set. Held-out metrics: the loss, the preference accuracy (share of pairs scored the right way
    round; a tie counts 1/2) and the mean reward gap. ``agilerl export`` writes an
    ``AutoModelForSequenceClassification`` directory that ``environment.reward_model`` takes.
    """

    objective: ClassVar[str] = "preference"
    env_factory: ClassVar[str] = "agilerl_plugin_llm.dataset.reward_env:make_reward_env"
    has_reference: ClassVar[bool] = False
    default_mutable: ClassVar[tuple[str, ...]] = ("lr",)

    lr: Annotated[float, Field(gt=0.0, validation_alias=LR_NAMES, description=LR_TEXT), Mutable(1e-7, 1e-3)] = 1e-5
    center_rewards_coefficient: Annotated[
        float | None,
        Field(ge=0.0, description="TRL's centering term: adds coefficient * (r_chosen + r_rejected)^2 to each "
                                  "pair's loss, keeping the scores near 0 (None: off)."),
    ] = None  # fmt: skip
    use_separate_reference_adapter: Annotated[
        bool, Field(description="A reward model has no reference policy; keep false.")
    ] = False

    @model_validator(mode="after")
    def _reward_model_fields(self) -> RewardModelSpec:
        problems = [f"{name}: not used by RewardModel ({why}); remove it" for name, why in _NO_LOGPROB_FIELDS.items()
                    if name in self.model_fields_set and getattr(self, name) not in (None, "none", "None", {})]  # fmt: skip
        if self.use_separate_reference_adapter:
            problems.append("use_separate_reference_adapter: a reward model has no reference policy; remove it")
        if problems:
            raise ValueError("; ".join(problems))
        return self


__all__ = ["DPOSpec", "DatasetLLMSpec", "RewardModelSpec", "SFTSpec"]
