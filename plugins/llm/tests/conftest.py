"""Shared fixtures of the LLM plugin's tests: the reverse task's SFT warm start, built once per session.

The learning tests (``test_learning_reverse.py``, ``test_ppo.py``, ``test_trl_options.py``) train from
it on the reverse task (:mod:`agilerl_plugin_llm.tasks`), whose answer depends on the prompt; "say
eight" stays a smoke test only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REVERSE_EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llm" / "reverse"
REVERSE_SPLIT = 0.75  # 512 rows: 384 to train on, 128 held out


def _cli(*args: Any) -> None:
    from agilerl.cli import main

    assert main([str(a) for a in args]) == 0


def write_reverse_manifest(name: str, work: Path, **training: Any) -> Path:
    """The reverse example's ``name`` manifest with its ``work/`` paths under ``work`` (and its rubric by
    absolute path), ``training`` fields updated; written to ``work/name``."""
    data = yaml.safe_load((REVERSE_EXAMPLE / name).read_text())
    text = json.dumps(data).replace('"work/', f'"{work}/')
    data = json.loads(text.replace('"reverse_rubric.py"', f'"{REVERSE_EXAMPLE}/reverse_rubric.py"'))
    data["training"].update(training)
    path = work / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def reverse_manifest() -> Callable[..., Path]:
    """:func:`write_reverse_manifest`, for tests in other modules."""
    return write_reverse_manifest


@pytest.fixture(scope="session")
def reverse_warm_start(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``examples/llm/reverse/sft.yaml`` (90 steps) trained and exported to ``work/sft-model``; held-out
    exact match before and after (``work``, ``heldout``, ``before``, ``after``). One per session: every
    learning test on the reverse task starts from it."""
    from agilerl_plugin_llm.tasks import exact_match, heldout_rows, read_rows, reverse_rows, write_rows
    from agilerl_plugin_llm.testing import build_tiny_model

    work = tmp_path_factory.mktemp("reverse")
    build_tiny_model(work / "tiny-model")
    write_rows(reverse_rows(512, seed=0), work / "reverse.jsonl")
    heldout = heldout_rows(read_rows(work / "reverse.jsonl"), REVERSE_SPLIT, 0)
    before = exact_match(work / "tiny-model", None, heldout)
    _cli("train", write_reverse_manifest("sft.yaml", work))
    _cli("export", work / "sft", work / "sft-model")
    after = exact_match(work / "sft-model", None, heldout)
    return {"work": work, "heldout": heldout, "before": before, "after": after}
