"""Batched reward functions for the "say the magic number" task, the TRL way (``environment.reward_funcs``).

Each is called once per batch, by keyword: ``prompts``, ``completions``, ``completion_ids`` and every
dataset column (here ``question`` and ``answer``) as lists; each returns one float per completion
(``None`` where it does not apply). Name them as ``examples/llm/say_word_rewards.py:says_answer``
(a file) or ``say_word_rewards:says_answer`` (a module importable from the working directory).
"""

from __future__ import annotations

from typing import Any


def says_answer(completions: list[str], answer: list[str], **kwargs: Any) -> list[float]:
    """How much of each reply is the answer (as ``say_word_rubric.reward_fn``, batched)."""
    out = []
    for completion, word in zip(completions, answer, strict=True):
        text = "".join(ch for ch in completion.lower() if ch.isalnum())
        out.append(min(1.0, text.count(word.lower()) * len(word) / len(text)) if text else 0.0)
    return out


def not_empty(completion_ids: list[list[int]], **kwargs: Any) -> list[float | None]:
    """-1 for an empty reply; not applicable (None) otherwise."""
    return [-1.0 if not ids else None for ids in completion_ids]
