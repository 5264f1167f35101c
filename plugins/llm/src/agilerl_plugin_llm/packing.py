"""Padding-free sequence packing (AgileRL's ``use_sequence_packing``).

A right-padded ``[B, T]`` batch of sequences of different lengths spends ``B * T`` token positions
of every forward pass on ``sum(lengths)`` real tokens. Packed, the real tokens of several sequences
share a row: rows of at most ``T`` tokens (first-fit, longest first), each sequence numbered from
position 0 again, and no attention mask at all. Transformers reads the packing from the
``position_ids`` (a position that does not follow the previous one starts a new sequence) and keeps
the sequences of a row apart in every layer's own mask (causal, sliding window), with sdpa, eager,
flex_attention and flash_attention_2 alike. Rows never exceed the padded width, so a dense attention
mask (sdpa and eager on the CPU) is never larger than the padded batch's.

The forward's outputs are read back at each original token's place (:meth:`PackedRows.gather`), so
the log-probs and values of the loss are those of the padded forward within float tolerance, and
gradients flow back through the packed pass.

Whether a model keeps packed sequences apart is checked once per model (:func:`check_packing`): a
model whose mask code ignores the packing would let sequences attend to each other, and is refused
with an error rather than trained on mixed-up attention.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from agilerl.errors import AgileRLError


class PackingUnsupportedError(AgileRLError):
    """The model lets packed sequences attend to each other (its masks ignore ``position_ids``)."""


@dataclass(frozen=True)
class PackedRows:
    """A padded batch packed into rows, and where each original token went.

    :ivar input_ids: ``[R, W]`` packed token ids (the tail of a row after its last sequence holds
        ``pad_id`` tokens that form their own sequence: attended by nothing else, their outputs unused).
    :ivar position_ids: ``[R, W]`` positions, restarting at 0 for each sequence.
    :ivar row: ``[B, T]`` the packed row of each original token (0 at padding).
    :ivar col: ``[B, T]`` its column in that row (0 at padding).
    :ivar real: ``[B, T]`` whether the original position holds a real token.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    real: torch.Tensor

    @property
    def computed_tokens(self) -> int:
        """Token positions the packed forward computes (``R * W``)."""
        return int(self.input_ids.numel())

    def gather(self, packed: torch.Tensor) -> torch.Tensor:
        """``[R, W, ...]`` outputs of the packed forward at the original ``[B, T, ...]`` places (0 at padding)."""
        out = packed[self.row, self.col]
        real = self.real.reshape(*self.real.shape, *([1] * (out.dim() - 2)))
        return out * real.to(out.dtype)

    def select(self, packed: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        """Rows of ``packed`` (``[R, W, ...]``) at the original positions ``where`` (a ``[B, T]`` bool mask)."""
        return packed[self.row[where], self.col[where]]

    def predictors(self, targets: torch.Tensor) -> torch.Tensor:
        """The ``[B, T]`` positions whose outputs predict the tokens ``targets`` marks (``[B, T - 1]``,
        over tokens 1..T-1): each one's previous position."""
        before = torch.zeros_like(self.real)
        before[:, :-1] = targets
        return before


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, *, pad_id: int = 0) -> PackedRows:
    """Pack the real tokens (``attention_mask`` 1, either padding side) of each row of ``input_ids``
    into rows no wider than the longest sequence: first-fit, longest sequences first."""
    real = attention_mask.bool()
    lengths = real.sum(dim=1).tolist()
    width = max(1, max(lengths, default=1))
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    free: list[int] = []  # free columns left in each packed row
    start_of: dict[int, tuple[int, int]] = {}  # sequence -> (row, first column)
    for i in order:
        n = lengths[i]
        if n == 0:
            continue
        slot = next((r for r, room in enumerate(free) if room >= n), None)
        if slot is None:
            free.append(width)
            slot = len(free) - 1
        start_of[i] = (slot, width - free[slot])
        free[slot] -= n
    rows = max(1, len(free))
    device = input_ids.device
    ids = torch.full((rows, width), int(pad_id), dtype=input_ids.dtype, device=device)
    cols = torch.arange(width, device=device)
    # The tail of a row counts from 0 too: it follows no sequence, so it is a sequence of its own.
    positions = torch.zeros((rows, width), dtype=torch.long, device=device)
    row_of = torch.zeros(input_ids.shape, dtype=torch.long, device=device)
    col_of = torch.zeros(input_ids.shape, dtype=torch.long, device=device)
    for r in range(len(free)):
        used = width - free[r]
        positions[r, used:] = cols[: width - used]
    for i, (r, c) in start_of.items():
        n = lengths[i]
        where = real[i].nonzero().squeeze(-1)
        ids[r, c : c + n] = input_ids[i, where]
        positions[r, c : c + n] = cols[:n]
        row_of[i, where] = r
        col_of[i, where] = c + cols[:n]
    return PackedRows(input_ids=ids, position_ids=positions, row=row_of, col=col_of, real=real)


#: Models :func:`check_packing` has found to keep packed sequences apart.
_CHECKED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def check_packing(module: torch.nn.Module, run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """Refuse a model whose attention does not keep packed sequences apart (checked once per model).

    ``run(input_ids, position_ids)`` is the forward the packed batches go through (returning
    ``[R, W, ...]``). Two packed rows that share their last sequence but not their first must give
    that last sequence the same outputs; a model whose masks ignore the packing lets it see the first.
    """
    if module in _CHECKED:
        return
    first_a, first_b, last = [3, 4, 5], [6, 7, 8], [9, 10]
    ids = torch.tensor([first_a + last, first_b + last], device=_device_of(module))
    positions = torch.tensor([[0, 1, 2, 0, 1]] * 2, device=ids.device)
    was_training = module.training
    module.eval()  # no dropout: the two rows must be computed alike
    try:
        with torch.no_grad():
            out = run(ids, positions)[:, 3:].float()
    finally:
        module.train(was_training)
    scale = float(out.abs().max()) + 1e-6
    if not torch.allclose(out[0], out[1], rtol=1e-3, atol=1e-3 * scale):
        raise PackingUnsupportedError(
            f"use_sequence_packing: {type(module).__name__} lets packed sequences attend to each other (its "
            "attention masks do not follow the per-sequence position_ids that mark the packing), so packed "
            "training would be wrong; set use_sequence_packing: false"
        )
    _CHECKED.add(module)


def _device_of(module: torch.nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


def packed_decoder_hidden(decoder: Any, packed: PackedRows) -> torch.Tensor:
    """The decoder's last hidden states ``[R, W, H]`` for the packed rows (no mask: the positions say it)."""

    def run(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = decoder(input_ids=ids, position_ids=positions, attention_mask=None, use_cache=False)
        return out.last_hidden_state  # type: ignore[no-any-return]

    check_packing(decoder, run)
    return run(packed.input_ids, packed.position_ids)


def packed_logits(model: Any, packed: PackedRows) -> torch.Tensor:
    """The model's logits ``[R, W, V]`` for the packed rows (models without a separable decoder)."""

    def run(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, position_ids=positions, attention_mask=None, use_cache=False).logits  # type: ignore[no-any-return]

    check_packing(model, run)
    return run(packed.input_ids, packed.position_ids)


__all__ = [
    "PackedRows",
    "PackingUnsupportedError",
    "check_packing",
    "pack_rows",
    "packed_decoder_hidden",
    "packed_logits",
]
