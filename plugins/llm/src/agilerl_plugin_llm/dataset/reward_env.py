"""The dataset env of a RewardModel run: preference pairs as the token ids a reward model scores.

Rows are read as DPO's are (:func:`agilerl_plugin_llm.dataset.rows.read_rows`: ``prompt``, ``chosen``,
``rejected``, standard or conversational, the prompt implicit in conversational pairs), plus an
optional numeric ``margin`` column (TRL's RewardTrainer: the loss asks ``r_chosen - r_rejected`` to
exceed it). Each side is ``prompt + answer`` encoded by
:func:`agilerl_plugin_llm.reward_model.encode_reward_input`, the function GRPO's
``environment.reward_model`` scores with, so a trained model is scored exactly as it was trained.
Long rows are dropped, the split and shards are the dataset env's
(:func:`agilerl_plugin_llm.dataset.env.split_into_env`).

Batches are ``input_ids``/``attention_mask`` of shape ``[B, 2, T]`` (side 0 chosen, side 1
rejected) and ``margin`` of shape ``[B]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from agilerl_plugin_llm.chat import is_conversational
from agilerl_plugin_llm.dataset.env import DatasetEnv, DatasetStats, EncodedRow, split_into_env
from agilerl_plugin_llm.dataset.rows import DatasetError, preference_parts, read_rows
from agilerl_plugin_llm.reward_model import encode_reward_input
from agilerl_plugin_llm.specs import LLMEnvSpec

MARGIN_COLUMN = "margin"


def _margin(row: dict[str, Any], where: str) -> float:
    value = row.get(MARGIN_COLUMN)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise DatasetError(f"{where} column 'margin' is {value!r}; a margin is a finite number (or leave it empty)")
    return float(value)


class RewardDatasetEnv(DatasetEnv):
    """:class:`DatasetEnv` whose batches carry each pair's ``margin``."""

    margins: dict[int, float]

    def collate(self, rows: Sequence[EncodedRow]) -> dict[str, torch.Tensor]:
        batch = super().collate(rows)
        batch["margin"] = torch.tensor([self.margins.get(r.index, 0.0) for r in rows], dtype=torch.float32)
        return batch


def make_reward_env(
    spec: LLMEnvSpec,
    tokenizer: Any,
    *,
    data_batch_size_per_gpu: int = 8,
    max_context_length: int | None = None,
    seed: int | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> RewardDatasetEnv:
    """Build a RewardModel run's env (arguments as :func:`agilerl_plugin_llm.dataset.env.make_llm_env`).

    :raises DatasetError: missing file or column, a malformed conversation or margin, no usable rows.
    """
    if spec.env_type != "dataset":
        raise DatasetError("a RewardModel trains on preference rows: environment.env_type: dataset")
    rows = read_rows(spec, "preference")
    encoded: list[EncodedRow] = []
    margins: dict[int, float] = {}
    for i, row in enumerate(rows):
        where = f"row {i}"
        prompt, answers = preference_parts(row, where)
        if not spec.apply_chat_template and any(map(is_conversational, (prompt, *answers))):
            raise DatasetError(f"{where} is a list of messages, which only a chat template renders; remove "
                               "environment.apply_chat_template: false")  # fmt: skip
        sides = []
        for key, answer in zip(("chosen", "rejected"), answers, strict=True):
            ids = encode_reward_input(tokenizer, prompt, answer, where=f"{where} ({key})")
            sides.append((ids, [1] * len(ids)))
        encoded.append(EncodedRow(sides=sides, index=i))
        margins[i] = _margin(row, where)
    stats = DatasetStats(rows=len(rows))
    env = split_into_env(RewardDatasetEnv, spec, tokenizer, encoded, stats, objective="preference",
                         batch_size=data_batch_size_per_gpu, max_context_length=max_context_length, seed=seed,
                         rank=rank, world_size=world_size)  # fmt: skip
    env.margins = margins
    return env


__all__ = ["MARGIN_COLUMN", "RewardDatasetEnv", "make_reward_env"]
