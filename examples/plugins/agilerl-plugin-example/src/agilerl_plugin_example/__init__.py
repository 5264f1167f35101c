"""Example agilerl plugin: k-armed bandits and UCB1 (pure Python, no torch)."""

__version__ = "0.1.0"
