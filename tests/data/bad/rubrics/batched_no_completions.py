def score(prompts):
    return [0.0] * len(prompts)
