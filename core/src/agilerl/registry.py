"""Registries: what plugins provide, keyed by name.

* :data:`MANIFEST_REGISTRY` (an :class:`AlgorithmRegistry`): ``algorithm.name`` -> spec class.
* :data:`ENV_TYPES`: ``environment.env_type`` -> spec class and factory.
* :data:`BUILDERS`: paradigm -> builder class.
* :data:`STRATEGIES`: (paradigm, regime) -> strategy class.
* :data:`SECTION_SCHEMAS`: manifest section -> the plugin model that validates it (``network``,
  ``replay_buffer``), and the plugin models that extend core's ``training`` section.

Each fills itself from the plugin hooks on first use. A name two plugins register is, in the tables a
manifest picks from by name (algorithms, env types), ambiguous: that name alone is refused, naming
both providers and how to pick one (``name: PROVIDER:NAME`` in the manifest, or the environment
variable ``AGILERL_PROVIDER_<NAME>=PROVIDER``); every other name works. In the structural tables
(builders, strategies, sections) a name registered twice is an error naming both providers. An
unknown name lists what is registered, the closest match, and the plugin to install when core
knows it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

import agilerl.plugins as plugins
from agilerl.errors import (
    AmbiguousNameError,
    DuplicateRegistrationError,
    MissingPluginError,
    PluginError,
    UnknownNameError,
)
from agilerl.imports import import_object

if TYPE_CHECKING:
    from agilerl.models.base import AlgorithmSpec, EnvSpec

T = TypeVar("T")
AlgoSpecT = TypeVar("AlgoSpecT", bound="AlgorithmSpec")

IN_PROCESS = "<in-process>"


def provider_variable(key: str) -> str:
    """``AGILERL_PROVIDER_<KEY>``: the environment variable that picks the provider of ``key``."""
    return "AGILERL_PROVIDER_" + re.sub(r"[^A-Za-z0-9]", "_", key).upper()


def _same_provider(asked: str, provider: str) -> bool:
    """Whether ``asked`` names ``provider``: its entry-point name or its distribution's name (with
    ``-``, ``_`` and ``.`` alike, any case, as pip compares names)."""

    def norm(s: str) -> str:
        return re.sub(r"[-_.]+", "-", s).lower()

    info = plugins.plugin_info(provider)
    names = {provider, *([info.distribution] if info is not None and info.distribution else [])}
    return norm(asked) in {norm(n) for n in names}


def resolve(obj: Any, what: str = "object") -> Any:
    """Import ``"module:attr"`` strings (:func:`agilerl.imports.import_object`); return other objects unchanged."""
    if not isinstance(obj, str):
        return obj
    return import_object(obj, what=what, error=PluginError)


@dataclass
class Entry(Generic[T]):
    """One registration: the value and who provided it."""

    key: str
    value: T
    provider: str
    extra: dict[str, Any] = field(default_factory=dict)


class _Table(Generic[T]):
    """A name -> entry table that fills itself from one registration hook."""

    kind = "name"
    hook = ""
    #: True: a name two plugins register is ambiguous (that name alone is refused until a provider is
    #: picked); False: it is an error for the whole table (structural tables: one owner per key).
    clashes_are_ambiguous = False

    def __init__(self) -> None:
        self._entries: dict[str, Entry[T]] | None = None
        self._clashes: dict[str, list[Entry[T]]] = {}
        self._manual: dict[str, Entry[T]] = {}
        self._lock = threading.RLock()
        plugins.on_change(self.invalidate)

    # --- filling -----------------------------------------------------------------------------
    def invalidate(self) -> None:
        with self._lock:
            self._entries = None

    def _put(self, table: dict[str, Entry[T]], entry: Entry[T]) -> None:
        old = table.get(entry.key)
        if old is not None and old.value is not entry.value:
            raise DuplicateRegistrationError(
                f"{self.kind} {entry.key!r} is registered twice: by {old.provider!r} and by "
                f"{entry.provider!r}. Uninstall one of them, or disable one with "
                f"AGILERL_DISABLE_PLUGINS={entry.provider}."
            )
        table[entry.key] = entry

    def _make_register(self, table: dict[str, Entry[T]], provider: str) -> Callable[..., Any]:
        raise NotImplementedError

    def _add(self, entry: Entry[T]) -> None:
        """Register ``entry`` in this process (plugins use the hook instead): the one ``add``."""
        with self._lock:
            if self._entries is not None:
                self._put(self._entries, entry)
            self._put(self._manual, entry)

    def _remove(self, key: str) -> None:
        """Undo :meth:`_add` (tests): the one ``remove``."""
        with self._lock:
            self._manual.pop(key, None)
            self.invalidate()

    def _fill(self) -> dict[str, Entry[T]]:
        with self._lock:
            if self._entries is not None:
                return self._entries
            pm = plugins.get_plugin_manager()
            table: dict[str, Entry[T]] = {}
            clashes: dict[str, list[Entry[T]]] = {}
            caller = getattr(pm.hook, self.hook, None)  # None: no loaded plugin declares the hook
            # Call each implementation on its own so every entry knows its provider.
            for impl in reversed(caller.get_hookimpls() if caller is not None else []):
                # What one plugin registers lands in the table only if its hook returns: a broken
                # hook must not take every command down. It is skipped and named (strict: raised).
                own: dict[str, Entry[T]] = {}
                kwargs = {"register": self._make_register(own, impl.plugin_name)}
                try:
                    impl.function(**{k: v for k, v in kwargs.items() if k in impl.argnames})
                except DuplicateRegistrationError:
                    raise  # one plugin registering a name twice: its author must fix it
                except Exception as exc:
                    plugins.report_hook_failure(impl.plugin_name, self.hook, exc)
                    continue
                for entry in own.values():
                    old = table.get(entry.key) or (clashes[entry.key][0] if entry.key in clashes else None)
                    if self.clashes_are_ambiguous and old is not None and old.value is not entry.value:
                        # Two plugins, one name: that name becomes ambiguous, every other works.
                        clashes.setdefault(entry.key, [table.pop(entry.key)] if entry.key in table else [])
                        clashes[entry.key].append(entry)
                        continue
                    self._put(table, entry)
            for entry in self._manual.values():
                self._put(table, entry)
            self._entries = table
            self._clashes = {k: sorted(v, key=lambda e: e.provider) for k, v in clashes.items()}
            return table

    # --- reading -----------------------------------------------------------------------------
    def _listed(self, entry: Entry[T]) -> bool:
        """Whether ``entry`` is shown in listings and "registered: ..." messages."""
        return True

    def entry(self, key: str) -> Entry[T]:
        """The entry registered as ``key``; ``PROVIDER:KEY`` picks one plugin's (needed where two
        plugins register ``KEY``, unless ``AGILERL_PROVIDER_<KEY>`` picks it)."""
        table = self._fill()
        if key in table:
            return table[key]
        asked, _, bare = key.rpartition(":") if ":" in key and self.clashes_are_ambiguous else ("", "", key)
        candidates = self._clashes.get(bare) or ([table[bare]] if bare in table else [])
        if not asked and candidates:
            asked = os.environ.get(provider_variable(bare), "").strip()
            if not asked:
                self._ambiguous(bare, candidates, "")
        if asked and candidates:
            for e in candidates:
                if _same_provider(asked, e.provider):
                    return e
            picked = f"{provider_variable(bare)}={asked}" if ":" not in key else f"{key!r}"
            self._ambiguous(bare, candidates, f"{picked} names none of them. ")
        raise UnknownNameError(self.kind, key, self.listed_keys()) from None

    def _ambiguous(self, key: str, candidates: list[Entry[T]], said: str) -> NoReturn:
        shown = [plugins.describe(e.provider) for e in candidates]
        if len(candidates) == 1:
            head = f"{self.kind} {key!r} is provided by {shown[0]} alone; {said}"
        else:
            head = f"{self.kind} {key!r} is registered by {len(shown)} plugins: {' and '.join(shown)}. {said}"
        first = candidates[0].provider
        how = f"Pick one in the manifest (name: {first}:{key}) or in the environment ({provider_variable(key)}={first})"
        if len(candidates) > 1:
            how += f"; or uninstall one, or disable it with AGILERL_DISABLE_PLUGINS={candidates[-1].provider}"
        raise AmbiguousNameError(self.kind, key, shown, head + how + ".")

    def listed_keys(self) -> list[str]:
        """The names a user can give: each registered key, and ``PROVIDER:KEY`` for an ambiguous one."""
        return [e.key for e in self.entries() if self._listed(e)]

    def clashes(self) -> dict[str, list[str]]:
        """Each ambiguous name -> the plugins that register it."""
        self._fill()
        return {k: [e.provider for e in v] for k, v in sorted(self._clashes.items())}

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        try:
            self.entry(key)
        except (UnknownNameError, AmbiguousNameError):
            return key in self._clashes
        return True

    def keys(self) -> list[str]:
        return sorted(self._fill())

    def entries(self) -> list[Entry[T]]:
        """Every entry, sorted by name; an ambiguous name's once per provider, as ``PROVIDER:KEY``."""
        table = self._fill()
        found = [table[k] for k in table]
        for key, clashing in self._clashes.items():
            found += [
                Entry(f"{e.provider}:{key}", e.value, e.provider, {**e.extra, "ambiguous": key}) for e in clashing
            ]
        return sorted(found, key=lambda e: e.key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())


