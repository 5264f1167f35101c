"""agilerl plugin: bandit."""

__version__ = "0.1.0"
