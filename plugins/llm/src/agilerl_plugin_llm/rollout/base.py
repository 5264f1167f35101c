"""What the rollout algorithms (GRPO, LLMREINFORCE) share on top of ``LLMAlgorithm``.

One training *iteration* = collect episodes with the current policy, score them, compute
advantages (the subclass's), then optimizer steps on a clipped policy-gradient loss (the
subclass's). ``agent.steps`` counts iterations.

Collection plays many :class:`~agilerl_plugin_llm.rollout.harness.RolloutHarness` es in lock step:
each turn, every unfinished episode's context goes to the generation backend in one batch.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from agilerl_plugin_llm import distributed
from agilerl_plugin_llm.algorithms.base import LLMAlgorithm, slice_batch, trim_padding
from agilerl_plugin_llm.envs import EnvAtCapacity
from agilerl_plugin_llm.rollout.completions_log import completion_records, completions_due
from agilerl_plugin_llm.rollout.generation import (
    GenerationBackend,
    GenerationError,
    SamplingConfig,
    cut_at_stop_string,
    select_backend,
)
from agilerl_plugin_llm.rollout.harness import (
    NoRoomToGenerateError,
    RolloutHarness,
    Trajectory,
    no_room_message,
    stop_token_ids,
)
from agilerl_plugin_llm.rollout.kv import has_dropout, shared_prefix_logprobs, supports_shared_prefix

log = logging.getLogger("agilerl.llm.rollout")  # under "agilerl": the CLI shows it


def collect(
    harnesses: Sequence[RolloutHarness],
    backend: GenerationBackend,
    sampling: SamplingConfig,
    *,
    seeds: Sequence[int | None],
    generation_seed: int | None = None,
    logprobs: bool = False,
) -> list[Trajectory]:
    """Play one episode in every harness (``harnesses[i].reset(seeds[i])``), turn by turn, batched.

    Envs that wait on I/O (``concurrent = True``, e.g. OpenEnv sessions) are reset and stepped
    concurrently, one thread per env: a batch costs about one round trip per turn instead of one per
    env. Tokenisation stays on this thread either way. ``logprobs``: the backend also returns each
    sampled token's log-prob (``generate_with_logprobs``), kept as ``Trajectory.sampling_logprobs``.
    """
    out: list[Trajectory | None] = [None] * len(harnesses)
    waiting = list(range(len(harnesses)))
    wave = 0
    while waiting:
        # An env may have no room for every episode at once (EnvAtCapacity): those wait for a later wave.
        run = env_runner([harnesses[i].env for i in waiting])
        resets = run([partial(harnesses[i].env.reset, seed=seeds[i]) for i in waiting])
        started = [i for i, r in zip(waiting, resets, strict=True) if not isinstance(r, EnvAtCapacity)]
        if not started:
            raise next(r for r in resets if isinstance(r, EnvAtCapacity))
        for i, result in zip(waiting, resets, strict=True):
            if i in started:
                harnesses[i].begin(result)
        _check_room([harnesses[i] for i in started])
        _play([harnesses[i] for i in started], backend, sampling, run,
              None if generation_seed is None else generation_seed + 104_729 * wave, logprobs)  # fmt: skip
        for i in started:
            out[i] = harnesses[i].trajectory()
        waiting = [i for i in waiting if i not in started]
        if waiting:  # free what this wave's envs hold (an episode the harness cut short still has its session)
            for i in started:
                harnesses[i].close()
        wave += 1
    return [t for t in out if t is not None]


_warned_no_room = False


def _check_room(harnesses: Sequence[RolloutHarness]) -> None:
    """No prompt may silently fill the context: all of a batch is an error, some a warning (once)."""
    global _warned_no_room
    full = [h for h in harnesses if h.no_room]
    if not full:
        return
    h = full[0]
    message = no_room_message([x.prompt_len for x in full], h.max_model_len, h.max_output_tokens)
    if len(full) == len(harnesses):
        raise NoRoomToGenerateError(message)
    if not _warned_no_room:
        _warned_no_room = True
        log.warning("%d of %d episodes: %s; those episodes score nothing", len(full), len(harnesses), message)


def _play(harnesses: Sequence[RolloutHarness], backend: GenerationBackend, sampling: SamplingConfig,
          run: Callable[[list[Callable[[], Any]]], list[Any]], generation_seed: int | None,
          logprobs: bool = False) -> None:  # fmt: skip
    turn = 0
    while True:
        active = [h for h in harnesses if not h.done]
        if not active:
            break
        kwargs: dict[str, Any] = {
            "max_new_tokens": [h.generation_budget() for h in active],
            "sampling": sampling,
            "seed": None if generation_seed is None else generation_seed + 7919 * turn,
        }
        contexts = [h.context() for h in active]
        if logprobs:
            pairs = backend.generate_with_logprobs(contexts, **kwargs)  # type: ignore[attr-defined]
            new, scores = [p[0] for p in pairs], [p[1] for p in pairs]
        else:
            new, scores = backend.generate(contexts, **kwargs), [None] * len(active)
        replies = []
        for h, ids, lps in zip(active, new, scores, strict=False):
            ids, stopped = cut_at_stop_string(list(ids), h.tokenizer, sampling.stop_strings)
            replies.append(h.reply(ids, stopped=stopped, logprobs=None if lps is None else list(lps)[: len(ids)]))
        results = run([partial(h.env.step, a) for h, a in zip(active, replies, strict=True)])
        for harness, result in zip(active, results, strict=True):
            harness.finish_step(result)
        turn += 1


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def env_runner(envs: Sequence[Any]) -> Callable[[list[Callable[[], Any]]], list[Any]]:
    """A function that makes a batch of calls on these envs and returns their results in order:
    concurrently when every env is ``concurrent`` (the envs' own ``run_batch`` when they share one,
    else a shared thread pool), else one after another. An ``EnvAtCapacity`` is returned in its
    call's place (the caller defers that episode); other errors raise."""
    batch = getattr(type(envs[0]), "run_batch", None) if envs else None
    if batch is not None and all(type(env) is type(envs[0]) for env in envs):
        return batch  # type: ignore[no-any-return]
    if len(envs) < 2 or not all(getattr(env, "concurrent", False) for env in envs):
        return lambda calls: [_capture(call) for call in calls]
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=64, thread_name_prefix="agilerl-env")
    pool = _POOL

    def run(calls: list[Callable[[], Any]]) -> list[Any]:
        return [f.result() for f in [pool.submit(_capture, call) for call in calls]]

    return run


