"""Hook implementations of agilerl-plugin-openenv (filled in as the plugin grows)."""

from __future__ import annotations
