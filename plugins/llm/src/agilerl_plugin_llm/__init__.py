"""agilerl plugin: llm."""

__version__ = "0.1.0"
