"""Reward models: a local ``AutoModelForSequenceClassification`` directory with a one-logit head that
scores a prompt and its completion, as TRL's reward models do.

* **How a text is scored** (:func:`encode_reward_input`, one function for training and scoring, so a
  model is scored exactly as it was trained): a conversational prompt (a list of messages) plus the
  completion as an assistant message is rendered with the reward model's own chat template (an
  error if it has none, never a stringified list); a standard (text) prompt is the plain text
  ``prompt + completion`` followed by the end-of-sequence token, as TRL's RewardTrainer tokenises
  standard rows.
* **As a reward source** (``environment.reward_model: DIR``): :class:`RewardModelScorer` is a
  TRL-style batched reward callable, ``scorer(prompts=..., completions=...) -> list[float]``, that
  scores a whole batch of completions at once on the rollout device. :func:`reward_model_func`
  makes it one of the run's batched reward functions (beside ``reward_funcs``, weighted by
  ``reward_weights``), so each dataset-row episode's reward is the weighted sum after the rollout
  and ``info["rewards"]["reward_model"]`` keeps its score.
* **Validation** (:func:`reward_model_problems`, standard library only): the directory is a model
  transformers can load, its ``architectures`` is a sequence classifier and its head is one logit
  (``num_labels`` from ``config.json``; a config without ``id2label`` has transformers' default of 2).

Torch and transformers are imported inside the functions that need them, so ``agilerl validate``
(which imports this module) stays light.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError
from agilerl_plugin_llm.chat import check_conversation, is_conversational, plain
from agilerl_plugin_llm.check_inputs import model_dir_problem

log = logging.getLogger("agilerl.llm.reward_model")

FIELD = "environment.reward_model"
#: Completions scored per forward pass.
SCORE_BATCH = 16


class RewardModelError(AgileRLError):
    """A reward model cannot be loaded or cannot score a text (names the field or the row)."""


# --------------------------------------------------------------------------------------------------
# Validation (standard library only)
# --------------------------------------------------------------------------------------------------


def num_labels(config: dict[str, Any]) -> int:
    """The classifier's outputs as transformers reads them from ``config.json`` (default 2)."""
    if isinstance(config.get("num_labels"), int):
        return int(config["num_labels"])
    labels = config.get("id2label")
    return len(labels) if isinstance(labels, dict) and labels else 2


def reward_model_problems(value: str | None, where: str = FIELD) -> list[tuple[str, str]]:
    """``(field, why)`` pairs for the reward model directory ``value`` (nothing is loaded)."""
    if not value:
        return []
    path = Path(str(value)).expanduser()
    field = where.removeprefix("environment.")
    if not path.is_dir():
        return [(field, f"{value!r} is not a directory (relative to {Path.cwd()}); give the directory of a local "
                        "AutoModelForSequenceClassification (e.g. what `agilerl export` writes for a RewardModel run)")]  # fmt: skip
    why = model_dir_problem(path)
    if why:
        return [(field, f"{value!r}: {why}")]
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # model_dir_problem parsed it: a race at most
        return [(field, f"{value!r}: config.json: {exc}")]
    archs = [str(a) for a in config.get("architectures") or []]
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        return [(field, (f"{value!r} is a {', '.join(archs) or 'model without architectures'}, not a sequence "
                         "classifier; a reward model is an AutoModelForSequenceClassification with one output "
                         "(train one with algorithm: {name: RewardModel} and agilerl export it)"))]  # fmt: skip
    labels = num_labels(config)
    if labels != 1:
        return [(field, (f"{value!r}: its head gives {labels} logits (num_labels {labels}, from config.json), but a "
                         "reward model gives one score per text: num_labels 1"))]  # fmt: skip
    return []


# --------------------------------------------------------------------------------------------------
# What a reward model reads
# --------------------------------------------------------------------------------------------------


def encode_reward_input(tokenizer: Any, prompt: Any, completion: Any, *, where: str) -> list[int]:
    """Token ids a reward model scores for ``prompt`` followed by ``completion`` (see the module doc)."""
    prompt, completion = plain(prompt), plain(completion)
    if is_conversational(prompt) or is_conversational(completion):
        if isinstance(completion, str):
            completion = [{"role": "assistant", "content": completion}]
        head = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
        messages = check_conversation([*head, *completion], where)
        if not getattr(tokenizer, "chat_template", None):
            raise RewardModelError(
                f"{where}: the data is conversational and the reward model's tokenizer has no chat template to "
                "render it; save one with the reward model (tokenizer.chat_template)"
            )
        out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)
        return list(out["input_ids"])
    if not isinstance(prompt, str) or not isinstance(completion, str):
        raise RewardModelError(f"{where}: expected text or a list of messages, got {type(prompt).__name__} "
                               f"and {type(completion).__name__}")  # fmt: skip
    ids = list(tokenizer(prompt + completion)["input_ids"])
    eos = tokenizer.eos_token_id
    if eos is not None and (not ids or ids[-1] != eos):
        ids.append(int(eos))
    return ids


