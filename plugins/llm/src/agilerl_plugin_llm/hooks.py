"""Hook implementations of agilerl-plugin-llm (filled in as the plugin grows)."""

from __future__ import annotations
