"""single-agent reinforcement learning."""
