"""Test-wide settings: strict plugin loading, offline Hugging Face, one torch thread."""

import os

os.environ.setdefault("AGILERL_STRICT_PLUGINS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Fixtures shipped for plugin authors: core's, and the LLM plugin's tiny local model.
# (pytest only allows `pytest_plugins` in the root conftest when tests are collected from the root.)
pytest_plugins = ["agilerl.testing", "agilerl_plugin_llm.testing"]
