"""Hook implementations of agilerl-plugin-gym (filled in as the plugin grows)."""

from __future__ import annotations
