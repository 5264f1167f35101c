"""GEM's multi-turn games (PyPI ``gem-llm``, the ``gem`` extra): AgileRL's ``env_name: game:...`` envs,
played with real GEM games, offline. The games ship with the package (nothing is downloaded). Without
gem-llm they skip, unless ``AGILERL_REQUIRE_GEM=1`` (set by CI's ``.ci/run``) makes that a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agilerl.models import load_manifest
from agilerl.strategies import select_strategy

if os.environ.get("AGILERL_REQUIRE_GEM") == "1":  # CI sets it: an extra that failed to install fails, not skips
    try:
        import gem
    except ImportError as exc:
        raise RuntimeError("AGILERL_REQUIRE_GEM=1 but gem-llm does not import: bash scripts/install.sh (or pip "
                           f"install 'agilerl-plugin-llm[gem]'): {exc}") from exc  # fmt: skip
else:
    gem = pytest.importorskip("gem", reason="the gem extra (pip install 'agilerl-plugin-llm[gem]') is not installed")

GAMES = ["game:GuessTheNumber-v0-easy", "game:Sudoku-v0-hard"]


def gem_manifest(model_dir: Path, run_dir: Path, env_name: str, **algorithm: Any) -> dict[str, Any]:
    """AgileRL's multi-turn manifest shape (env_type: multiturn, env_name), at a CPU budget."""
    return {
        "algorithm": {"name": "LLMREINFORCE", "batch_size": 2, "lr": 1e-3, "beta": 0.0, "max_output_tokens": 8,
                      "temperature": 1.0, "gradient_checkpointing": False, **algorithm},
        "network": {"pretrained_model_name_or_path": str(model_dir), "max_context_length": 2048},
        "environment": {"env_type": "multiturn", "env_name": env_name, "max_turns": 3, "max_reward": 1.0},
        "training": {"max_steps": 3, "evo_steps": 3, "seed": 0, "progress": False, "run_dir": str(run_dir)},
    }  # fmt: skip


def test_importing_gem_leaves_the_root_logger_alone() -> None:
    # gem's __init__ calls logging.basicConfig: without the guard every agilerl log line prints twice.
    code = (
        "import logging\n"
        "from agilerl_plugin_llm.rollout.gem_envs import import_gem\n"
        "import_gem()\n"
        "root = logging.getLogger()\n"
        "assert root.handlers == [] and root.level == logging.WARNING, (root.handlers, root.level)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_env_name_builds_the_gem_game_and_its_board_reaches_the_prompt(tiny_model_dir: Path, tmp_path: Path) -> None:
    manifest = load_manifest(gem_manifest(tiny_model_dir, tmp_path, "game:Sudoku-v0-hard"))
    env = manifest.environment
    assert (env.entrypoint, env.factory) == ("game:Sudoku-v0-hard", "gem:make")
    envs = select_strategy(manifest.algorithm).make_env(manifest, seed=0)
    assert envs.max_turns == 3  # the manifest's max_turns wins over the game's own (50)
    harness = envs.make_train()
    prompt = envs.tokenizer.decode(harness.reset(seed=0))
    assert "You are playing  Sudoku" in prompt  # GEM's observation ...
    assert "R9" in prompt and "C1 C2 C3" in prompt  # ... and the board GEM sends in info["suffix"]
    # A malformed move: GEM gives -0.1 and ends the episode.
    reward = harness.step(envs.tokenizer("no move here", add_special_tokens=False)["input_ids"])
    assert reward == pytest.approx(-0.1) and harness.terminated


def test_without_max_turns_the_games_own_budget_is_used(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = gem_manifest(tiny_model_dir, tmp_path, "game:GuessTheNumber-v0-easy")
    del data["environment"]["max_turns"]
    manifest = load_manifest(data)
    assert (
        select_strategy(manifest.algorithm).make_env(manifest, seed=0).max_turns
        == gem.make("game:GuessTheNumber-v0-easy").max_turns
    )


@pytest.mark.parametrize("env_name", GAMES)
def test_llmreinforce_trains_on_a_gem_game_from_a_manifest(
    env_name: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    write_manifest: Callable[..., Path],
    run_cli: Callable[..., Any],
) -> None:
    run = tmp_path / "run"
    # baseline: none, so that GEM's -0.1 for the tiny model's invalid moves is a learning signal by itself
    # (with the batch-mean baseline a batch of equal rewards has zero advantage).
    manifest = gem_manifest(tiny_model_dir, run, env_name, baseline="none")
    code, out, err = run_cli("train", write_manifest(manifest))
    assert code == 0, out + err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows and all("fitness" in r for r in rows), rows
    trained = [r for r in rows if "train/loss" in r]
    assert trained and all(r["train/grad_norm"] > 1e-4 for r in trained), trained  # GEM's rewards reach the adapter
    rewards = [v for r in rows for k, v in r.items() if k.endswith("reward") and isinstance(v, (int, float))]
    # GEM's rewards: -0.1 for an invalid move (which ends the episode), 0 to 1 otherwise.
    assert rewards and all(-0.1 - 1e-6 <= v <= 1.0 + 1e-6 for v in rewards), rows
    assert (run / "last.pt").is_file()
    # Each agilerl log line is printed once (GEM's logging.basicConfig is undone).
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)) or not lines, err
