"""LLM algorithms: SFT, DPO (dataset) and the rollout family, on the shared ``LLMAlgorithm`` base."""
