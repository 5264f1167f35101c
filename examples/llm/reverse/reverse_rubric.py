"""Rubric for the "reverse the digits" task (``agilerl_plugin_llm.tasks``): 1.0 for the exact answer,
else half a point times the share of positions that hold the right digit.

The partial credit gives GRPO a signal on groups with no exact answer; it stays below 1.0, so
``max_reward: 1.0`` makes the run's ``eval/eval_success`` the held-out exact match.
"""


def reward_fn(completion: str, answer: str, question: str) -> float:
    reply = completion.strip()
    if reply == answer:
        return 1.0
    right = sum(a == b for a, b in zip(reply, answer, strict=False))
    return 0.5 * right / max(len(answer), len(reply))
