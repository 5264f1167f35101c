"""LLM rollout fine-tuning."""
