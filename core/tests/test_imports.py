"""``agilerl.imports``: the one resolver of ``module:attr`` and ``path/to/file.py:attr`` references."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from agilerl.errors import AgileRLError
from agilerl.imports import import_object, load_file_module, split_reference


class RefError(AgileRLError):
    pass


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_module_references_resolve() -> None:
    assert import_object("collections:OrderedDict") is __import__("collections").OrderedDict
    assert import_object("os.path:join.__name__") == "join"  # an attribute path after the colon
    assert import_object("collections.OrderedDict", dotted_ok=True) is __import__("collections").OrderedDict
    assert split_reference("a.b:C") == ("a.b", "C")


def test_a_file_reference_resolves_relative_to_base_dir_or_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "envs" / "grid.py", "class Grid:\n    size = 3\n\ndef make(n=2):\n    return Grid()\n")
    grid = import_object("envs/grid.py:Grid", base_dir=tmp_path)
    assert grid.size == 3 and grid.__name__ == "Grid"
    assert import_object("envs/grid.py:Grid.size", base_dir=tmp_path) == 3
    monkeypatch.chdir(tmp_path / "envs")
    # "grid.py" (no separator) is a file too; relative to the cwd without base_dir.
    assert import_object("grid.py:make") is import_object(f"{tmp_path}/envs/grid.py:make")
    # Imported once, under a name pickle can find: instances survive a round trip.
    assert isinstance(pickle.loads(pickle.dumps(grid())), grid)


def test_two_files_with_one_name_do_not_clash(tmp_path: Path) -> None:
    write(tmp_path / "a" / "env.py", "VALUE = 'a'\n")
    write(tmp_path / "b" / "env.py", "VALUE = 'b'\n")
    assert import_object("a/env.py:VALUE", base_dir=tmp_path) == "a"
    assert import_object("b/env.py:VALUE", base_dir=tmp_path) == "b"
    assert load_file_module(tmp_path / "a" / "env.py") is load_file_module("a/env.py", base_dir=tmp_path)


def test_a_missing_file_names_the_field_and_the_file(tmp_path: Path) -> None:
    with pytest.raises(RefError, match=r"^environment\.entrypoint: file not found: .*nope\.py \(relative paths are "):
        import_object("sub/nope.py:Env", what="environment.entrypoint", error=RefError, base_dir=tmp_path)


def test_a_missing_attribute_names_the_file_and_the_attribute(tmp_path: Path) -> None:
    write(tmp_path / "games.py", "import json\n\nclass WordGame:\n    pass\n\ndef helper():\n    pass\n")
    with pytest.raises(RefError, match=r"^f: file 'games.py' has no attribute 'WordGam'; did you mean 'WordGame'\?$"):
        import_object("games.py:WordGam", what="f", error=RefError, base_dir=tmp_path)
    # No close name: the callables the file defines itself (not what it imported) are listed.
    with pytest.raises(RefError, match=r"has no attribute 'Zzz' \(callables there: WordGame, helper\)$"):
        import_object("games.py:Zzz", what="f", error=RefError, base_dir=tmp_path)


def test_a_file_that_fails_to_import_says_why_and_can_be_fixed(tmp_path: Path) -> None:
    bad = write(tmp_path / "broken.py", "raise RuntimeError('no GPU here')\n")
    with pytest.raises(RefError, match=r"^f: importing .*broken\.py failed: RuntimeError: no GPU here$"):
        import_object("broken.py:X", what="f", error=RefError, base_dir=tmp_path)
    write(bad, "X = 1\n")  # the failed import left nothing cached behind
    assert import_object("broken.py:X", base_dir=tmp_path) == 1


@pytest.mark.parametrize("ref", ["envs/grid.py", "grid.py", "no_colon", "mod:", ":Attr"])
def test_a_reference_without_an_attribute_is_refused(ref: str) -> None:
    with pytest.raises(RefError, match=r"is not of the form 'package.module:Name' or 'path/to/file.py:Name'$"):
        import_object(ref, what="f", error=RefError)
