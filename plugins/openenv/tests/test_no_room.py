"""GRPO against an OpenEnv server whose tool prompt fills ``max_context_length`` (issue 30): it used
to train on 0-token completions (loss 0, reward 0, exit 0, no warning); now the first step stops with
an error naming the prompt's length and the context budget."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agilerl_plugin_openenv.server import serve_in_thread


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agilerl_plugin_llm.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("no-room") / "model")


def test_a_prompt_that_fills_the_context_is_an_error_naming_both_numbers(  # type: ignore[no-untyped-def]
    native, tiny_model, write_manifest, run_cli, tmp_path
) -> None:
    manifest: dict[str, Any] = {
        "algorithm": {"name": "GRPO", "group_size": 2, "batch_size": 2, "max_output_tokens": 6,
                      "gradient_checkpointing": False, "use_liger_loss": False},
        "network": {"pretrained_model_name_or_path": str(tiny_model), "max_context_length": 40},
        "environment": {"env_type": "rollout", "max_turns": 1, "request_timeout_s": 10, "mcp_tool": "submit"},
        "training": {"max_steps": 2, "evo_steps": 1, "eval_loop": 1, "seed": 0, "run_dir": str(tmp_path / "run")},
    }  # fmt: skip
    with serve_in_thread(native.server_app("mcp", 4)) as served:
        manifest["environment"]["env_url"] = served.url
        code, _out, err = run_cli("train", write_manifest(manifest), "--no-progress")
    assert code == 1, err
    m = re.search(
        r"the prompt leaves no room to generate: it is (\d+) tokens .* network\.max_context_length is 40", err
    )
    assert m and int(m[1]) >= 40, err
    assert f"Raise network.max_context_length to at least {int(m[1]) + 6}" in err
    assert "Traceback" not in err