def pad_batch(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """Right-padded ``(input_ids, attention_mask)`` tensors of ``rows``."""
    import torch  # deferred: validation imports this module without torch

    width = max(len(r) for r in rows)
    ids = torch.tensor([[*r, *([pad_id] * (width - len(r)))] for r in rows], dtype=torch.long)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long)
    return ids, mask


def sequence_scores(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    """One score per row (``[B]``): the model's own forward, which pools the head at each row's last
    token that is not ``config.pad_token_id``, exactly as transformers and TRL score with it."""
    return model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0].float()


# --------------------------------------------------------------------------------------------------
# Scoring rollouts
# --------------------------------------------------------------------------------------------------


class RewardModelScorer:
    """A reward model loaded for scoring (frozen, eval mode), on the rollout device.

    Called TRL's way: ``scorer(prompts=[...], completions=[...]) -> list[float]``.

    :param path: the model directory (validated by :func:`reward_model_problems`).
    :param device: where it runs (default: the current CUDA device, else the CPU), chosen when it
        first scores, so building the env loads nothing onto a device yet.
    """

    def __init__(self, path: str, *, device: Any = None, batch_size: int = SCORE_BATCH) -> None:
        problems = reward_model_problems(path)
        if problems:
            raise RewardModelError(f"environment.{problems[0][0]}: {problems[0][1]}")
        self.path = str(path)
        self.device = device
        self.batch_size = int(batch_size)
        self._model: Any = None
        from transformers import AutoTokenizer  # deferred: transformers is heavy

        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @property
    def model(self) -> Any:
        if self._model is None:
            import torch  # deferred: torch is heavy
            from transformers import AutoModelForSequenceClassification

            if self.device is None:
                self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
            model = AutoModelForSequenceClassification.from_pretrained(self.path, local_files_only=True)
            if model.config.pad_token_id is None:  # batches are padded: the head must know the pad token
                model.config.pad_token_id = self.tokenizer.pad_token_id
            self._model = model.to(self.device).eval().requires_grad_(False)
        return self._model

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
        import torch  # deferred: torch is heavy

        rows = [encode_reward_input(self.tokenizer, p, c, where=f"{FIELD}: completion {i}")
                for i, (p, c) in enumerate(zip(prompts, completions, strict=True))]  # fmt: skip
        model = self.model
        scores: list[float] = []
        pad = int(model.config.pad_token_id)
        with torch.no_grad():
            for start in range(0, len(rows), self.batch_size):
                ids, mask = pad_batch(rows[start : start + self.batch_size], pad)
                scores += sequence_scores(model, ids.to(self.device), mask.to(self.device)).tolist()
        bad = [i for i, x in enumerate(scores) if not math.isfinite(x)]
        if bad:
            raise RewardModelError(f"{FIELD}: the reward model scored completion {bad[0]} as {scores[bad[0]]} (of "
                                   f"{len(scores)}; prompt {_short(prompts[bad[0]])}); rewards must be finite")  # fmt: skip
        return scores


def _short(value: Any) -> str:
    text = repr(plain(value))
    return text if len(text) < 80 else text[:77] + "..."


_SCORERS: dict[str, RewardModelScorer] = {}


def scorer_for(path: str) -> RewardModelScorer:
    """The run's scorer for ``path`` (the training and held-out envs share one model)."""
    key = str(Path(path).expanduser().resolve())
    if key not in _SCORERS:
        _SCORERS.clear()  # one reward model per run: free the last run's
        _SCORERS[key] = RewardModelScorer(path)
    return _SCORERS[key]


def reward_model_func(spec: Any) -> tuple[str, float, RewardModelScorer] | None:
    """``(name, weight, fn)`` of the spec's reward model as a TRL-style batched reward function
    (``fn(prompts=..., completions=..., **columns) -> list[float]``), or None when it names none.

    The weight is the last of ``reward_weights`` (after one per ``reward_funcs`` entry: in TRL a reward
    model is one of ``reward_funcs``, weighted in ``reward_weights``), else 1. It joins the batched
    reward sources (:data:`agilerl_plugin_llm.rollout.reward_funcs.REWARD_SOURCES`) under the name
    ``reward_model``, which is its key in each episode's ``info["rewards"]`` and in completions.jsonl.
    """
    path = getattr(spec, "reward_model", None)
    if not path:
        return None
    weights = list(getattr(spec, "reward_weights", None) or [])
    index = len(getattr(spec, "reward_funcs", None) or [])
    weight = float(weights[index]) if index < len(weights) else 1.0
    return "reward_model", weight, scorer_for(str(path))


__all__ = [
    "RewardModelError",
    "RewardModelScorer",
    "encode_reward_input",
    "num_labels",
    "pad_batch",
    "reward_model_func",
    "reward_model_problems",
    "scorer_for",
    "sequence_scores",
]
