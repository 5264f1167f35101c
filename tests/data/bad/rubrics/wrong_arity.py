def reward_fn(completion):
    return 1.0
