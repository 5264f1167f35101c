"""LLMPPO: token-level PPO with a value head (Ouyang et al. 2022's RLHF recipe, one episode per prompt).

Each policy token is an action; its state is everything before it. A value head (a linear layer on
the policy's last hidden state, float32, trained with its own learning rate ``lr_critic``) predicts
``V`` at each policy token. Per iteration:

1. ``batch_size`` episodes sampled with the current policy; the values ``V`` of the sampling policy;
2. rewards: each turn's reward on the turn's last policy token, 0 elsewhere;
3. GAE over the episode's policy tokens in order (env and template tokens are skipped)::

       delta_j = r_j + g_j * V_{j+1} - V_j        A_j = delta_j + g_j * lambda * A_{j+1}

   with ``g_j = gamma`` where token ``j + 1`` starts the next turn, 1 within a turn, and ``V = 0``
   after the last token; returns ``R_j = A_j + V_j``; advantages whitened over the batch's tokens
   (``whiten_advantages``);
4. loss per policy token: the clipped surrogate ``max(-A r, -A clip(r, 1 -+ clip_coef))`` plus
   ``vf_coef * 0.5 * (V - R)^2`` plus ``beta`` x the k3 KL to the reference; averaged over each
   episode's tokens, then over episodes; ``update_epochs`` passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from agilerl_plugin_llm import model as llm_model
from agilerl_plugin_llm.algorithms.base import _decoder, scale_logits
from agilerl_plugin_llm.logprobs import token_logprobs
from agilerl_plugin_llm.packing import check_packing, pack_rows, packed_decoder_hidden
from agilerl_plugin_llm.rollout.base import (
    RolloutLLMAlgorithm,
    masked_mean_per_row,
    pad_trajectories,
    sequence_mean_loss,
)
from agilerl_plugin_llm.rollout.grpo import policy_loss
from agilerl_plugin_llm.rollout.harness import Trajectory
from agilerl_plugin_llm.rollout.specs import LLMPPOSpec


def token_gae(
    values: Sequence[float],
    turns: Sequence[int],
    turn_rewards: Sequence[float],
    *,
    gamma: float,
    lam: float,
) -> tuple[list[float], list[float]]:
    """``(advantages, returns)`` of one episode's policy tokens (in order; ``turns[j]`` is token j's turn)."""
    n = len(values)
    adv = [0.0] * n
    gae, next_value = 0.0, 0.0
    for j in range(n - 1, -1, -1):
        last_of_turn = j == n - 1 or turns[j + 1] != turns[j]
        reward = float(turn_rewards[turns[j]]) if last_of_turn and turns[j] < len(turn_rewards) else 0.0
        discount = (gamma if j < n - 1 else 0.0) if last_of_turn else 1.0
        delta = reward + discount * next_value - float(values[j])
        gae = delta + discount * lam * gae
        adv[j] = gae
        next_value = float(values[j])
    return adv, [a + float(v) for a, v in zip(adv, values, strict=True)]


class LLMPPO(RolloutLLMAlgorithm):
    """Token-level PPO on a causal LM with a value head. See the module docstring.

    Hyperparameters (from :class:`~agilerl_plugin_llm.rollout.specs.LLMPPOSpec`): ``lr_actor``,
    ``lr_critic``, ``clip_coef``, ``vf_coef``, ``gamma``, ``gae_lambda``, ``whiten_advantages``,
    ``beta``, ``kl_clamp``, ``update_epochs``, ``max_grad_norm`` and the sampling fields.
    """

    spec: LLMPPOSpec

    value_head: torch.nn.Linear | None = None

    @property
    def needs_reference(self) -> bool:  # type: ignore[override]
        return float(getattr(self.spec, "beta", 0.0)) > 0.0

    # --- the value head and its optimizer group -----------------------------------------------
    def _base(self) -> Any:
        return self.model.get_base_model() if llm_model.is_peft(self.model) else self.model

    def _ensure_value_head(self) -> torch.nn.Linear:
        if self.value_head is None:
            config = self._base().config
            size = int(getattr(config, "hidden_size", 0) or self._base().get_input_embeddings().embedding_dim)
            head = torch.nn.Linear(size, 1).to(self.device, torch.float32)
            torch.nn.init.zeros_(head.weight)  # V starts at 0: the first advantages are the returns
            torch.nn.init.zeros_(head.bias)
            self.value_head = head
        return self.value_head

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [*super().trainable_parameters(), *self._ensure_value_head().parameters()]

    def _make_optimizer(self) -> torch.optim.Optimizer:
        head = list(self._ensure_value_head().parameters())
        groups = [
            {"params": [p for p in self.model.parameters() if p.requires_grad], "lr": float(self.spec.lr_actor)},
            {"params": head, "lr": float(self.spec.lr_critic)},
        ]
        try:
            return torch.optim.AdamW(groups, fused=True)
        except (RuntimeError, TypeError, ValueError):
            return torch.optim.AdamW(groups)

    def apply_lr_schedule(self) -> None:
        scale = self.current_lr() / max(float(self.spec.lr), 1e-30)  # the schedule's factor at this iteration
        actor, critic = self.optimizer.param_groups
        actor["lr"] = float(self.spec.lr_actor) * scale
        critic["lr"] = float(self.spec.lr_critic) * scale

    # --- log-probs and values in one pass -----------------------------------------------------
    def logprobs_and_values(
        self, batch: Mapping[str, torch.Tensor], *, temperature: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs and values (``[B, T]``, zeros off ``loss_mask``) from one forward pass."""
        ids, attention, loss_mask = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
        select = loss_mask[:, 1:].bool()
        base = self._base()
        decoder, lm_head = _decoder(base), getattr(base, "lm_head", None)
        packed = pack_rows(ids, attention) if self.sequence_packing else None
        if packed is not None:  # use_sequence_packing: one padding-free forward (see agilerl_plugin_llm.packing)
            select = select & packed.real[:, :-1]
        targets = ids[:, 1:][select]
        if decoder is not None and lm_head is not None:
            if packed is not None:
                chosen = packed.select(packed_decoder_hidden(decoder, packed), packed.predictors(select))
            else:
                hidden = decoder(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
                chosen = hidden[:, :-1][select]
            token_logp = token_logprobs(
                chosen,
                lambda rows: scale_logits(base, lm_head(rows)),
                targets,
                temperature=temperature,
                chunk_rows=self.logit_chunk_rows,
            )
        elif packed is not None:

            def run(i: torch.Tensor, p: torch.Tensor) -> Any:
                return self.model(input_ids=i, position_ids=p, attention_mask=None, use_cache=False,
                                  output_hidden_states=True)  # fmt: skip

            check_packing(self.model, lambda i, p: run(i, p).logits)
            out = run(packed.input_ids, packed.position_ids)
            before = packed.predictors(select)
            chosen = packed.select(out.hidden_states[-1], before)
            token_logp = token_logprobs(
                packed.select(out.logits, before), lambda r: r, targets, temperature=temperature
            )
        else:
            out = self.model(input_ids=ids, attention_mask=attention, use_cache=False, output_hidden_states=True)
            chosen = out.hidden_states[-1][:, :-1][select]
            token_logp = token_logprobs(out.logits[:, :-1][select], lambda r: r, targets, temperature=temperature)
        logp = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        values = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        logp[:, 1:][select] = token_logp
        values[:, 1:][select] = self._ensure_value_head()(chosen.float()).squeeze(-1)
        return logp, values

    # --- advantages: GAE over policy tokens ---------------------------------------------------
    def advantages(
        self, trajs: Sequence[Trajectory], rewards: torch.Tensor, group_size: int
    ) -> dict[str, torch.Tensor]:
        batch = pad_trajectories(trajs, self.pad_id)
        with torch.no_grad():
            was_training = self.model.training
            self.model.eval()
            _, values = self.logprobs_and_values(self.to_device(batch), temperature=self._logit_temperature())
            if was_training:
                self.model.train()
        values = values.cpu()
        mask = batch["loss_mask"].bool()
        mask[:, 0] = False
        adv = torch.zeros(mask.shape, dtype=torch.float32)
        ret = torch.zeros(mask.shape, dtype=torch.float32)
        for i, t in enumerate(trajs):
            where = mask[i].nonzero().squeeze(-1)
            if where.numel() == 0:
                continue
            turns = batch["turn_index"][i, where].tolist()
            a, r = token_gae(values[i, where].tolist(), turns, t.rewards, gamma=float(self.spec.gamma),
                             lam=float(self.spec.gae_lambda))  # fmt: skip
            adv[i, where] = torch.tensor(a)
            ret[i, where] = torch.tensor(r)
        if self.spec.whiten_advantages and int(mask.sum()) > 1:
            chosen = adv[mask]
            adv = torch.where(mask, (adv - chosen.mean()) / (chosen.std() + 1e-8), adv)
        return {"advantages": adv, "returns": ret}

    # --- the loss ------------------------------------------------------------------------------
    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        logp, values = self.logprobs_and_values(batch, temperature=self._logit_temperature())
        x = self.policy_tokens(batch, logp)
        pg, clipped = policy_loss(x.logp, x.old, batch["advantages"], x.mask, clip_coef=self.clip_range())
        vf = 0.5 * (values - batch["returns"]) ** 2
        # The vLLM importance-sampling weight scales the policy surrogate only (as AgileRL), not the value loss.
        per_token = x.weighted(pg) + float(self.spec.vf_coef) * vf
        stats: dict[str, float] = {"value_loss": float(masked_mean_per_row(vf.detach(), x.mask).mean()), **x.stats}
        per_token = self.with_kl(per_token, x.logp, batch, x.mask, stats, self.spec.kl_clamp)
        return sequence_mean_loss(per_token, clipped, x.mask, stats)

    # --- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["value_head"] = {k: v.detach().cpu().clone() for k, v in self._ensure_value_head().state_dict().items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("value_head") is not None:
            self._ensure_value_head().load_state_dict(state["value_head"])
        super().load_state_dict(state)


__all__ = ["LLMPPO", "token_gae"]
