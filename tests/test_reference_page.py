"""docs/reference/manifest.md is what ``agilerl schema --markdown`` generates from the installed specs."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from agilerl.models import AlgorithmSpec
from agilerl.registry import MANIFEST_REGISTRY
from agilerl.schema import manifest_markdown

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_reference_page_is_up_to_date() -> None:
    page = (ROOT / "docs" / "reference" / "manifest.md").read_text(encoding="utf-8")
    assert page == manifest_markdown(), "docs/reference/manifest.md is stale: run `python scripts/gen_docs.py`"


def test_the_page_lists_every_field_of_every_registered_spec_and_the_refused_names() -> None:
    page = manifest_markdown()
    for name, cls in MANIFEST_REGISTRY.items():
        assert f"### `{name}`" in page
        for field in cls.model_fields:
            assert f"| `{field}`" in page, f"{name}.{field} missing from the reference page"
    assert "Known but not supported yet" not in page  # every name the plugins know trains today


class _RefusedSpec(AlgorithmSpec):
    paradigm: ClassVar[str] = "gym"
    regime: ClassVar[str] = "online"
    not_supported: ClassVar[str] = "FutureAlgo is not supported yet: use DQN"


def test_a_refused_name_gets_its_own_table_with_the_validation_message() -> None:
    MANIFEST_REGISTRY.add("FutureAlgo", _RefusedSpec)
    try:
        page = manifest_markdown()
    finally:
        MANIFEST_REGISTRY.remove("FutureAlgo")
    assert "| `FutureAlgo` | FutureAlgo is not supported yet: use DQN |" in page
    assert "### `FutureAlgo`" not in page


def test_cli_writes_the_page(tmp_path: Path) -> None:
    from agilerl.cli import main

    out = tmp_path / "manifest.md"
    assert main(["schema", "--markdown", "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == manifest_markdown().rstrip("\n") + "\n"
