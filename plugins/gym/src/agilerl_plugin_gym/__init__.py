"""agilerl plugin: gym."""

__version__ = "0.1.0"
