"""RewardModel: a reward model trained on preference pairs, as TRL's RewardTrainer trains one.

The base causal LM is loaded as ``AutoModelForSequenceClassification`` with one output (its ``score``
head is new; under LoRA the head trains in full beside the adapter, as peft's ``SEQ_CLS`` task does).
For a pair with scores ``r_c = r(prompt + chosen)`` and ``r_r = r(prompt + rejected)``::

    loss = -log sigmoid(r_c - r_r - margin) [+ center_rewards_coefficient * (r_c + r_r)^2]

(Bradley-Terry; ``margin`` is the rows' optional ``margin`` column, 0 without it). Held-out metrics:
the loss, the preference accuracy (``r_c > r_r``; a tie counts 1/2) and the mean gap ``r_c - r_r``.
Fitness is the negative held-out loss, as for DPO. The export (``agilerl export``, merged) is an
``AutoModelForSequenceClassification`` directory that ``environment.reward_model`` takes as it is.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from agilerl_plugin_llm import model as llm_model
from agilerl_plugin_llm.algorithms.base import Batch, LLMAlgorithm
from agilerl_plugin_llm.dataset.specs import RewardModelSpec
from agilerl_plugin_llm.reward_model import sequence_scores

#: The head's module name in transformers' ``*ForSequenceClassification`` models.
HEAD = "score"


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' load report lists the new head as missing weights: expected here, so not shown."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def load_reward_classifier(spec: Any, tokenizer: Any, device: torch.device) -> Any:
    """The spec's base model with a one-logit classification head, LoRA-wrapped when ``lora_config`` is set."""
    from transformers import AutoModelForSequenceClassification

    path = llm_model.resolve_model_path(spec.pretrained_model_name_or_path)
    kwargs: dict[str, Any] = {"num_labels": 1, "local_files_only": True}
    dtype = llm_model.training_dtype(device, lora=spec.lora_config is not None)
    kwargs["dtype"] = dtype if dtype is not None else "auto"
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    try:
        with warnings.catch_warnings(), _quiet_transformers():  # "score.weight MISSING": the head is what trains
            warnings.simplefilter("ignore")
            model = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
    except Exception as exc:
        raise llm_model.ModelLoadError(
            f"cannot load {str(path)!r} as a sequence classifier (AutoModelForSequenceClassification): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    # Batches are padded: the head pools at each row's last token that is not the pad token.
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.use_cache = False
    model.to(device)
    if spec.gradient_checkpointing:  # non-reentrant, as load_model: it works under LoRA too
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if spec.lora_config is None:
        return model
    from peft import get_peft_model

    cfg = llm_model.peft_lora_config(spec.lora_config)
    cfg.task_type = "SEQ_CLS"  # peft then trains the head in full (modules_to_save) beside the adapter
    cfg.modules_to_save = [HEAD]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        model = get_peft_model(model, cfg, adapter_name=llm_model.ACTOR)
    for name, param in model.named_parameters():
        param.requires_grad_(f".{llm_model.ACTOR}." in name)  # the adapter and the head's trained copy
    return model


def _accuracy(gap: torch.Tensor) -> torch.Tensor:
    return (gap > 0).float() + 0.5 * (gap == 0).float()


class RewardModel(LLMAlgorithm):
    """Reward-model training (hyperparameters in :class:`agilerl_plugin_llm.dataset.specs.RewardModelSpec`).

    ``lr``, ``batch_size`` (pairs per iteration), ``update_epochs``, ``max_grad_norm``,
    ``mini_batch_size``, ``micro_batch_size_per_gpu`` as in DPO; ``center_rewards_coefficient`` as TRL.
    """

    spec: RewardModelSpec
    needs_reference = False
    #: ``agilerl export`` writes the merged model by default: a directory GRPO's reward_model loads.
    export_format = "merged"
    #: The transformers class that loads the export (named in the model card).
    auto_class = "AutoModelForSequenceClassification"

    def _load_policy(self) -> Any:
        if not self.spec.pretrained_model_name_or_path:
            raise llm_model.ModelLoadError("network.pretrained_model_name_or_path is required (a local model dir)")
        return load_reward_classifier(self.spec, self.tokenizer, self.device)

    def pair_scores(self, batch: Batch) -> torch.Tensor:
        """Scores ``[B, 2]`` of each pair's chosen and rejected side."""
        b, sides, t = batch["input_ids"].shape
        ids = batch["input_ids"].reshape(b * sides, t)
        mask = batch["attention_mask"].reshape(b * sides, t)
        return sequence_scores(self.model, ids, mask).view(b, sides)  # one forward for both sides

    def _terms(self, batch: Batch) -> dict[str, torch.Tensor]:
        rewards = self.pair_scores(batch)
        gap = rewards[:, 0] - rewards[:, 1]
        margin = batch.get("margin")
        loss = -F.logsigmoid(gap - margin if margin is not None else gap)
        center = self.spec.center_rewards_coefficient
        if center:
            loss = loss + center * (rewards[:, 0] + rewards[:, 1]) ** 2
        return {"loss": loss, "gap": gap, "chosen": rewards[:, 0], "rejected": rewards[:, 1]}

    def _loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        terms = self._terms(batch)
        stats = {
            "loss": float(terms["loss"].detach().mean()),
            "accuracy": float(_accuracy(terms["gap"].detach()).mean()),
            "reward_gap": float(terms["gap"].detach().mean()),
        }
        return terms["loss"].sum(), stats

    def learn(self, batch: Batch) -> dict[str, float]:
        """One training iteration on a batch of pairs (``update_epochs`` passes); returns mean stats."""
        stats: dict[str, float] = {}
        for _ in range(int(self.spec.update_epochs)):
            stats = self.optimize(batch, self._loss)
        return stats

    @torch.no_grad()
    def evaluate(self, env: Any, *, batch_size: int | None = None) -> dict[str, float]:
        """Held-out loss, preference accuracy, mean reward gap and mean chosen/rejected scores."""
        self.model.eval()
        sums = {"loss": 0.0, "accuracy": 0.0, "reward_gap": 0.0, "chosen_reward": 0.0, "rejected_reward": 0.0}
        rows = 0
        size = batch_size or self.spec.micro_batch_size_per_gpu or self.spec.batch_size
        for batch in env.test_batches(size):
            terms = self._terms(self.to_device(batch))
            sums["loss"] += float(terms["loss"].sum())
            sums["accuracy"] += float(_accuracy(terms["gap"]).sum())
            sums["reward_gap"] += float(terms["gap"].sum())
            sums["chosen_reward"] += float(terms["chosen"].sum())
            sums["rejected_reward"] += float(terms["rejected"].sum())
            rows += int(terms["loss"].shape[0])
        return {k: v / max(rows, 1) for k, v in sums.items()}

    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float:
        """Fitness: the negative held-out loss (higher is better)."""
        return -self.evaluate(env)["loss"]


__all__ = ["HEAD", "RewardModel", "load_reward_classifier"]
