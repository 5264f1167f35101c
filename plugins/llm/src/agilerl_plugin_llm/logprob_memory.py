"""Peak memory of one log-prob forward + backward, chunked (``use_liger_loss``) or not, on a model
with a large vocabulary. Each mode runs in a fresh subprocess; the figure is the rise of the
process's peak resident memory (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``) over the
step. The subprocesses run with glibc's ``MALLOC_MMAP_THRESHOLD_`` at 64 KiB, so every tensor above
that is its own mapping, returned on free: resident memory then follows the live tensors instead of
what the heap keeps. It includes a fixed ~80 MiB (autograd and thread start-up on the first
backward)::

    python -m agilerl_plugin_llm.logprob_memory --vocab 128256 --tokens 2048

The model: a 2-layer, 64-wide Llama with the given vocabulary (Llama 3's is 128256), LoRA on its
attention, ``tokens`` scored tokens (a batch of 4 rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(vocab: int, tokens: int, chunked: bool, rows: int = 4, chunk_rows: int | None = None) -> dict[str, float]:
    """Run one step in this process; return its peak memory rise (MiB) and the log-prob sum."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from agilerl_plugin_llm.algorithms.base import (
        sequence_logprobs,  # deferred: torch, imported when the measurement runs
    )
    from agilerl_plugin_llm.logprobs import auto_chunk_rows  # deferred: torch, imported when the measurement runs

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    width = tokens // rows + 1
    ids = torch.randint(0, vocab, (rows, width))
    mask = torch.ones_like(ids)
    chunk = (chunk_rows or auto_chunk_rows(vocab)) if chunked else None
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kib("VmRSS")
    logp = sequence_logprobs(model, ids, mask, mask, chunk_rows=chunk)
    logp.sum().backward()
    peak = _status_kib("VmHWM")
    return {"peak_mib": (peak - before) / 1024, "logprob_sum": float(logp.sum()), "chunk_rows": chunk or 0}


def compare(vocab: int, tokens: int, chunk_rows: int | None = None) -> dict[str, dict[str, float]]:
    """Both modes, each in its own subprocess."""
    out = {}
    for mode in ("unchunked", "chunked"):
        cmd = [sys.executable, "-m", "agilerl_plugin_llm.logprob_memory", "--vocab", str(vocab),
               "--tokens", str(tokens), "--one", mode, *(["--chunk-rows", str(chunk_rows)] if chunk_rows else [])]  # fmt: skip
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        result = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
        out[mode] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agilerl_plugin_llm.logprob_memory")
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--chunk-rows", type=int, default=None, help="default: the ~256 MB tile's rows")
    parser.add_argument("--one", choices=["chunked", "unchunked"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.vocab, args.tokens, args.one == "chunked", chunk_rows=args.chunk_rows)))
        return 0
    result = compare(args.vocab, args.tokens, args.chunk_rows)
    for mode, row in result.items():
        print(f"{mode:>10}: peak +{row['peak_mib']:.0f} MiB (chunk_rows {int(row['chunk_rows'])}), "
              f"sum of log-probs {row['logprob_sum']:.4f}")  # fmt: skip
    ratio = result["unchunked"]["peak_mib"] / max(result["chunked"]["peak_mib"], 1e-9)
    print(f"vocab {args.vocab}, {args.tokens} scored tokens: chunked peak is 1/{ratio:.1f} of unchunked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