class HookTable(_Table[Any]):
    """A name -> value table filled from any ``register`` hook: core's or a plugin's own.

    A plugin that defines a hook of its own gets the registries' behaviour (lazy filling, each
    entry's provider, a duplicate named with both providers, an unknown name with the closest
    match, a refill when plugins change) in one line::

        SOURCES = HookTable("myplugin_register_sources", kind="source")

    Implementations call ``register(name, value, **extra)``; ``extra`` is kept in
    :attr:`Entry.extra`. A hook that no loaded plugin declares gives an empty table.
    """

    def __init__(self, hook: str, *, kind: str = "name") -> None:
        super().__init__()
        self.hook = hook
        self.kind = kind

    def _make_register(self, table: dict[str, Entry[Any]], provider: str) -> Callable[..., Any]:
        def register(key: str, value: Any, **extra: Any) -> None:
            self._put(table, Entry(key, value, provider, dict(extra)))

        return register

    def add(self, key: str, value: Any, **extra: Any) -> None:
        self._add(Entry(key, value, IN_PROCESS, dict(extra)))

    def remove(self, key: str) -> None:
        self._remove(key)


# --------------------------------------------------------------------------------------------------
# Algorithms
# --------------------------------------------------------------------------------------------------


class AlgorithmRegistry(_Table["type[AlgorithmSpec]"]):
    """Maps the manifest's ``algorithm.name`` to the spec class that validates it."""

    kind = "algorithm"
    hook = "agilerl_register_algorithms"
    clashes_are_ambiguous = True

    def _make_register(self, table: dict[str, Entry[Any]], provider: str) -> Callable[..., Any]:
        def register(
            spec_cls: type[AlgorithmSpec],
            name: str | None = None,
            *,
            algorithm: Any = None,
            builder: Any = None,
            strategy: Any = None,
        ) -> None:
            key = name or spec_cls.default_name()
            extra = {"algorithm": algorithm, "builder": builder, "strategy": strategy}
            self._put(table, Entry(key, spec_cls, provider, extra))

        return register

    def add(
        self,
        name: str,
        spec_cls: type[AlgorithmSpec],
        *,
        algorithm: Any = None,
        builder: Any = None,
        strategy: Any = None,
    ) -> None:
        """Register ``spec_cls`` under ``name`` in this process (plugins use the hook instead)."""
        extra = {"algorithm": algorithm, "builder": builder, "strategy": strategy}
        self._add(Entry(name, spec_cls, IN_PROCESS, extra))

    def remove(self, name: str) -> None:
        """Undo :meth:`add` (tests)."""
        self._remove(name)

    def get(self, name: str) -> type[AlgorithmSpec]:
        """The spec class registered as ``name``. Raises ``KeyError`` when unknown."""
        return self.entry(name).value

    def create(self, name: str, /, **fields: Any) -> AlgorithmSpec:
        """Build and validate a spec from its registry name and field values."""
        spec = self.get(name).model_validate(fields)
        spec._registry_name = name
        return spec

    def _listed(self, entry: Entry[Any]) -> bool:
        return not entry.value.not_supported

    def names(self) -> list[str]:
        """Every registered algorithm name that can be trained, sorted (not the ``not_supported`` ones)."""
        return [e.key for e in self.entries() if self._listed(e)]

    def items(self) -> list[tuple[str, type[AlgorithmSpec]]]:
        """Every (name, spec class) pair that can be trained, sorted by name."""
        return [(e.key, e.value) for e in self.entries() if self._listed(e)]

    def name_of(self, spec_cls: type[AlgorithmSpec]) -> str | None:
        """The registered name of ``spec_cls`` (or of its nearest registered base class)."""
        entries = self.entries()  # an ambiguous name's entries as PROVIDER:NAME, which entry() resolves
        for cls in spec_cls.__mro__:
            for entry in entries:
                if entry.value is cls:
                    return entry.key
        return None

    def entry_for(self, spec: AlgorithmSpec) -> Entry[Any] | None:
        if spec.name in self:
            return self.entry(spec.name)
        found = self.name_of(type(spec))
        return self.entry(found) if found else None


