"""Hooks the LLM plugin defines for other plugins (added to agilerl's plugin manager at load).

A *rollout source* is one way to get the text environments a rollout algorithm (GRPO, ...) plays
against. Built in: ``dataset`` rows + rubric and ``entrypoint`` (a Python text env). The OpenEnv
plugin adds ``env_url``.
"""

from __future__ import annotations

from typing import Any

from agilerl.hookspecs import hookspec


@hookspec
def agilerl_llm_register_rollout_sources(register: Any) -> None:
    """Register rollout sources.

    Call ``register(field, build)``: ``field`` is the ``LLMEnvSpec`` field whose presence selects
    this source (``"env_url"``, ``"entrypoint"``, ...); ``build`` (callable or ``"module:attr"``) is
    called as ``build(spec, *, seed=None)`` and returns ``(make_env, max_turns)``: a zero-argument
    callable creating a fresh, independent text env (see ``agilerl_plugin_llm.envs.TextEnv``) and the
    turn budget (``None``: use ``spec.max_turns`` or 1). Optionally ``register(field, build,
    check=...)``: ``check(spec)`` (callable or ``"module:attr"``, importing nothing heavy) runs at
    validation and returns ``[(field, why), ...]`` for what is wrong with the environment section;
    a check that takes a ``manifest`` keyword is called as ``check(spec, manifest=manifest)`` (to
    honour ``validation.check_env: false``, say).
    """
