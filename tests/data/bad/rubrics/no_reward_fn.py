def score_answer(completion, answer, question):
    return float(answer in completion)