# --------------------------------------------------------------------------------------------------
# Environment types
# --------------------------------------------------------------------------------------------------


@dataclass
class EnvType:
    env_type: str
    spec_cls: type[EnvSpec]
    factory: Any
    functions: dict[str, Any]


class EnvTypeRegistry(_Table[EnvType]):
    """``environment.env_type`` -> spec class, factory and named helper functions."""

    kind = "env_type"
    hook = "agilerl_register_env_types"
    clashes_are_ambiguous = True

    def _make_register(self, table: dict[str, Entry[EnvType]], provider: str) -> Callable[..., Any]:
        def register(
            env_type: str,
            spec_cls: type[EnvSpec],
            factory: Any,
            *,
            functions: dict[str, Any] | None = None,
        ) -> None:
            value = EnvType(env_type, spec_cls, factory, dict(functions or {}))
            self._put(table, Entry(env_type, value, provider))

        return register

    def add(self, env_type: str, spec_cls: type[EnvSpec], factory: Any, **functions: Any) -> None:
        self._add(Entry(env_type, EnvType(env_type, spec_cls, factory, functions), IN_PROCESS))

    def remove(self, env_type: str) -> None:
        self._remove(env_type)

    def spec_class(self, env_type: str) -> type[EnvSpec]:
        return self.entry(env_type).value.spec_cls

    def factory(self, env_type: str) -> Callable[..., Any]:
        return resolve(self.entry(env_type).value.factory, f"factory of env_type {env_type!r}")  # type: ignore[no-any-return]

    def function(self, name: str) -> Callable[..., Any]:
        """A named helper (``make_pz_env``, ...) registered with an env type."""
        for entry in self.entries():
            if name in entry.value.functions:
                return resolve(entry.value.functions[name], name)  # type: ignore[no-any-return]
        raise MissingPluginError(name)

    def spec_classes(self) -> dict[str, type[EnvSpec]]:
        return {e.key: e.value.spec_cls for e in self.entries()}


