def reward_fn(completion, answer, question):
    """Says whether the answer is in the reply, in words: the run needs a number."""
    return "correct" if answer and answer in completion else "wrong"
