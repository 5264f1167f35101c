"""Bounded, strict YAML and JSON loading for manifests and the files they name.

``yaml.safe_load`` runs no code, but it still accepts things a manifest must not contain, and some
inputs cost unbounded time or memory. This loader refuses, each with a message naming the file:

- files larger than :data:`MAX_BYTES` (checked before reading);
- bytes that are not UTF-8 (the byte offset is named);
- duplicate keys in one mapping (YAML and JSON both pick the last one silently);
- nesting deeper than :data:`MAX_DEPTH` (PyYAML's composer and ``json`` recurse per level);
- more than :data:`MAX_ALIASES` alias uses, or an alias graph that expands to more than
  :data:`MAX_NODES` nodes (a "billion laughs" file is a few hundred bytes);
- JSON's non-standard ``NaN`` / ``Infinity`` constants.

Every refusal is a :class:`~agilerl.errors.ManifestSyntaxError` (exit code 1), raised before any
expansion happens, so a hostile file costs milliseconds and kilobytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, SequenceNode

from agilerl.errors import ManifestFileError, ManifestSyntaxError

MAX_BYTES = int(os.environ.get("AGILERL_MAX_MANIFEST_BYTES", 4 * 1024 * 1024))
MAX_DEPTH = 64
MAX_ALIASES = 1_000
MAX_NODES = 200_000


def _where(source: str, mark: Any) -> str:
    return f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with duplicate-key, depth and alias limits."""

    def __init__(self, stream: str, source: str) -> None:
        super().__init__(stream)
        self._source = source
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise ManifestSyntaxError(
                    f"{_where(self._source, event.start_mark)}: more than {MAX_ALIASES} YAML aliases (*name); "
                    "write the values out instead"
                )
            return super().compose_node(parent, index)
        nests = isinstance(event, (MappingStartEvent, SequenceStartEvent))
        if nests:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise ManifestSyntaxError(
                    f"{_where(self._source, event.start_mark)}: nesting deeper than {MAX_DEPTH} levels"
                )
        try:
            return super().compose_node(parent, index)
        finally:
            if nests:
                self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise ConstructorError(
                    "while constructing a mapping", node.start_mark, "found an unhashable key", key_node.start_mark
                ) from None
            if key in seen:
                first = seen[key]
                raise ManifestSyntaxError(
                    f"{_where(self._source, key_node.start_mark)}: duplicate key {key!r} "
                    f"(first at line {first.line + 1}); YAML would silently keep only the last one"
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _expanded_size(root: Node, source: str) -> None:
    """Count the nodes the alias graph expands to, without expanding it (memoised per node)."""
    sizes: dict[int, int] = {}
    # iterative post-order walk: depth is bounded already, but keep it off the C stack anyway
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(c), 1) for c in children)
        if total > MAX_NODES:
            raise ManifestSyntaxError(
                f"{_where(source, node.start_mark)}: the YAML expands to more than {MAX_NODES} values "
                "(aliases referring to aliases); a manifest is far smaller"
            )
        sizes[id(node)] = total


def loads_yaml(text: str, source: str = "<string>") -> Any:
    """Parse one YAML document strictly (see the module docstring)."""
    loader = _StrictLoader(text, source)
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _expanded_size(node, source)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except ComposerError as exc:
        if exc.problem and "another document" in exc.problem:
            raise ManifestSyntaxError(f"{_where(source, exc.problem_mark)}: more than one YAML document") from None
        raise _yaml_error(exc, source) from None
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, source) from None
    except yaml.YAMLError as exc:
        raise ManifestSyntaxError(f"{source}: invalid YAML: {exc}") from None
    except RecursionError:
        raise ManifestSyntaxError(f"{source}: nesting too deep") from None


def _yaml_error(exc: yaml.MarkedYAMLError, source: str) -> ManifestSyntaxError:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or exc.context or "syntax error"
    return ManifestSyntaxError(f"{_where(source, mark)}: invalid YAML: {what}")


def _json_pairs(source: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ManifestSyntaxError(
                    f"{source}: duplicate key {key!r}; JSON would silently keep only the last one"
                )
            out[key] = value
        return out

    return hook


def _json_depth(text: str, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH before ``json`` recurses into it (strings skipped)."""
    depth = 0
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ManifestSyntaxError(f"{source}: nesting deeper than {MAX_DEPTH} levels")
        elif ch in "]}":
            depth -= 1


def loads_json(text: str, source: str = "<string>") -> Any:
    """Parse JSON strictly: duplicate keys, deep nesting and NaN/Infinity are errors."""
    _json_depth(text, source)

    def constant(name: str) -> Any:
        raise ManifestSyntaxError(f"{source}: {name} is not valid JSON (write a finite number)")

    try:
        return json.loads(text, object_pairs_hook=_json_pairs(source), parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise ManifestSyntaxError(f"{source}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise ManifestSyntaxError(f"{source}: nesting too deep") from None


def read_text(path: str | os.PathLike[str], *, what: str = "manifest", max_bytes: int | None = None) -> str:
    """The file's text, refusing missing files, directories, oversized files and non-UTF-8 bytes."""
    p = Path(path)
    limit = MAX_BYTES if max_bytes is None else max_bytes
    if not p.exists():
        raise ManifestFileError(f"{what} not found: {p} (check the path; it is relative to {Path.cwd()})")
    if p.is_dir():
        raise ManifestFileError(f"{what} path is a directory, not a file: {p}")
    try:
        with p.open("rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise ManifestFileError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise ManifestSyntaxError(
            f"{p}: larger than {limit} bytes; a {what} is a few kilobytes (AGILERL_MAX_MANIFEST_BYTES raises the limit)"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestSyntaxError(
            f"{p}: not UTF-8 text (byte {exc.start}: {raw[exc.start : exc.start + 1]!r}); is this the right file?"
        ) from None
    if "\x00" in text:
        raise ManifestSyntaxError(f"{p}: contains NUL bytes (byte {text.index(chr(0))}); is this the right file?")
    return text.removeprefix("\ufeff")


def load_file(path: str | os.PathLike[str], *, what: str = "manifest") -> Any:
    """Read and parse a YAML or JSON file (by suffix; ``.json`` is JSON, anything else YAML)."""
    p = Path(path)
    text = read_text(p, what=what)
    if p.suffix.lower() == ".json":
        return loads_json(text, str(p))
    return loads_yaml(text, str(p))


__all__ = ["MAX_ALIASES", "MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "load_file", "loads_json", "loads_yaml", "read_text"]