# --------------------------------------------------------------------------------------------------
# Builders and strategies
# --------------------------------------------------------------------------------------------------


class BuilderRegistry(_Table[Any]):
    kind = "paradigm"
    hook = "agilerl_register_builders"

    def _make_register(self, table: dict[str, Entry[Any]], provider: str) -> Callable[..., Any]:
        def register(paradigm: str, builder: Any) -> None:
            self._put(table, Entry(paradigm, builder, provider))

        return register

    def add(self, paradigm: str, builder: Any) -> None:
        self._add(Entry(paradigm, builder, IN_PROCESS))

    def remove(self, paradigm: str) -> None:
        self._remove(paradigm)

    def get(self, paradigm: str) -> Any:
        return resolve(self.entry(paradigm).value, f"builder for paradigm {paradigm!r}")


def strategy_key(paradigm: str, regime: str) -> str:
    return f"{paradigm}/{regime}"


class StrategyRegistry(_Table[Any]):
    kind = "strategy"
    hook = "agilerl_register_strategies"

    def _make_register(self, table: dict[str, Entry[Any]], provider: str) -> Callable[..., Any]:
        def register(paradigm: str, regime: str, strategy: Any) -> None:
            self._put(table, Entry(strategy_key(paradigm, regime), strategy, provider))

        return register

    def add(self, paradigm: str, regime: str, strategy: Any) -> None:
        self._add(Entry(strategy_key(paradigm, regime), strategy, IN_PROCESS))

    def remove(self, paradigm: str, regime: str) -> None:
        self._remove(strategy_key(paradigm, regime))

    def get(self, paradigm: str, regime: str) -> Any:
        table = self._fill()
        for key in (strategy_key(paradigm, regime), strategy_key(paradigm, "*")):
            if key in table:
                return resolve(table[key].value, f"strategy {key!r}")
        raise UnknownNameError(self.kind, strategy_key(paradigm, regime), list(table))


