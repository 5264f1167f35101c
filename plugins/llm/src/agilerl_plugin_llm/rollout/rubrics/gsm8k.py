"""GSM8K's reward: the final number right (1) plus the reply's format (1), at most 2.

A GSM8K ``answer`` ends with ``#### <number>``. The prompt (the catalog's template) asks the model to
reason inside ``<think>...</think>`` and give the number inside ``<answer>...</answer>``; the reply
starts after the template's ``<think>`` prefix.
"""

from __future__ import annotations

import re

_GOLD = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?[\d,]*\.?\d+")
_FORMAT = re.compile(r"^[\s\S]*?</think>\s*<answer>[\s\S]*?</answer>\s*$")


def _number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "").rstrip(".") if found else None


def gold_answer(answer: str) -> str | None:
    """The number after ``####`` in a GSM8K answer (None if there is none)."""
    match = _GOLD.search(str(answer))
    return match.group(1).replace(",", "") if match else None


def correctness(completion: str, answer: str) -> float:
    """1 when the last number inside the reply's ``<answer>`` block equals the gold number."""
    gold = gold_answer(answer)
    block = _ANSWER.search(completion)
    if gold is None or block is None:
        return 0.0
    predicted = _number(block.group(1))
    try:
        return 1.0 if predicted is not None and float(predicted) == float(gold) else 0.0
    except ValueError:
        return 0.0


def format_reward(completion: str) -> float:
    """1 when the reply closes its reasoning and then gives one ``<answer>`` block."""
    return 1.0 if _FORMAT.match(completion.strip()) else 0.0


def reward_fn(completion: str, answer: str, question: str) -> float:
    """Correctness plus format (0, 1 or 2)."""
    return correctness(completion, answer) + format_reward(completion)