def _capture(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except EnvAtCapacity as exc:
        return exc


def episode_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Means over episodes of the numbers envs report in ``info["metrics"]`` (0 where one is absent)."""
    per = [t.info.get("metrics") for t in trajs]
    keys = sorted({k for m in per if isinstance(m, dict) for k in m})
    return {k: sum(float(m.get(k, 0.0)) if isinstance(m, dict) else 0.0 for m in per) / len(trajs) for k in keys}


def group_ids(trajs: Sequence[Trajectory], group_size: int) -> torch.Tensor:
    """Rows sharing a prompt (same group of ``group_size`` and identical prompt tokens) get one id."""
    ids: list[int] = []
    for start in range(0, len(trajs), max(group_size, 1)):
        group = trajs[start : start + group_size]
        prompt = group[0].token_ids[: group[0].prompt_len]
        same = all(t.prompt_len == group[0].prompt_len and t.token_ids[: t.prompt_len] == prompt for t in group)
        ids += [start] * len(group) if same else list(range(start, start + len(group)))
    return torch.tensor(ids, dtype=torch.long)


def pad_trajectories(trajs: Sequence[Trajectory], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask``, ``loss_mask`` (policy tokens) and ``turn_index``."""
    width = max(1, max(len(t.token_ids) for t in trajs))
    n = len(trajs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width), dtype=torch.long)
    turn = torch.full((n, width), -1, dtype=torch.long)
    for i, t in enumerate(trajs):
        k = len(t.token_ids)
        ids[i, :k] = torch.tensor(t.token_ids, dtype=torch.long)
        attention[i, :k] = 1
        loss_mask[i, :k] = torch.tensor(t.policy_mask, dtype=torch.long)
        turn[i, :k] = torch.tensor(t.turn_index, dtype=torch.long)
    out = {"input_ids": ids, "attention_mask": attention, "loss_mask": loss_mask, "turn_index": turn}
    if any(t.sampling_logprobs is not None for t in trajs):
        # The sampling engine's log-probs at the policy tokens (NaN where it gave none: weight 1).
        sampled = torch.full((n, width), float("nan"), dtype=torch.float32)
        for i, t in enumerate(trajs):
            where = loss_mask[i].nonzero().squeeze(-1)
            if t.sampling_logprobs is not None and len(t.sampling_logprobs) == len(where):
                sampled[i, where] = torch.tensor(t.sampling_logprobs, dtype=torch.float32)
        out["sampling_logprobs"] = sampled
    return out


