"""An evolvable LSTM encoder (AgileRL's ``arch: lstm``) for recurrent policies.

:class:`EvolvableLSTM` maps a sequence of observations to ``latent_dim`` features through
``num_layers`` stacked LSTM layers of ``hidden_state_size`` units and a linear projection (then
ReLU, like the MLP encoder's output). Its recurrent state travels as one *flat* tensor per batch
row, ``(batch, state_size)`` with ``state_size = 2 * num_layers * hidden_state_size`` (all ``h``
then all ``c``), so a rollout can store it per step, zero the rows of envs whose episode ended and
pick the rows that start a training sequence with plain indexing.

* :meth:`EvolvableLSTM.step` — one time step for a batch (the rollout's and inference's path; it
  calls ``torch.lstm_cell`` per layer, about 3x cheaper than ``nn.LSTM`` on one step);
* :meth:`EvolvableLSTM.sequence` — a ``(batch, time, features)`` batch from given initial states
  (truncated BPTT in the update; ``nn.LSTM`` with the same weights);
* ``forward(x)`` — one step from the zero state (what a caller without a state gets).

Mutations (architecture HPO) change ``num_layers`` (``add_layer``/``remove_layer``) and
``hidden_state_size`` (``add_node``/``remove_node``), keeping every weight that still has a place:
``add_node`` is function-preserving (the new units' outgoing weights are zero), the others start
close to the old function. The latent size never changes.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch
from torch import nn

from agilerl_plugin_gym.networks.layers import orthogonal_, spec_kwargs
from agilerl_plugin_gym.sections import LstmSpec

__all__ = ["EvolvableLSTM"]


class EvolvableLSTM(nn.Module):
    """``obs -> LSTM(hidden_state_size) x num_layers -> Linear -> ReLU -> latent``.

    :param in_dim: observation features.
    :param out_dim: latent features.
    :param hidden_state_size, num_layers, dropout: as ``torch.nn.LSTM`` (dropout between layers,
        in training sequences only).
    :param min_hidden_state_size, max_hidden_state_size, min_layers, max_layers: mutation bounds.
    """

    #: The encoder kind, as :class:`agilerl_plugin_gym.networks.EvolvableNetwork` names it.
    arch_name = "lstm"

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        *,
        hidden_state_size: int = 64,
        num_layers: int = 1,
        dropout: float = 0.0,
        min_hidden_state_size: int = 8,
        max_hidden_state_size: int = 256,
        min_layers: int = 1,
        max_layers: int = 6,
    ) -> None:
        super().__init__()
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.hidden_state_size, self.num_layers = int(hidden_state_size), int(num_layers)
        self.dropout = float(dropout)
        self.min_hidden_state_size, self.max_hidden_state_size = min_hidden_state_size, max_hidden_state_size
        self.min_layers, self.max_layers = min_layers, max_layers
        self._build()

    @classmethod
    def from_spec(cls, spec: LstmSpec, in_dim: int, out_dim: int) -> EvolvableLSTM:
        return cls(in_dim, out_dim, **spec_kwargs(spec))

    def _build(self) -> None:
        H, L = self.hidden_state_size, self.num_layers
        self.lstm = nn.LSTM(self.in_dim, H, L, batch_first=True, dropout=self.dropout if L > 1 else 0.0)
        self.output = nn.Linear(H, self.out_dim)
        for name, p in self.lstm.named_parameters():
            if name.startswith("weight"):
                orthogonal_(p, 1.0)
            else:
                nn.init.zeros_(p)
        orthogonal_(self.output.weight, math.sqrt(2))
        nn.init.zeros_(self.output.bias)

    # --- state -----------------------------------------------------------------------------------
    @property
    def state_size(self) -> int:
        """Width of the flat per-row state (``h`` and ``c`` of every layer)."""
        return 2 * self.num_layers * self.hidden_state_size

    def initial_state(self, batch: int) -> torch.Tensor:
        """The zero state of ``batch`` rows (what an episode starts from)."""
        return torch.zeros(batch, self.state_size, device=self.output.weight.device)

    def _split(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat ``(B, 2*L*H)`` -> ``h, c`` of shape ``(L, B, H)`` each (as ``nn.LSTM`` takes them)."""
        hc = state.view(state.shape[0], 2, self.num_layers, self.hidden_state_size).permute(1, 2, 0, 3)
        return hc[0].contiguous(), hc[1].contiguous()

    @staticmethod
    def _join(h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.stack([h, c]).permute(2, 0, 1, 3).reshape(h.shape[1], -1)

    # --- forward ---------------------------------------------------------------------------------
    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One time step: ``x (B, in_dim)``, flat ``state (B, state_size)`` -> ``(latent, state)``."""
        H, L = self.hidden_state_size, self.num_layers
        # nn.LSTM's public per-layer weights ([w_ih, w_hh, b_ih, b_hh] for each layer).
        w = self.lstm.all_weights
        hs, cs = [], []
        inp = x
        for layer in range(L):
            h0 = state[:, layer * H : (layer + 1) * H]
            c0 = state[:, (L + layer) * H : (L + layer + 1) * H]
            w_ih, w_hh, b_ih, b_hh = w[layer]
            h, c = torch.lstm_cell(inp, (h0, c0), w_ih, w_hh, b_ih, b_hh)  # type: ignore[arg-type]
            hs.append(h)
            cs.append(c)
            inp = h
        latent = torch.relu(nn.functional.linear(inp, self.output.weight, self.output.bias))
        return latent, torch.cat([*hs, *cs], dim=1)

    def sequence(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x (B, T, in_dim)`` from flat initial states ``(B, state_size)`` -> ``(latent (B, T, out), state)``."""
        out, (h, c) = self.lstm(x, self._split(state))
        return torch.relu(self.output(out)), self._join(h, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One step from the zero state (a caller that carries no state)."""
        return self.step(x, self.initial_state(x.shape[0]))[0]

    # --- shape -----------------------------------------------------------------------------------
    def arch(self) -> dict[str, Any]:
        return {"hidden_state_size": self.hidden_state_size, "num_layers": self.num_layers}

    def set_arch(self, arch: dict[str, Any]) -> None:
        """Rebuild with the given shape (weights re-initialised; load them afterwards)."""
        self.hidden_state_size, self.num_layers = int(arch["hidden_state_size"]), int(arch["num_layers"])
        device = self.output.weight.device
        self._build()
        self.to(device)

    # --- mutations -------------------------------------------------------------------------------
    def _reshape(self, hidden: int, layers: int) -> None:
        """Rebuild as ``hidden`` x ``layers`` and copy every old weight that still has a place.

        LSTM weights stack the four gates (i, f, g, o) along dim 0; each gate block is copied
        separately. Units and inputs that are new start at zero where they feed old units.
        """
        old_lstm, old_out = self.lstm, self.output
        old_h, old_layers = self.hidden_state_size, self.num_layers
        self.hidden_state_size, self.num_layers = hidden, layers
        device = old_out.weight.device
        self._build()
        self.to(device)
        k = min(old_h, hidden)
        with torch.no_grad():
            for layer in range(min(old_layers, layers)):
                for kind in ("ih", "hh"):
                    w_old = getattr(old_lstm, f"weight_{kind}_l{layer}").view(4, old_h, -1)
                    w_new = getattr(self.lstm, f"weight_{kind}_l{layer}").view(4, hidden, -1)
                    cols = w_old.shape[2] if kind == "ih" and layer == 0 else k
                    if hidden > old_h and (kind == "hh" or layer > 0):
                        w_new[:, :, old_h:] = 0.0  # nothing listens to the new units
                    w_new[:, :k, :cols] = w_old[:, :k, :cols]
                    b_old = getattr(old_lstm, f"bias_{kind}_l{layer}").view(4, old_h)
                    getattr(self.lstm, f"bias_{kind}_l{layer}").view(4, hidden)[:, :k] = b_old[:, :k]
            if hidden > old_h:
                self.output.weight[:, old_h:] = 0.0
            self.output.weight[:, :k] = old_out.weight[:, :k]
            self.output.bias.copy_(old_out.bias)

    def add_layer(self) -> bool:
        """Stack one more LSTM layer (freshly initialised) on top; False at ``max_layers``."""
        if self.num_layers >= self.max_layers:
            return False
        self._reshape(self.hidden_state_size, self.num_layers + 1)
        return True

    def remove_layer(self) -> bool:
        """Drop the top LSTM layer; False at ``min_layers``."""
        if self.num_layers <= max(self.min_layers, 1):
            return False
        self._reshape(self.hidden_state_size, self.num_layers - 1)
        return True

    def add_node(self, numb_new_nodes: int | None = None, *, rng: random.Random | None = None) -> bool:
        """Widen the hidden state (every layer) by 16, 32 or 64 units, function-preserving."""
        n = numb_new_nodes if numb_new_nodes is not None else (rng or random.Random()).choice([16, 32, 64])
        n = min(n, self.max_hidden_state_size - self.hidden_state_size)
        if n <= 0:
            return False
        self._reshape(self.hidden_state_size + n, self.num_layers)
        return True

    def remove_node(self, numb_new_nodes: int | None = None, *, rng: random.Random | None = None) -> bool:
        """Narrow the hidden state (every layer) by 16, 32 or 64 units (keeps the first ones)."""
        n = numb_new_nodes if numb_new_nodes is not None else (rng or random.Random()).choice([16, 32, 64])
        n = min(n, self.hidden_state_size - self.min_hidden_state_size)
        if n <= 0:
            return False
        self._reshape(self.hidden_state_size - n, self.num_layers)
        return True