# --------------------------------------------------------------------------------------------------
# Section schemas
# --------------------------------------------------------------------------------------------------

#: Sections a plugin owns: core knows they exist, one plugin says what is in them.
PLUGIN_SECTIONS = ("network", "replay_buffer")
#: Core's sections that plugins extend with fields of their own.
EXTENSIBLE_SECTIONS = ("training",)


class SectionRegistry(_Table[Any]):
    """``network`` / ``replay_buffer`` -> the model a plugin validates it with; ``training`` -> the
    models whose fields plugins add to it (keyed ``training/<provider>/<Model>``)."""

    kind = "section"
    hook = "agilerl_register_sections"

    def _entry(self, section: str, model: Any, provider: str) -> Entry[Any]:
        if section in EXTENSIBLE_SECTIONS:
            name = model if isinstance(model, str) else f"{model.__module__}:{model.__qualname__}"
            return Entry(f"{section}/{provider}/{name}", model, provider, {"section": section})
        if section not in PLUGIN_SECTIONS:
            sections = ", ".join((*PLUGIN_SECTIONS, *EXTENSIBLE_SECTIONS))
            raise PluginError(f"{provider}: section {section!r} cannot be registered (sections: {sections})")
        return Entry(section, model, provider, {"section": section})

    def _make_register(self, table: dict[str, Entry[Any]], provider: str) -> Callable[..., Any]:
        def register(section: str, model: Any) -> None:
            self._put(table, self._entry(section, model, provider))

        return register

    def add(self, section: str, model: Any) -> None:
        """Register ``model`` for ``section`` in this process (plugins use the hook instead)."""
        self._add(self._entry(section, model, IN_PROCESS))

    def remove(self, section: str, model: Any = None) -> None:
        """Undo :meth:`add` (tests)."""
        self._remove(self._entry(section, model, IN_PROCESS).key if model is not None else section)

    def owner(self, section: str) -> Any:
        """The model class that validates ``section`` (None: no installed plugin reads it)."""
        table = self._fill()
        entry = table.get(section)
        return None if entry is None else resolve(entry.value, f"schema of section {section!r}")

    def provider(self, section: str) -> str | None:
        entry = self._fill().get(section)
        return None if entry is None else entry.provider

    def extensions(self, section: str) -> list[Any]:
        """The model classes extending core's ``section``, in a stable order."""
        return [
            resolve(e.value, f"fields of section {section!r}")
            for e in self.entries()
            if e.extra.get("section") == section and e.key != section
        ]


MANIFEST_REGISTRY = AlgorithmRegistry()
ENV_TYPES = EnvTypeRegistry()
BUILDERS = BuilderRegistry()
STRATEGIES = StrategyRegistry()
SECTION_SCHEMAS = SectionRegistry()
