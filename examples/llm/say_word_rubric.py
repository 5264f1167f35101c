"""Rubric for the "say the magic number" task: how much of the reply is the answer.

Reward = characters of the reply (spaces and punctuation aside) that belong to occurrences of the
answer, over all its characters: "eight eight" scores 1.0, "eight cat" 0.625, "cat" 0.0. Partial
credit gives a random policy a signal to climb from.

A rubric is any callable ``(completion, answer, question) -> float``; name it in the manifest with
``environment.rubric_file_path`` (this file) and ``rubric_name`` (default ``reward_fn``).
"""


def reward_fn(completion: str, answer: str, question: str) -> float:
    text = "".join(ch for ch in completion.lower() if ch.isalnum())
    if not text:
        return 0.0
    return min(1.0, text.count(answer.lower()) * len(answer) / len(text))
