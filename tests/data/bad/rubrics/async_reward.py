async def reward_fn(completion, answer, question):
    return 1.0
