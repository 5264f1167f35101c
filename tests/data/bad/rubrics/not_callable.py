reward_fn = 1.0
