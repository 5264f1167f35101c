"""Hook implementations of agilerl-plugin-bandit (filled in as the plugin grows)."""

from __future__ import annotations
