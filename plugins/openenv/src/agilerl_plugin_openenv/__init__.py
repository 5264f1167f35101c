"""agilerl plugin: openenv."""

__version__ = "0.1.0"
