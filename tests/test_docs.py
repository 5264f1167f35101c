"""The docs cannot rot: tutorial snippets are the tested files, and referenced paths exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SNIPPET = re.compile(r"<!-- snippet: (?P<path>[^ ]+) -->\n```[a-z]*\n(?P<body>.*?)\n```", re.S)


def test_tutorial_snippets_match_the_example_plugin_files() -> None:
    text = (ROOT / "docs" / "plugins" / "tutorial.md").read_text()
    snippets = list(SNIPPET.finditer(text))
    assert len(snippets) >= 6
    for m in snippets:
        source = (ROOT / m["path"]).read_text()
        assert m["body"].strip() in source, f"docs/plugins/tutorial.md is out of date for {m['path']}"


@pytest.mark.parametrize(
    "page",
    ["README.md", "docs/user-guide.md", "docs/architecture.md", "docs/plugins/tutorial.md", "docs/reliability.md"],
)
def test_paths_named_in_docs_exist(page: str) -> None:
    text = (ROOT / page).read_text()
    named = set(
        re.findall(r"`((?:docs|examples|core|plugins|scripts|tests|benchmarks|constraints)/[A-Za-z0-9_./-]+)`", text)
    )
    missing = [p for p in named if not (ROOT / p.rstrip("/")).exists() and "*" not in p]
    assert not missing, f"{page} names paths that do not exist: {sorted(missing)}"


def test_manifest_reference_lists_every_core_field() -> None:
    """Core's sections and the ones plugins own (``agilerl_register_sections``), training's plugin fields included."""
    from agilerl.models import section_models, sections

    page = (ROOT / "docs" / "reference" / "manifest.md").read_text()
    models = section_models()
    assert models["network"] is not None and models["replay_buffer"] is not None  # the gym plugin owns them
    for model in (models["training"], sections.MutationSpec, models["network"], models["replay_buffer"]):
        for name in model.model_fields:
            assert f"`{name}`" in page, f"{model.__name__}.{name} missing: run scripts/gen_docs.py"


def test_abridged_manifests_in_docs_agree_with_their_files() -> None:
    """A block headed ``# examples/x.yaml (abridged)`` may leave fields out, never change one."""
    block = re.compile(r"```yaml\n# (?P<path>examples/[^ ]+\.yaml) \(abridged\)\n(?P<body>.*?)```", re.S)
    found = 0
    for page in ["README.md", *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]:
        for m in block.finditer((ROOT / page).read_text()):
            found += 1
            full = yaml.safe_load((ROOT / m["path"]).read_text())
            for section, fields in yaml.safe_load(m["body"]).items():
                if not isinstance(fields, dict):
                    assert full[section] == fields, (page, section)
                    continue
                for key, value in fields.items():
                    assert full[section][key] == value, (
                        f"{page}: {section}.{key} is {value!r}, {m['path']} has {full[section][key]!r}"
                    )
    assert found >= 1


def test_the_bad_input_table_is_current() -> None:
    """docs/reliability.md's table of bad inputs is generated from tests/data/bad/ (and the tests named
    beside it); a corpus file added, removed or re-worded without `python scripts/gen_docs.py` fails."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gen_docs import NOT_IN_CORPUS, reliability_page
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    text = (ROOT / "docs" / "reliability.md").read_text()
    assert text == reliability_page(text), "docs/reliability.md's bad-input table is stale: run scripts/gen_docs.py"
    for *_, test in NOT_IN_CORPUS:
        path, _, name = test.partition("::")
        assert (ROOT / path).is_file() and f"def {name.split('[')[0]}(" in (ROOT / path).read_text(), test
