"""Manifest files are parsed strictly and within limits: every hostile input is a one-line
ManifestSyntaxError naming the file, raised before anything is expanded."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from agilerl import safe_load
from agilerl.errors import ManifestSyntaxError
from agilerl.models.manifest import read_manifest_file

BOMB = "\n".join(
    [f"a0: &a0 [{', '.join(['lol'] * 9)}]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
)


def refused(tmp_path: Path, name: str, content: str | bytes) -> str:
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    tracemalloc.start()
    try:
        with pytest.raises(ManifestSyntaxError) as info:
            read_manifest_file(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, f"{name}: {peak / 2**20:.0f} MiB to refuse"
    message = str(info.value)
    assert str(p) in message and "\n" not in message
    return message


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    assert "expands to more than" in refused(tmp_path, "bomb.yaml", BOMB)


def test_too_many_aliases(tmp_path: Path) -> None:
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * (safe_load.MAX_ALIASES + 1)) + "]\n"
    assert "aliases" in refused(tmp_path, "aliases.yaml", text)


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    p = tmp_path / "ok.yaml"
    p.write_text("base: &b {x: 1}\nother: *b\nmerged: {<<: *b, y: 2}\n")
    assert read_manifest_file(p) == {"base": {"x": 1}, "other": {"x": 1}, "merged": {"x": 1, "y": 2}}


@pytest.mark.parametrize(
    ("name", "text"),
    [("deep.yaml", "a: " + "[" * 5000 + "]" * 5000), ("deep.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")],
)
def test_deep_nesting(tmp_path: Path, name: str, text: str) -> None:
    assert "nesting deeper than 64" in refused(tmp_path, name, text)


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [("dup.yaml", "training:\n  max_steps: 1\n  max_steps: 2\n", "dup.yaml:3:3"),
     ("dup.json", '{"training": {"max_steps": 1, "max_steps": 2}}', "dup.json")],
)  # fmt: skip
def test_duplicate_keys(tmp_path: Path, name: str, text: str, where: str) -> None:
    message = refused(tmp_path, name, text)
    assert where in message and "duplicate key 'max_steps'" in message


def test_binary_garbage_names_the_file_and_byte(tmp_path: Path) -> None:
    assert "not UTF-8 text (byte 5" in refused(tmp_path, "garbage.yaml", b"a: 1\n\xff\xfe\x00\x01")


def test_nul_bytes(tmp_path: Path) -> None:
    assert "NUL" in refused(tmp_path, "nul.yaml", b"a: 1\x00\n")


def test_oversized_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    assert "larger than" in refused(tmp_path, "big.yaml", "# " + "x" * (safe_load.MAX_BYTES + 10))


def test_json_nan_and_two_yaml_documents(tmp_path: Path) -> None:
    assert "NaN is not valid JSON" in refused(tmp_path, "nan.json", '{"a": NaN}')
    assert "more than one YAML document" in refused(tmp_path, "two.yaml", "a: 1\n---\nb: 2\n")
