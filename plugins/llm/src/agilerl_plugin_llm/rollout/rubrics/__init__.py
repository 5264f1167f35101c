"""Reward functions the env catalog (:mod:`agilerl_plugin_llm.rollout.catalog`) names by file."""
