"""LLM dataset fine-tuning."""