def masked_mean_per_row(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over each row's masked tokens (0 for rows with none)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def returns_to_go(rewards: Sequence[float], gamma: float) -> list[float]:
    """``G_t = r_t + gamma * G_{t+1}`` for every turn of one episode."""
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def sequence_mean_loss(
    per_token: torch.Tensor, clipped: torch.Tensor, mask: torch.Tensor, stats: dict[str, float]
) -> tuple[torch.Tensor, dict[str, float]]:
    """Each row's token mean, summed over rows (``optimize`` divides by the step's rows); logs
    ``clip_fraction`` and ``loss``."""
    per_row = masked_mean_per_row(per_token, mask)
    stats["clip_fraction"] = float(masked_mean_per_row(clipped, mask).mean())
    loss_sum = per_row.sum()
    stats["loss"] = float(loss_sum.detach()) / max(len(per_row), 1)
    return loss_sum, stats


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor, clamp: float | None) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate k3 = exp(r) - r - 1 with r = log pi_ref - log pi (>= 0)."""
    diff = ref_logp - logp
    kl = torch.exp(diff) - diff - 1.0
    return kl.clamp(max=clamp) if clamp is not None else kl


def truncated_is_weight(
    log_ratio: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """AgileRL's vLLM importance-sampling weight ``min(exp(log_ratio), cap)`` per token, no gradient.

    ``log_ratio`` is ``log p_policy - log p_engine`` of each sampled token; outside ``mask`` and where it
    is not finite (the engine gave no log-prob) the weight is 1. Also returns ``vllm_is_ratio`` (mean
    weight), ``vllm_is_clamped`` (the share of tokens at the cap) and ``vllm_is_logprob_gap`` (mean
    ``|log_ratio|``) over the masked tokens.
    """
    with torch.no_grad():
        keep = mask.bool() & torch.isfinite(log_ratio)
        log_ratio = torch.where(keep, log_ratio, torch.zeros_like(log_ratio)).float()
        weight = torch.exp(log_ratio).clamp(max=float(cap))
        count = keep.sum().clamp(min=1).float()
        stats = {
            "vllm_is_ratio": float(weight[keep].sum() / count),
            "vllm_is_clamped": float((weight[keep] >= float(cap)).sum() / count),
            "vllm_is_logprob_gap": float(log_ratio.abs()[keep].sum() / count),
        }
    return weight, stats


@dataclass
class PolicyTokens:
    """What every rollout loss starts from (see :meth:`RolloutLLMAlgorithm.policy_tokens`)."""

    #: ``[B, T]`` float: the policy tokens, first column zeroed (nothing predicts a row's first token).
    mask: torch.Tensor
    #: ``[B, T]`` the current policy's log-probs (with gradient).
    logp: torch.Tensor
    #: ``[B, T]`` the sampling policy's log-probs (``old_logprobs``; the current ones, detached, in a single pass).
    old: torch.Tensor
    #: ``[B, T]`` the vLLM importance-sampling weight, or None when it does not apply.
    is_weight: torch.Tensor | None
    #: Stats for the loss's log (the weight's, when it applies).
    stats: dict[str, float]

    def weighted(self, per_token: torch.Tensor) -> torch.Tensor:
        """``per_token`` (the policy term) times the importance-sampling weight, when there is one."""
        return per_token if self.is_weight is None else per_token * self.is_weight


class RolloutLLMAlgorithm(LLMAlgorithm):
    """Rollout collection, evaluation and the iteration loop; subclasses give advantages and loss."""

    def __init__(
        self,
        spec: Any,
        *,
        tokenizer: Any,
        model: Any = None,
        reference_model: Any = None,
        index: int = 0,
        device: str | torch.device = "cpu",
        rollout_mode: str = "colocated",
        seed: int | None = None,
    ) -> None:
        if rollout_mode not in ("", "colocated"):
            raise GenerationError(
                f"training.rollout_mode: {rollout_mode!r} (dedicated rollout engines) is not supported; "
                "use rollout_mode: colocated"
            )
        super().__init__(
            spec, tokenizer=tokenizer, model=model, reference_model=reference_model, index=index, device=device
        )
        #: Seeds which prompts each iteration draws (the run's seed + index when built for a run).
        self.rollout_seed = int(seed if seed is not None else getattr(spec, "seed", 0))
        self._backend: GenerationBackend | None = None
        self.last_eval: dict[str, float] = {}
        #: The completions sampled for the log this iteration (``log_completions_steps``), for the strategy.
        self.pending_completions: list[dict[str, Any]] | None = None

    # --- generation ---------------------------------------------------------------------------
    @property
    def stop_ids(self) -> list[int]:
        """Token ids that end a reply: the tokenizer's eos and end-of-turn markers, the model's
        ``generation_config.eos_token_id`` and the spec's ``eos_token_id``."""
        if getattr(self, "_stop_ids", None) is None:
            ids = stop_token_ids(self.tokenizer)
            config = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
            extra = getattr(self.spec, "eos_token_id", None)
            for value in (config, extra):
                for tid in value if isinstance(value, list) else [value]:
                    if tid is not None and int(tid) not in ids:
                        ids.append(int(tid))
            self._stop_ids = ids
        return self._stop_ids

    def backend(self) -> GenerationBackend:
        """The generation backend (built on first use; see ``generation_backend``)."""
        if self._backend is None:
            lora = getattr(self.spec, "lora_config", None)
            self._backend = select_backend(
                self.spec,
                self.model,
                self.tokenizer,
                stop_ids=self.stop_ids,
                device=str(self.device),
                lora_rank=lora.lora_r if lora is not None else None,
            )
        return self._backend

    def sampling(self, *, greedy: bool = False) -> SamplingConfig:
        return SamplingConfig.from_spec(self.spec, greedy=greedy)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.stop_ids[0])

    def rollout(self, make_harness: Callable[[], RolloutHarness], seeds: Sequence[int], *, greedy: bool = False,
                generation_seed: int | None = None) -> list[Trajectory]:  # fmt: skip
        """One episode per seed with fresh harnesses (closed afterwards)."""
        backend = self.backend()
        backend.sync_weights(self.model)
        harnesses = [make_harness() for _ in seeds]
        for h in harnesses:  # the ids generation stops on (eos_token_id, generation_config) end replies there too
            h.stop_ids = set(h.stop_ids) | set(self.stop_ids)
        logprobs = not greedy and self.importance_sampling(backend)
        try:
            trajs = collect(harnesses, backend, self.sampling(greedy=greedy), seeds=seeds,
                            generation_seed=generation_seed, logprobs=logprobs)  # fmt: skip
            scorer = getattr(harnesses[0].env, "batch_reward", None) if harnesses else None
            if scorer is not None:  # batched reward sources (reward_funcs, reward_model): the whole batch at once
                scorer.score(trajs)
            return trajs
        finally:
            for h in harnesses:
                h.close()

    def importance_sampling(self, backend: GenerationBackend | None = None) -> bool:
        """Whether ``vllm_importance_sampling_correction`` applies: on (or unset, AgileRL's default) and the
        colocated vLLM engine samples (it returns each sampled token's log-prob)."""
        backend = backend if backend is not None else self.backend()
        wanted = bool(getattr(self.spec, "importance_sampling_correction", False))
        return wanted and backend.name == "vllm" and hasattr(backend, "generate_with_logprobs")

    def _iteration_seeds(self, count: int) -> list[int]:
        # A function of (seed, steps): resuming from a checkpoint replays the same prompts.
        base = (self.rollout_seed * 1_000_003 + self.steps * 104_729) % 2**31
        return [(base + i * 2_654_435_761) % 2**31 for i in range(count)]

    # --- one iteration -------------------------------------------------------------------------
    def episodes_per_iteration(self) -> tuple[list[int], int]:
        """(env seeds, completions per seed): the spec's ``group_size`` (GRPO's group; 1 without one)."""
        return self._iteration_seeds(int(self.spec.batch_size)), int(getattr(self.spec, "group_size", 1))

    def learn_iteration(self, envs: Any) -> dict[str, float]:
        """Collect a batch of episodes from ``envs.make_train`` and take the optimizer steps."""
        t0 = time.perf_counter()
        self.maybe_refresh_reference()  # before the reference log-probs of this iteration
        seeds, group_size = self.episodes_per_iteration()
        all_seeds = [s for s in seeds for _ in range(group_size)]
        trajs = self.rollout(envs.make_train, all_seeds, generation_seed=all_seeds[0] if all_seeds else None)
        t_rollout = time.perf_counter() - t0
        batch = pad_trajectories(trajs, self.pad_id)
        if group_size > 1:
            # Each group's prompt runs once in the loss's forward passes (see rollout.kv).
            batch["prefix_len"] = torch.tensor([t.prompt_len for t in trajs], dtype=torch.long)
            batch["group_id"] = group_ids(trajs, group_size)
        rewards = torch.tensor([t.total_reward for t in trajs], dtype=torch.float32)
        extra = self.advantages(trajs, rewards, group_size)
        keep = extra.pop("keep", None)
        batch.update(extra)
        if completions_due(self.spec, self.steps):  # log_completions_steps: a readable sample of the batch
            self.pending_completions = completion_records(
                trajs, self.tokenizer, advantages=extra.get("advantages"), loss_mask=batch["loss_mask"],
                step=self.steps, agent=self.index, count=int(getattr(self.spec, "log_completions_count", 8)),
            )  # fmt: skip
        masked = None
        if getattr(self.spec, "mask_truncated_completions", False):
            # TRL's mask_truncated_completions: a reply cut at the budget counted in its group's
            # advantages above, but none of its tokens train.
            masked = torch.tensor([t.cut_off for t in trajs], dtype=torch.bool)
            batch["loss_mask"] = batch["loss_mask"] * (~masked).long().unsqueeze(-1)
        dropped = 0.0
        if keep is not None:
            # filter_zero_adv: completions without signal leave the batch (the loss averages over the rest).
            dropped = 1.0 - float(keep.float().mean())
            batch = {k: v[keep] for k, v in batch.items()}
        stats = self.update(batch) if len(batch["input_ids"]) else {"loss": 0.0, "optimizer_steps": 0.0}
        if keep is not None:
            stats["filtered"] = dropped
        if masked is not None:
            stats["truncated_masked"] = float(masked.float().mean())
        n_tokens = float(sum(t.num_policy_tokens for t in trajs))
        stats.update(
            reward=float(rewards.mean()),
            reward_max=float(rewards.max()),
            completion_tokens=n_tokens / max(len(trajs), 1),
            # Completions cut at the token budget (no stop token), and episodes cut by the turn or
            # context limit: different things, both worth watching.
            truncated=float(sum(t.cut_off for t in trajs)) / max(len(trajs), 1),
            episode_truncated=float(sum(t.truncated for t in trajs)) / max(len(trajs), 1),
            rollout_s=t_rollout,
            iteration_s=time.perf_counter() - t0,
        )
        stats.update(episode_metrics(trajs))
        return stats

    def clip_range(self) -> float | tuple[float, float]:
        """``clip_coef`` as the loss takes it: the (mutable) scalar, or the spec's ``(low, high)`` pair."""
        value = self.spec.clip_coef
        return float(value) if isinstance(value, (int, float)) else value  # type: ignore[no-any-return]

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Old and reference log-probs (when needed), then ``update_epochs`` passes of ``optimize``."""
        return self._update(batch)

    def _update(self, batch: dict[str, torch.Tensor], **optimize_kwargs: Any) -> dict[str, float]:
        single_pass = int(self.spec.update_epochs) == 1 and (
            self.mini_batch_rows is None or self.mini_batch_rows >= len(batch["input_ids"])
        )
        with torch.no_grad():
            if not single_pass:
                # Several optimizer steps per batch: the ratio needs the sampling policy's log-probs.
                batch["old_logprobs"] = self._chunked_logprobs(batch, reference=False)
            if self.spec.beta > 0:
                batch["ref_logprobs"] = self._chunked_logprobs(batch, reference=True)
            if "sampling_logprobs" in batch:
                self._importance_log_ratio(batch)
        stats: dict[str, float] = {}
        for _ in range(int(self.spec.update_epochs)):
            stats = self.optimize(batch, self.loss, **optimize_kwargs)
        return stats

    def logprobs(self, batch: Mapping[str, torch.Tensor], *, reference: bool = False, **kwargs: Any) -> torch.Tensor:
        """Per-token log-probs of the policy (or reference); shared prompts run once per group, unless
        ``use_sequence_packing`` packs whole sequences instead."""
        if "group_id" not in batch or self.sequence_packing or not supports_shared_prefix(self.model):
            return super().logprobs(batch, reference=reference, **kwargs)
        args = (batch["input_ids"], batch["attention_mask"], batch["loss_mask"], batch["prefix_len"], batch["group_id"])
        kwargs.setdefault("chunk_rows", self.logit_chunk_rows)
        if reference:
            with self.reference() as ref:
                return shared_prefix_logprobs(ref, *args, **kwargs)
        return shared_prefix_logprobs(self.model, *args, **kwargs)

    def _importance_log_ratio(self, batch: dict[str, torch.Tensor]) -> None:
        """``batch["is_log_ratio"]``: log p_policy - log p_vLLM of each sampled token, both of the model's own
        distribution (temperature 1: vLLM's sampled-token log-probs are taken before its temperature,
        top-k and top-p). At temperature 1 the loss takes it from the sampling policy's log-probs (no
        extra pass); at another temperature one more forward pass, without gradient, gives them."""
        if self._logit_temperature() == 1.0:
            if "old_logprobs" in batch:
                batch["is_log_ratio"] = batch["old_logprobs"] - batch["sampling_logprobs"]
            return  # single pass: the loss's own log-probs, detached, are the sampling policy's
        policy = self._chunked_logprobs(batch, reference=False, temperature=1.0)
        batch["is_log_ratio"] = policy - batch["sampling_logprobs"]

    def policy_tokens(self, batch: Mapping[str, torch.Tensor], logp: torch.Tensor) -> PolicyTokens:
        """The loss's starting point: the policy-token mask, ``logp``, the sampling policy's log-probs and
        (``vllm_importance_sampling_correction``) the importance-sampling weight of each token."""
        mask = batch["loss_mask"].float()
        mask[:, 0] = 0.0
        old = batch["old_logprobs"] if "old_logprobs" in batch else logp.detach()
        log_ratio = batch.get("is_log_ratio")
        if log_ratio is None and "sampling_logprobs" in batch:  # temperature 1, single pass
            log_ratio = old - batch["sampling_logprobs"]
        if log_ratio is None:
            return PolicyTokens(mask, logp, old, None, {})
        weight, stats = truncated_is_weight(log_ratio, mask, float(self.spec.vllm_importance_sampling_cap))
        return PolicyTokens(mask, logp, old, weight, stats)

    def _chunked_logprobs(
        self, batch: dict[str, torch.Tensor], *, reference: bool, temperature: float | None = None
    ) -> torch.Tensor:
        toggle = has_dropout(self.model)
        if toggle:
            self.model.eval()  # no dropout: these are the sampling/reference distributions
        n = len(batch["input_ids"])
        size = self.micro_batch_rows or n
        out = torch.zeros(batch["input_ids"].shape, dtype=torch.float32)
        rank, world = distributed.context()  # several processes: only the rows this one trains on
        # (under FSDP every process runs every forward: all rows)
        split = world > 1 and not getattr(self.model, "agilerl_fsdp", False)
        for lo, hi in distributed.local_rows(n, self.mini_batch_rows, rank, world) if split else [(0, n)]:
            for start in range(lo, hi, size):
                part = self.to_device(trim_padding(slice_batch(batch, start, min(start + size, hi))))
                lp = self.logprobs(part, reference=reference,
                                   temperature=self._logit_temperature() if temperature is None else temperature)  # fmt: skip
                out[start : min(start + size, hi), : lp.shape[1]] = lp.cpu()
        if toggle:
            self.model.train()
        return out

    def with_kl(
        self, per_token: torch.Tensor, logp: torch.Tensor, batch: Mapping[str, torch.Tensor], mask: torch.Tensor,
        stats: dict[str, float], clamp: float | None,
    ) -> torch.Tensor:  # fmt: skip
        """``per_token`` plus ``beta`` x the k3 KL to the reference (when there is one); logs ``kl``."""
        if self.spec.beta > 0 and "ref_logprobs" in batch:
            kl = k3_kl(logp, batch["ref_logprobs"], clamp)
            stats["kl"] = float(masked_mean_per_row(kl.detach(), mask).mean())
            return per_token + float(self.spec.beta) * kl
        return per_token

    def _logit_temperature(self) -> float:
        # Score tokens under the distribution they were sampled from (as TRL does).
        return float(self.spec.temperature) if self.spec.temperature > 0 else 1.0

    # --- subclass parts ------------------------------------------------------------------------
    def advantages(
        self, trajs: Sequence[Trajectory], rewards: torch.Tensor, group_size: int
    ) -> dict[str, torch.Tensor]:
        """Tensors added to the batch: ``advantages`` of shape ``[N]`` or ``[N, T]``."""
        raise NotImplementedError

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss summed over the micro-batch's rows (``optimize`` divides by the mini-batch rows)."""
        raise NotImplementedError

    # --- evaluation ----------------------------------------------------------------------------
    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None,
             samples_per_prompt: int = 0, greedy: bool = True, prompts: int | None = None) -> float:  # fmt: skip
        """Mean episode return on ``prompts`` held-out prompts (default ``loop x batch_size``; seeds 0, 1, ...:
        with a dataset, held-out rows 0, 1, ...), the run's fitness. Greedy unless ``greedy`` is false.

        ``last_eval`` names each score by its decoding: ``eval_greedy_reward`` / ``eval_greedy_success``,
        and with ``samples_per_prompt`` (``training.eval_samples_per_task``) > 0, or ``greedy`` false,
        ``eval_sampled_reward`` / ``eval_sampled_success``: that many samples per prompt at the rollout
        temperature, averaged per prompt. ``eval_reward`` / ``eval_success`` repeat the one the fitness
        is. Each has a ``_stderr``: the standard error of the mean over prompts (std over prompts /
        sqrt(prompts)), the noise to read a gain against (docs/llm.md). ``eval_prompts`` is the count.
        """
        n = max(1, int(prompts) if prompts is not None else int(loop) * int(self.spec.batch_size))
        seeds = list(range(n))
        self.last_eval = {"eval_prompts": float(n)}
        if greedy:
            self.last_eval.update(_scores(self.rollout(env.make_eval, seeds, greedy=True), n, 1, "eval_greedy"))
        k = max(int(samples_per_prompt), 0 if greedy else 1)
        if k:
            trajs = self.rollout(env.make_eval, [s for s in seeds for _ in range(k)], greedy=False,
                                 generation_seed=0 if seed is None else int(seed))  # fmt: skip
            self.last_eval.update(_scores(trajs, n, k, "eval_sampled"))
        head = "eval_greedy" if greedy else "eval_sampled"
        for metric in ("reward", "reward_stderr", "success", "success_stderr"):
            if f"{head}_{metric}" in self.last_eval:
                self.last_eval[f"eval_{metric}"] = self.last_eval[f"{head}_{metric}"]
        return self.last_eval["eval_reward"]

    # --- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["rollout_seed"] = self.rollout_seed
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.rollout_seed = int(state.get("rollout_seed", self.rollout_seed))

    # --- population ----------------------------------------------------------------------------
    def clone(self, index: int | None = None) -> RolloutLLMAlgorithm:
        backend, self._backend = self._backend, None
        try:
            twin = super().clone(index)
        finally:
            self._backend = backend
        # A vLLM engine holds the GPU: clones share it (weights are synced before every rollout).
        if backend is not None and getattr(backend, "name", "") in ("vllm", "vllm_server"):
            twin._backend = backend  # type: ignore[attr-defined]
        return twin  # type: ignore[return-value]


