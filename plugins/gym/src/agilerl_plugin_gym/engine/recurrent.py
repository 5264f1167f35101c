"""What the on-policy engine adds for recurrent policies: per-step hidden states and BPTT sequences.

A recurrent rollout stores, with every step, the hidden state the policy held *before* acting on
it (:class:`RecurrentRolloutBuffer`), one flat vector per env. The update then trains on
sequences instead of shuffled single steps (truncated backpropagation through time):

* :func:`episode_pieces` cuts each env's column of the rollout at the steps Gymnasium spends
  auto-resetting (``valid == 0``): every piece is part of one episode, and the hidden state
  stored at its first step is where the LSTM starts (zero at an episode start; the carried state
  when an episode began in an earlier rollout).
* :func:`sequence_windows` splits a piece into training sequences as AgileRL's
  ``bptt_sequence_type`` names them, ``max_seq_len`` steps long (``None``: the whole piece):
  ``chunked`` (consecutive, non-overlapping; the last one shorter), ``maximum`` (a window at every
  step), ``fifty_percent_overlap`` (windows every ``max_seq_len // 2`` steps, and one ending at the
  piece's last step).
* :meth:`RecurrentRolloutBuffer.sequences` gathers the windows into zero-padded
  ``(sequences, time)`` tensors with a ``mask`` of real steps and each sequence's initial state;
  :func:`agilerl_plugin_gym.ppo_update.ppo_update` takes them with a ``seq_forward``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agilerl_plugin_gym.buffers import RolloutBuffer

__all__ = ["BPTT_SEQUENCE_TYPES", "RecurrentRolloutBuffer", "episode_pieces", "reset_rows", "sequence_windows"]

BPTT_SEQUENCE_TYPES = ("chunked", "maximum", "fifty_percent_overlap")


def reset_rows(state: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """``state`` with the rows where ``rows`` is True set to the zero (episode-start) state."""
    if not rows.any():
        return state
    keep = torch.as_tensor(~rows, dtype=state.dtype, device=state.device).unsqueeze(-1)
    return state * keep


def episode_pieces(valid: np.ndarray) -> list[tuple[int, int, int]]:
    """``(env, start, length)`` of every maximal run of valid steps in a ``(T, N)`` rollout."""
    T, N = valid.shape
    pieces: list[tuple[int, int, int]] = []
    padded = np.zeros((T + 2, N), dtype=np.int8)
    padded[1:-1] = valid > 0
    edges = np.diff(padded, axis=0)  # +1 where a run starts, -1 one past where it ends
    for env in range(N):
        starts = np.flatnonzero(edges[:, env] == 1)
        ends = np.flatnonzero(edges[:, env] == -1)
        pieces.extend((env, int(s), int(e - s)) for s, e in zip(starts, ends, strict=True))
    return pieces


def sequence_windows(length: int, max_seq_len: int | None, kind: str = "chunked") -> list[tuple[int, int]]:
    """``(offset, length)`` of the training sequences cut from a piece of ``length`` steps."""
    if max_seq_len is None or length <= max_seq_len:
        return [(0, length)]
    L = max_seq_len
    if kind == "chunked":
        return [(s, min(L, length - s)) for s in range(0, length, L)]
    if kind == "maximum":
        return [(s, L) for s in range(length - L + 1)]
    if kind == "fifty_percent_overlap":
        starts = list(range(0, length - L + 1, max(1, L // 2)))
        if starts[-1] + L < length:  # the tail gets a window too
            starts.append(length - L)
        return [(s, L) for s in starts]
    raise ValueError(f"unknown bptt_sequence_type {kind!r}; use one of {', '.join(BPTT_SEQUENCE_TYPES)}")


class RecurrentRolloutBuffer(RolloutBuffer):
    """A :class:`RolloutBuffer` that also stores each step's hidden state (``hidden``, ``(T, N, F)``)."""

    def __init__(self, *args: Any, state_size: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden: np.ndarray = np.zeros((self.num_steps, self.num_envs, state_size), dtype=np.float32)

    def sequences(self, max_seq_len: int | None, kind: str = "chunked") -> dict[str, torch.Tensor]:
        """The rollout as zero-padded ``(S, T_max, ...)`` sequences (GAE must be computed).

        Keys: those of :meth:`RolloutBuffer.flat` with a time axis, ``mask`` (bool, real steps) and
        ``state`` (``(S, F)``, each sequence's initial hidden state).
        """
        N = self.num_envs
        rows: list[tuple[int, int, int]] = []  # (env, first step, length)
        for env, start, length in episode_pieces(self.valid):
            rows.extend((env, start + off, n) for off, n in sequence_windows(length, max_seq_len, kind))
        if not rows:
            return {}
        t_max = max(n for _, _, n in rows)
        env_ix = np.array([r[0] for r in rows])
        first = np.array([r[1] for r in rows])
        lengths = np.array([r[2] for r in rows])
        steps = np.arange(t_max)
        mask = steps[None, :] < lengths[:, None]
        # Flat (T * N) index of every (sequence, time) cell; padding points at the sequence's first step.
        flat_ix = np.where(mask, first[:, None] + steps[None, :], first[:, None]) * N + env_ix[:, None]
        fields = {
            "obs": self.obs,
            "actions": self.actions,
            "log_probs": self.log_probs,
            "values": self.values,
            "advantages": self.advantages,
            "returns": self.returns,
        }
        out = {k: v.reshape(-1, *v.shape[2:])[flat_ix] for k, v in fields.items()}
        out["mask"] = mask
        out["state"] = self.hidden[first, env_ix]
        return {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device) for k, v in out.items()}
