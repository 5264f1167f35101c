"""LLM plugin tests: the tiny-model fixtures shipped in ``agilerl_plugin_llm.testing``."""

pytest_plugins = ["agilerl_plugin_llm.testing"]
