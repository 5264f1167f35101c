"""The hooks through which plugins extend agilerl.

A plugin is a module (named in the ``agilerl`` entry-point group of its distribution) that defines
functions decorated with :data:`agilerl.hookimpl` whose names match the specs below. Every hook is
called with keyword arguments; an implementation may accept a subset of them, so hooks can grow new
arguments without breaking plugins.

Registration hooks receive a ``register`` callable. Call it once per thing you provide. Classes and
functions may be given as objects or as ``"module:attribute"`` strings; strings are imported only
when first used, which keeps ``import agilerl`` and ``agilerl validate`` free of heavy imports.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from agilerl.registration import (
        RegisterAlgorithm,
        RegisterBuilder,
        RegisterEnvType,
        RegisterSection,
        RegisterStrategy,
    )

PROJECT_NAME = "agilerl"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def agilerl_register_algorithms(register: RegisterAlgorithm) -> None:
    """Register algorithm spec classes.

    Call ``register(spec_cls, name=None, *, algorithm=None, builder=None, strategy=None)`` for each.
    ``name`` defaults to the class name minus ``Spec``; ``algorithm`` is the class the builder
    constructs (object or ``"module:Class"``); ``builder``/``strategy`` override the routing from the
    spec's ``paradigm``/``regime`` for this algorithm only.
    """


@hookspec
def agilerl_register_env_types(register: RegisterEnvType) -> None:
    """Register environment types.

    Call ``register(env_type, spec_cls, factory, *, functions=None)``: ``spec_cls`` validates the
    manifest's ``environment`` section when ``env_type`` matches; ``factory(spec, **kwargs)`` builds
    the live environment for :func:`agilerl.models.env.make_env`. ``functions`` maps further public
    names (e.g. ``"make_pz_env"``) to callables so they are importable from ``agilerl.models.env``.
    """


@hookspec
def agilerl_register_builders(register: RegisterBuilder) -> None:
    """Register one builder per paradigm.

    Call ``register(paradigm, builder_cls)``. The builder turns a validated spec into a live
    algorithm; see :class:`agilerl.builders.AlgorithmBuilder`.
    """


@hookspec
def agilerl_register_strategies(register: RegisterStrategy) -> None:
    """Register one training strategy per (paradigm, regime).

    Call ``register(paradigm, regime, strategy_cls)``. ``regime="*"`` matches any regime of the
    paradigm not registered more specifically; see :class:`agilerl.strategies.TrainingStrategy`.
    """


@hookspec
def agilerl_register_sections(register: RegisterSection) -> None:
    """Register the schema of a manifest section the plugin reads.

    Call ``register(section, model)`` with a pydantic model class (or ``"module:Class"``).
    ``network`` and ``replay_buffer`` take one owner: ``model`` validates that mapping, and a second
    plugin registering the same section is an error naming both. ``training`` is core's and takes
    extensions: ``model``'s fields join the section (same YAML mapping), and each of them is refused
    at validation for an algorithm whose spec does not list it in ``training_fields``.
    """


@hookspec
def agilerl_register_commands(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add sub-commands to the ``agilerl`` CLI.

    ``subparsers`` is the :mod:`argparse` sub-parser collection. Add a parser and give it a handler
    with ``parser.set_defaults(handler=fn)``; ``fn(args)`` returns the process exit code.
    """


@hookspec
def agilerl_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Add a plugin's own hook specifications.

    Called once after every plugin is registered and before pending implementations are checked, so
    plugin-defined hooks (a plugin's own extension points) are validated like core's. Call
    ``plugin_manager.add_hookspecs(module)``.
    """
