class reward_fn:
    scale = 1.0
