"""``use_liger_loss`` (AgileRL's default, true) and ``chunk_rows``: log-probs computed from ``lm_head`` in
chunks of rows under activation checkpointing, so the ``[tokens, vocab]`` logits are never all in
memory. Same values and gradients as the unchunked computation; peak memory measured by
``python -m agilerl_plugin_llm.logprob_memory`` (figures in docs/llm.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.models import load_manifest
from agilerl_plugin_llm.algorithms.base import sequence_logprobs
from agilerl_plugin_llm.logprobs import auto_chunk_rows, token_logprobs
from agilerl_plugin_llm.model import load_model

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"


def test_chunked_token_logprobs_match_values_and_gradients() -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 1000)
    hidden = torch.randn(300, 16, requires_grad=True)
    targets = torch.randint(0, 1000, (300,))
    results = []
    for chunk in (None, 64, 7):
        head.zero_grad()
        hidden.grad = None
        logp = token_logprobs(hidden, head, targets, temperature=0.7, chunk_rows=chunk)
        (logp * torch.linspace(-1, 1, 300)).sum().backward()
        results.append((logp.detach(), hidden.grad.clone(), head.weight.grad.clone()))
    reference = results[0]
    for got in results[1:]:
        for a, b in zip(reference, got, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    expected = torch.log_softmax(head(hidden) / 0.7, -1).gather(-1, targets[:, None]).squeeze(-1)
    torch.testing.assert_close(reference[0], expected, rtol=1e-5, atol=1e-5)


def test_chunked_logits_are_never_all_built(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir, lora_config={"lora_r": 4, "lora_dropout": 0.0})
    ids = torch.randint(6, 300, (3, 20))
    mask = torch.ones_like(ids)
    rows: list[int] = []
    head = model.get_base_model().lm_head
    handle = head.register_forward_hook(lambda _m, args, _out: rows.append(int(args[0].shape[0])))
    try:
        full = sequence_logprobs(model, ids, mask, mask)
        assert rows == [3 * 19]  # every scored token's logits at once
        rows.clear()
        chunked = sequence_logprobs(model, ids, mask, mask, chunk_rows=8)
        (chunked * 0.1).sum().backward()
    finally:
        handle.remove()
    # Forward: ceil(57 / 8) chunks of at most 8 rows; the backward rebuilds them one chunk at a time.
    assert max(rows) == 8 and sum(rows) == 2 * 57, rows
    torch.testing.assert_close(full, chunked.detach(), rtol=1e-5, atol=1e-6)


def rollout_manifest(model_dir: Path, **algo: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "group_size": 2, "max_output_tokens": 4,
                      "gradient_checkpointing": False, **algo},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 128},
        "environment": {"env_type": "reasoning", "dataset_path": str(EXAMPLES / "say_eight.jsonl"),
                        "rubric_file_path": str(EXAMPLES / "say_word_rubric.py")},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "rows"),
    [({}, auto_chunk_rows(400)), ({"use_liger_loss": False}, None), ({"chunk_rows": 16}, 16),
     ({"use_liger_loss": False, "chunk_rows": 16}, 16)],
)  # fmt: skip
def test_the_fields_pick_the_chunk_size(tiny_model_dir: Path, fields: dict[str, Any], rows: int | None) -> None:
    from agilerl.strategies import select_strategy
    from agilerl_plugin_llm.rollout.grpo import GRPO

    m = load_manifest(rollout_manifest(tiny_model_dir, **fields))
    envs = select_strategy(m.algorithm).make_env(m, seed=0)
    agent = GRPO(m.algorithm, tokenizer=envs.tokenizer)
    assert agent.logit_chunk_rows == rows
    # AgileRL's automatic tile: ~256 MB of float32 logits, 128 to 4096 rows.
    assert (auto_chunk_rows(400), auto_chunk_rows(128256), auto_chunk_rows(10**7)) == (4096, 523, 128)
    trajs = agent.rollout(envs.make_train, [0, 0, 1, 1])
    from agilerl_plugin_llm.rollout.base import pad_trajectories

    batch = pad_trajectories(trajs, agent.pad_id)
    chunked = agent.logprobs(batch, chunk_rows=3)
    torch.testing.assert_close(agent.logprobs(batch), chunked, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures Linux's VmHWM")
def test_chunked_peak_memory_is_a_fraction_of_the_unchunked_one() -> None:
    from agilerl_plugin_llm.logprob_memory import compare

    # 1024 scored tokens of a 32768-token vocabulary: 128 MiB of float32 logits per copy.
    result = compare(32768, 1024, chunk_rows=128)
    chunked, unchunked = result["chunked"], result["unchunked"]
    assert chunked["logprob_sum"] == pytest.approx(unchunked["logprob_sum"], rel=1e-5)
    assert unchunked["peak_mib"] > 256, result  # at least two [tokens, vocab] float32 copies
    assert chunked["peak_mib"] < 0.5 * unchunked["peak_mib"], result
