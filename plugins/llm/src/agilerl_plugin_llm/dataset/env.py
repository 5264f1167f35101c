"""The teacher-forced dataset environment: rows in, padded token batches out.

:func:`make_llm_env` reads the rows named by an :class:`~agilerl_plugin_llm.specs.LLMEnvSpec` with
``env_type: dataset`` (JSON, JSONL, CSV, Parquet or a ``save_to_disk`` directory through
``datasets``; or a Hugging Face dataset id from the local cache only), remaps ``columns``, tokenises
every row once (through the chat template unless ``apply_chat_template: false``), splits train/test
with a seed, shards the rows by rank, and serves batches in a seeded order, epoch after epoch.

Rows and what trains:

* ``objective: sft``: ``prompt`` + ``response`` columns (the response column name is
  ``response_column``; TRL's ``completion`` is read as the response), or a ``messages`` column of
  chat turns. The loss mask covers the assistant/response tokens only (and the end-of-turn token
  that closes them).
* ``objective: preference``: ``prompt``, ``chosen`` and ``rejected`` columns. Each pair is the prompt
  followed by either answer; the mask covers the answer tokens. Conversational pairs may leave the
  prompt implicit (the messages ``chosen`` and ``rejected`` open with).

Any of these columns may be conversational (a list of ``{role, content}`` messages, TRL's form):
it is checked as a conversation, naming the row, and rendered only by the chat template (with
``apply_chat_template: false`` a message list is an error, never flattened to text). Reading the
rows is :mod:`agilerl_plugin_llm.dataset.rows`.

The rule for rows longer than ``max_context_length`` tokens: they are **dropped** (never silently
truncated, which would train on a cut-off response or compare cut-off answers); a pair is dropped if
either side is too long. The number dropped is logged. If no row is left, or a rank's shard is
empty, :func:`make_llm_env` raises :class:`DatasetError` before any training starts.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from agilerl_plugin_llm.dataset.rows import (
    SFT_CHAT_COLUMNS,
    SFT_COLUMNS,
    DatasetError,
    conversation,
    load_cached_dataset,
    load_local_dataset,
    load_rows,
    preference_parts,
    read_rows,
)
from agilerl_plugin_llm.model import check_chat_template
from agilerl_plugin_llm.specs import LLMEnvSpec

log = logging.getLogger(__name__)

DEFAULT_TRAIN_FRACTION = 0.9


# --------------------------------------------------------------------------------------------------
# Tokenising
# --------------------------------------------------------------------------------------------------


def _template_ids(tokenizer: Any, messages: list[dict[str, str]], kwargs: dict[str, Any], **extra: Any) -> Any:
    return tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs, **extra)


class Encoder:
    """Turns rows into ``(input_ids, loss_mask)`` with the loss on assistant/response tokens only."""

    def __init__(self, tokenizer: Any, *, apply_chat_template: bool, chat_template_kwargs: dict[str, Any]) -> None:
        self.tokenizer = tokenizer
        self.use_template = apply_chat_template
        self.kwargs = dict(chat_template_kwargs)
        template = getattr(tokenizer, "chat_template", None) or ""
        self.generation_mask = apply_chat_template and "generation" in template

    def conversation(self, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
        """Token ids of a chat and the mask of its assistant turns."""
        if not any(m["role"] == "assistant" for m in messages):
            return [], []
        if not self.use_template:
            return self._plain(messages)
        if self.generation_mask:
            out = _template_ids(self.tokenizer, messages, self.kwargs, return_assistant_tokens_mask=True)
            ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
            if any(mask):
                return ids, mask
        return self._by_prefix(messages)

    def _by_prefix(self, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
        # Templates without {% generation %}: the tokens an assistant turn adds are those between
        # the prompt rendered with add_generation_prompt and the chat rendered up to that turn.
        ids = list(_template_ids(self.tokenizer, messages, self.kwargs)["input_ids"])
        mask = [0] * len(ids)
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prefix = list(
                _template_ids(self.tokenizer, messages[:i], self.kwargs, add_generation_prompt=True)["input_ids"]
            )
            upto = list(_template_ids(self.tokenizer, messages[: i + 1], self.kwargs)["input_ids"])
            if upto[: len(prefix)] != prefix or ids[: len(upto)] != upto:
                raise DatasetError(
                    "the chat template renders a conversation's prefix differently from the whole, so the "
                    "response tokens cannot be located; add a {% generation %} block around assistant content "
                    "(environment.chat_template_path) or set environment.apply_chat_template: false"
                )
            for t in range(len(prefix), len(upto)):
                mask[t] = 1
        return ids, mask

    def _plain(self, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
        # No template: the texts are concatenated; each assistant text is followed by EOS (so the
        # model learns to stop) and trains, everything else is context.
        tok = self.tokenizer
        ids: list[int] = []
        mask: list[int] = []
        for i, message in enumerate(messages):
            piece = tok(message["content"], add_special_tokens=(i == 0))["input_ids"]
            if message["role"] == "assistant":
                piece = [*piece, tok.eos_token_id] if tok.eos_token_id is not None else piece
                mask += [1] * len(piece)
            else:
                mask += [0] * len(piece)
            ids += piece
        return ids, mask


@dataclass
class EncodedRow:
    """One tokenised row: ``ids``/``mask`` per side (one side for SFT; chosen, rejected for preference)."""

    sides: list[tuple[list[int], list[int]]]
    index: int = 0

    @property
    def length(self) -> int:
        return max(len(ids) for ids, _ in self.sides)


def encode_rows(rows: list[dict[str, Any]], encoder: Encoder, objective: str) -> tuple[list[EncodedRow], int]:
    """Tokenise rows; returns the encoded rows and how many had nothing to train on."""
    out: list[EncodedRow] = []
    empty = 0
    template = encoder.use_template
    for i, row in enumerate(rows):
        where = f"row {i}"
        if objective == "sft":
            if "messages" in row and row.get("messages") is not None and "response" not in row:
                parts = [(row["messages"], "user", "messages")]
            else:
                parts = [(row["prompt"], "user", "prompt"), (row["response"], "assistant", "response")]
            sides = [encoder.conversation(conversation(parts, where, template=template))]
        else:
            prompt, answers = preference_parts(row, where)
            sides = [
                encoder.conversation(conversation([(prompt, "user", "prompt"), (answer, "assistant", key)], where,
                                                   template=template))
                for key, answer in zip(("chosen", "rejected"), answers, strict=True)
            ]  # fmt: skip
        if any(not any(mask) for _, mask in sides):
            empty += 1
            continue
        out.append(EncodedRow(sides=sides, index=i))
    return out, empty


# --------------------------------------------------------------------------------------------------
# The environment
# --------------------------------------------------------------------------------------------------


@dataclass
class DatasetStats:
    rows: int = 0
    too_long: int = 0
    empty: int = 0
    train: int = 0
    test: int = 0
    shortest: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class DatasetEnv:
    """Teacher-forced rows of one rank's shard, served as padded tensor batches.

    Batches are dicts of ``input_ids``, ``attention_mask`` and ``loss_mask`` (``loss_mask[b, t] = 1``
    where token ``t`` trains). For ``objective: sft`` they are ``[B, T]``; for ``preference``
    ``[B, 2, T]`` with side 0 the chosen and side 1 the rejected answer.
    """

    def __init__(
        self,
        spec: LLMEnvSpec,
        tokenizer: Any,
        *,
        objective: str,
        train_rows: list[EncodedRow],
        test_rows: list[EncodedRow],
        batch_size: int,
        max_context_length: int | None,
        seed: int | None,
        rank: int,
        world_size: int,
        stats: DatasetStats,
    ) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.objective = objective
        self.train_rows = train_rows
        self.test_rows = test_rows
        self.batch_size = batch_size
        self.max_context_length = max_context_length
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.stats = stats
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else 0)
        self.epoch = 0
        self.position = 0
        self._order = self._epoch_order(0)

    # --- order ---------------------------------------------------------------------------------
    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.train_rows)))
        random.Random((self.seed or 0) * 1_000_003 + epoch).shuffle(order)
        return order

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Restart from the first epoch (reseeded when ``seed`` is given); return the first batch."""
        if seed is not None:
            self.seed = seed
        self.epoch, self.position = 0, 0
        self._order = self._epoch_order(0)
        return self.next_batch()

    def next_batch(self, batch_size: int | None = None) -> dict[str, torch.Tensor]:
        """The next ``batch_size`` training rows (wrapping into a freshly shuffled epoch)."""
        n = batch_size or self.batch_size
        picked: list[EncodedRow] = []
        while len(picked) < n:
            if self.position >= len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._epoch_order(self.epoch)
            take = self._order[self.position : self.position + n - len(picked)]
            picked += [self.train_rows[i] for i in take]
            self.position += len(take)
        return self.collate(picked)

    def step(self, action: Any = None) -> dict[str, torch.Tensor]:
        """Gym-style alias of :meth:`next_batch` (a dataset env ignores actions)."""
        return self.next_batch()

    def eval_rows(self) -> list[EncodedRow]:
        """Held-out rows (the training rows when ``train_test_split`` leaves none)."""
        return self.test_rows or self.train_rows

    def test_batches(self, batch_size: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """The held-out rows in a fixed order, in batches."""
        rows = self.eval_rows()
        n = batch_size or self.batch_size
        for start in range(0, len(rows), n):
            yield self.collate(rows[start : start + n])

    def __len__(self) -> int:
        return len(self.train_rows)

    # --- batches -------------------------------------------------------------------------------
    def collate(self, rows: Sequence[EncodedRow]) -> dict[str, torch.Tensor]:
        # Padded to this batch's longest row, built as Python lists and converted once per tensor
        # (two small tensor copies per row cost more than the conversion on a short step).
        width = max(r.length for r in rows)
        pad = self.pad_token_id
        ids_rows, attn_rows, loss_rows = [], [], []
        for row in rows:
            ids_sides, attn_sides, loss_sides = [], [], []
            for tok_ids, mask in row.sides:
                fill = width - len(tok_ids)
                ids_sides.append([*tok_ids, *([pad] * fill)])
                attn_sides.append([1] * len(tok_ids) + [0] * fill)
                loss_sides.append([*mask, *([0] * fill)])
            ids_rows.append(ids_sides)
            attn_rows.append(attn_sides)
            loss_rows.append(loss_sides)
        ids = torch.tensor(ids_rows, dtype=torch.long)
        attn = torch.tensor(attn_rows, dtype=torch.long)
        loss = torch.tensor(loss_rows, dtype=torch.long)
        if self.objective == "sft":
            ids, attn, loss = ids[:, 0], attn[:, 0], loss[:, 0]
        return {"input_ids": ids, "attention_mask": attn, "loss_mask": loss}

    # --- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.seed = state.get("seed", self.seed)
        self.epoch = int(state.get("epoch", 0))
        self.position = int(state.get("position", 0))
        self._order = self._epoch_order(self.epoch)

    def close(self) -> None:
        """Nothing to release (kept for the env protocol)."""


def fit_and_split(
    encoded: list[EncodedRow],
    spec: LLMEnvSpec,
    stats: DatasetStats,
    *,
    max_context_length: int | None,
    seed: int | None,
    rank: int,
    world_size: int,
) -> tuple[list[EncodedRow], list[EncodedRow]]:
    """Drop rows over ``max_context_length``, split train/test with ``seed``, keep this rank's shard."""
    stats.shortest = min(r.length for r in encoded)
    if max_context_length is not None:
        kept = [r for r in encoded if r.length <= max_context_length]
        stats.too_long = len(encoded) - len(kept)
        if not kept:
            raise DatasetError(
                f"all {len(encoded)} rows of {spec.label!r} are longer than max_context_length={max_context_length} "
                f"tokens (the shortest has {stats.shortest}); rows that do not fit are dropped, never truncated. "
                "Raise network.max_context_length or shorten the rows."
            )
        if stats.too_long:
            log.warning(
                "dropped %d of %d rows longer than max_context_length=%d tokens",
                stats.too_long,
                len(encoded),
                max_context_length,
            )
        encoded = kept
    fraction = DEFAULT_TRAIN_FRACTION if spec.train_test_split is None else spec.train_test_split
    order = list(range(len(encoded)))
    random.Random(seed if seed is not None else 0).shuffle(order)
    n_train = min(len(order), max(1, round(len(order) * fraction)))
    train = [encoded[i] for i in order[:n_train]]
    test = [encoded[i] for i in order[n_train:]]
    train, test = train[rank::world_size], test[rank::world_size]
    if not train:
        raise DatasetError(
            f"rank {rank} of {world_size} got no training rows ({n_train} rows in all): use fewer ranks or more rows"
        )
    stats.train, stats.test = len(train), len(test)
    if not test:
        log.warning("train_test_split leaves no held-out rows: evaluation uses the training rows")
    return train, test


def make_llm_env(
    spec: LLMEnvSpec,
    tokenizer: Any,
    *,
    data_batch_size_per_gpu: int = 8,
    max_context_length: int | None = None,
    seed: int | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> DatasetEnv:
    """Build the teacher-forced dataset environment for an LLM spec.

    :param spec: The env spec, with ``env_type: dataset``.
    :param tokenizer: The tokenizer (its chat template formats the rows).
    :param data_batch_size_per_gpu: Rows each rank draws per step.
    :param max_context_length: Token budget of a row; longer rows are dropped (see the module doc).
    :param seed: Seed for the train/test split and the row order.
    :param rank: This process's data-parallel shard index.
    :param world_size: Number of data-parallel shards.
    :raises DatasetError: missing file or column, no usable rows, an empty shard.
    """
    if spec.env_type != "dataset":
        raise DatasetError(
            "make_llm_env builds env_type: dataset; rollout envs are per-trajectory: use make_rollout_env_factory"
        )
    if not 0 <= rank < world_size:
        raise DatasetError(f"rank {rank} is outside world_size {world_size}")
    objective = spec.objective or "sft"
    if spec.apply_chat_template:
        check_chat_template(tokenizer, where="the model's tokenizer")
    rows = read_rows(spec, objective)
    encoder = Encoder(
        tokenizer, apply_chat_template=spec.apply_chat_template, chat_template_kwargs=spec.chat_template_kwargs
    )
    encoded, empty = encode_rows(rows, encoder, objective)
    stats = DatasetStats(rows=len(rows), empty=empty)
    if not encoded:
        raise DatasetError(
            f"no row of {spec.label!r} has a response to train on ({empty} rows with empty responses or no "
            "assistant turn)"
        )
    return split_into_env(DatasetEnv, spec, tokenizer, encoded, stats, objective=objective,
                          batch_size=data_batch_size_per_gpu, max_context_length=max_context_length, seed=seed,
                          rank=rank, world_size=world_size)  # fmt: skip


EnvT = TypeVar("EnvT", bound=DatasetEnv)


def split_into_env(
    env_cls: type[EnvT],
    spec: LLMEnvSpec,
    tokenizer: Any,
    encoded: list[EncodedRow],
    stats: DatasetStats,
    *,
    objective: str,
    batch_size: int,
    max_context_length: int | None,
    seed: int | None,
    rank: int,
    world_size: int,
) -> EnvT:
    """Split encoded rows (:func:`fit_and_split`) into an env of ``env_cls``: the last step of every dataset
    env's factory (SFT/DPO's :func:`make_llm_env`, the RewardModel's ``make_reward_env``)."""
    train, test = fit_and_split(encoded, spec, stats, max_context_length=max_context_length, seed=seed,
                                rank=rank, world_size=world_size)  # fmt: skip
    return env_cls(
        spec,
        tokenizer,
        objective=objective,
        train_rows=train,
        test_rows=test,
        batch_size=batch_size,
        max_context_length=max_context_length,
        seed=seed,
        rank=rank,
        world_size=world_size,
        stats=stats,
    )


__all__ = [
    "SFT_CHAT_COLUMNS",
    "SFT_COLUMNS",
    "DatasetEnv",
    "DatasetError",
    "DatasetStats",
    "EncodedRow",
    "Encoder",
    "encode_rows",
    "fit_and_split",
    "split_into_env",
    "load_cached_dataset",
    "load_local_dataset",
    "load_rows",
    "make_llm_env",
]
