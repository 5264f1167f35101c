"""A prompt-dependent task generated locally, and a held-out exact-match score to measure learning on it.

The "say eight" example's answer never depends on the prompt, so a policy can score on it while
ignoring its input. Reversing a string of digits cannot be solved that way: the prompt ``reverse 413``
has the answer ``314``, and each of the ``10 ** length`` prompts has its own. A tiny model
(:func:`agilerl_plugin_llm.testing.build_tiny_model`) learns it from an SFT warm start in seconds on
a CPU, which makes it the task the learning tests, the example recipe (``examples/llm/reverse``) and
``benchmarks/llm/bench_learning.py`` share.

Rows carry the columns both trainers read: ``prompt`` and ``response`` (SFT, ``env_type: dataset``)
and ``answer`` (the rollout env's rubric). The held-out set is the run's own split
(``environment.train_test_split`` with ``training.seed``): :func:`heldout_rows` takes it the way the
rollout env does, so a score measured here is measured on the prompts the run never trained on.

From a shell::

    python -m agilerl_plugin_llm.tasks reverse data.jsonl --rows 512 --seed 0
    python -m agilerl_plugin_llm.tasks score MODEL_DIR data.jsonl --train-test-split 0.75 --seed 0
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agilerl_plugin_llm.rollout.sources import split_rows

__all__ = ["ExactMatch", "exact_match", "heldout_rows", "read_rows", "reverse_rows", "write_rows"]

#: The prompt's wording; the digits follow it.
REVERSE_PREFIX = "reverse "


def reverse_rows(n: int, *, length: int = 3, seed: int = 0) -> list[dict[str, str]]:
    """``n`` distinct rows ``{prompt: "reverse 413", response: "314", answer: "314"}`` (seeded).

    :param n: rows to draw; at most ``10 ** length`` (every string of ``length`` digits once).
    :param length: digits per string.
    :param seed: which strings are drawn, and in which order.
    """
    space = 10**length
    if not 1 <= n <= space:
        raise ValueError(f"n: between 1 and {space} rows of {length} digits, got {n}")
    numbers = random.Random(seed).sample(range(space), n)
    rows = []
    for number in numbers:
        digits = str(number).zfill(length)
        rows.append({"prompt": REVERSE_PREFIX + digits, "response": digits[::-1], "answer": digits[::-1]})
    return rows


def write_rows(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` as JSON lines to ``path`` (parents created)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path``."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def heldout_rows(rows: list[dict[str, Any]], train_test_split: float | None, seed: int | None) -> list[dict[str, Any]]:
    """The rows a run with this ``environment.train_test_split`` and ``training.seed`` holds out
    (both the rollout env and the SFT dataset env split this way)."""
    return split_rows(rows, train_test_split, seed)[1]


@dataclass(frozen=True)
class ExactMatch:
    """A held-out exact-match score: the mean over ``n`` prompts and its standard error."""

    mean: float
    stderr: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.3f} +/- {self.stderr:.3f} (n={self.n})"


def exact_match(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], *, max_new_tokens: int = 8, batch_size: int = 64
) -> ExactMatch:
    """Greedy exact match of ``model`` on ``rows``: the reply, stripped, equals the row's ``answer``.

    ``model`` is a loaded causal LM or a model directory (then ``tokenizer`` may be ``None``). The
    prompt is the user turn rendered with the tokenizer's chat template, as the rollout env renders it.
    The standard error is the binomial one, ``sqrt(p (1 - p) / n)``.
    """
    import torch

    if isinstance(model, (str, Path)):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
        model = AutoModelForCausalLM.from_pretrained(model)
    was_training = model.training
    model.eval()
    stop = [tokenizer.eos_token_id, *tokenizer.convert_tokens_to_ids(["<|im_end|>"])]
    stop = [s for s in stop if s is not None and s != tokenizer.unk_token_id]
    hits = 0
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            texts = [
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True
                )
                for r in chunk
            ]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(
                    **enc.to(model.device), max_new_tokens=max_new_tokens, do_sample=False,
                    eos_token_id=stop, pad_token_id=tokenizer.pad_token_id,
                )  # fmt: skip
            replies = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            hits += sum(reply.strip() == str(r["answer"]).strip() for reply, r in zip(replies, chunk, strict=True))
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    n = len(rows)
    p = hits / max(n, 1)
    return ExactMatch(p, math.sqrt(p * (1 - p) / max(n, 1)), n)


def main(argv: list[str] | None = None) -> int:
    """``reverse OUT.jsonl`` writes the task; ``score MODEL_DIR DATA.jsonl`` prints held-out exact match."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agilerl_plugin_llm.tasks")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("reverse", help="write N distinct 'reverse 413' -> '314' rows as JSON lines")
    gen.add_argument("out")
    gen.add_argument("--rows", type=int, default=512)
    gen.add_argument("--length", type=int, default=3)
    gen.add_argument("--seed", type=int, default=0)
    score = sub.add_parser("score", help="greedy exact match of a model directory on a run's held-out rows")
    score.add_argument("model")
    score.add_argument("data")
    score.add_argument("--train-test-split", type=float, default=None, help="the run's environment.train_test_split")
    score.add_argument("--seed", type=int, default=0, help="the run's training.seed")
    args = parser.parse_args(argv)
    if args.command == "reverse":
        path = write_rows(reverse_rows(args.rows, length=args.length, seed=args.seed), args.out)
        print(f"{args.rows} rows written to {path}")
        return 0
    rows = heldout_rows(read_rows(args.data), args.train_test_split, args.seed)
    print(f"held-out exact match (greedy): {exact_match(args.model, None, rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