def _scores(trajs: Sequence[Trajectory], prompts: int, k: int, prefix: str) -> dict[str, float]:
    """Mean return (and success, where episodes report it) over ``prompts`` prompts of ``k`` episodes
    each (in prompt order), with the standard error of each mean over prompts."""

    def mean_and_stderr(values: list[float]) -> tuple[float, float]:
        per_prompt = [sum(values[i * k : (i + 1) * k]) / k for i in range(prompts)]
        mean = sum(per_prompt) / prompts
        var = sum((v - mean) ** 2 for v in per_prompt) / prompts
        return mean, math.sqrt(var / prompts)

    out: dict[str, float] = {}
    out[f"{prefix}_reward"], out[f"{prefix}_reward_stderr"] = mean_and_stderr([t.total_reward for t in trajs])
    if trajs and all("success" in t.info for t in trajs):
        successes = [float(t.info["success"]) for t in trajs]
        out[f"{prefix}_success"], out[f"{prefix}_success_stderr"] = mean_and_stderr(successes)
    return out


__all__ = [
    "PolicyTokens",
    "RolloutLLMAlgorithm",
    "collect",
    "env_runner",
    "k3_kl",
    "masked_mean_per_row",
    "pad_trajectories",
    "returns_to_go",
    "truncated_is_weight",
]
