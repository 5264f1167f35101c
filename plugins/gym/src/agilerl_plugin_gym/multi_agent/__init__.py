"""multi-agent reinforcement learning."""
