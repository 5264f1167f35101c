"""What ``use_sequence_packing`` saves: one training log-prob step (forward and backward) on a batch
with much padding, padded and packed, on the CPU::

    python -m agilerl_plugin_llm.packing_bench --rows 16 --shortest 64 --longest 1024

The batch: ``rows`` sequences whose lengths step evenly from ``shortest`` to ``longest`` (right-padded
to the longest, as a rollout batch of episodes of different lengths is), the second half of each
scored. The model: a 4-layer, 256-wide Llama (8 heads of 32) with a 32000-token vocabulary, float32,
sdpa attention, one thread. Steps alternate between the two modes; the figure is each mode's median
CPU time per step (the process's, so other work on a shared machine sways it less than wall time).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any


def padded_batch(rows: int, shortest: int, longest: int, vocab: int, seed: int = 0) -> tuple[Any, Any, Any]:
    """``input_ids``, ``attention_mask``, ``loss_mask`` of ``rows`` right-padded sequences."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    lengths = [round(shortest + (longest - shortest) * i / max(rows - 1, 1)) for i in range(rows)]
    ids = torch.zeros((rows, longest), dtype=torch.long)
    mask = torch.zeros_like(ids)
    loss = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(1, vocab, (n,), generator=gen)
        mask[i, :n] = 1
        loss[i, n // 2 : n] = 1
    return ids, mask, loss


def measure(
    rows: int = 16, shortest: int = 64, longest: int = 1024, *, repeats: int = 3, hidden: int = 256, layers: int = 4,
    vocab: int = 32000,
) -> dict[str, float]:  # fmt: skip
    """Tokens computed and median seconds per step, padded and packed; the largest log-prob difference."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agilerl_plugin_llm.algorithms.base import (
        sequence_logprobs,  # deferred: torch, imported when the measurement runs
    )
    from agilerl_plugin_llm.packing import pack_rows  # deferred: torch, imported when the measurement runs

    torch.set_num_threads(1)
    torch.manual_seed(0)
    heads = max(1, hidden // 32)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=max(longest, 64))  # fmt: skip
    model = LlamaForCausalLM(config)  # transformers' default attention: sdpa
    ids, mask, loss_mask = padded_batch(rows, shortest, longest, vocab)
    packed = pack_rows(ids, mask)

    def step(pack: bool) -> tuple[float, Any]:
        model.zero_grad(set_to_none=True)
        start = time.process_time()  # CPU time of this one-thread process: less swayed by a busy machine
        logp = sequence_logprobs(model, ids, mask, loss_mask, pack=pack)
        (-logp.sum()).backward()
        return time.process_time() - start, logp.detach()

    times: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, Any] = {}
    for _ in range(1 + repeats):  # the first round warms up (not counted)
        for pack in (False, True):
            seconds, outputs[pack] = step(pack)
            times[pack].append(seconds)
    padded_s, packed_s = (statistics.median(times[p][1:]) for p in (False, True))
    return {
        "real_tokens": float(mask.sum()),
        "padded_tokens": float(ids.numel()),
        "packed_tokens": float(packed.computed_tokens),
        "packed_rows": float(packed.input_ids.shape[0]),
        "padded_s": padded_s,
        "packed_s": packed_s,
        "max_logprob_diff": float((outputs[False] - outputs[True]).abs().max()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agilerl_plugin_llm.packing_bench")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--shortest", type=int, default=64)
    parser.add_argument("--longest", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    r = measure(args.rows, args.shortest, args.longest, repeats=args.repeats)
    padding = 1.0 - r["real_tokens"] / r["padded_tokens"]
    print(f"{args.rows} sequences of {args.shortest}..{args.longest} tokens: {int(r['real_tokens'])} real tokens, "
          f"{padding:.0%} of the padded batch is padding")  # fmt: skip
    print(f"  padded: {int(r['padded_tokens'])} tokens computed ({args.rows} rows), {r['padded_s']:.3f} CPU s per step")
    print(f"  packed: {int(r['packed_tokens'])} tokens computed ({int(r['packed_rows'])} rows), "
          f"{r['packed_s']:.3f} CPU s per step ({r['padded_s'] / r['packed_s']:.2f}x faster)")  # fmt: skip
    print(f"  largest |log-prob packed - padded|: {r['max_logprob_diff']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
