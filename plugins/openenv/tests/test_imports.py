"""Heavy imports (openenv-core pulls gradio, fastapi, uvicorn) stay out of runs that do not use us."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GAME = str(Path(__file__).resolve().parents[3] / "examples" / "openenv" / "word_game.py") + ":SayWordGame"
HEAVY = ("openenv", "gradio", "fastapi", "uvicorn", "websockets", "fastmcp", "torch")


def _loaded_after(code: str) -> list[str]:
    probe = code + "\nimport sys\nprint(sorted({m.split('.')[0] for m in sys.modules}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    loaded = eval(out.strip().splitlines()[-1])
    return [m for m in HEAVY if m in loaded]


def test_import_agilerl_and_our_hooks_load_nothing_heavy() -> None:
    assert _loaded_after("import agilerl, agilerl_plugin_openenv.hooks, agilerl_plugin_openenv") == []


def test_plugin_loading_and_validate_load_nothing_heavy(tmp_path, tiny_model_dir) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "m.yaml"
    # The live check asks the server with urllib (a closed port here: refused), never through openenv-core.
    manifest.write_text(
        f"algorithm: {{name: GRPO}}\nnetwork: {{pretrained_model_name_or_path: '{tiny_model_dir}'}}\n"
        "environment: {env_type: rollout, env_url: 'http://127.0.0.1:9', max_turns: 1}\ntraining: {max_steps: 1}\n",
        encoding="utf-8",
    )
    code = (
        "from agilerl.plugins import get_plugin_manager\n"
        "pm = get_plugin_manager()\n"
        "from agilerl_plugin_llm.rollout.sources import rollout_sources\n"
        "assert 'env_url' in rollout_sources(), rollout_sources()\n"
        # A rollout run with another source (a Python entrypoint) builds its envs without us.
        "from agilerl_plugin_llm.rollout.sources import build_source\n"
        "from agilerl_plugin_llm.specs import LLMEnvSpec\n"
        f"spec = LLMEnvSpec(env_type='rollout', entrypoint={GAME!r})\n"
        "make_env, _, field = build_source(spec)\n"
        "assert field == 'entrypoint' and make_env().reset(seed=0)[0] == 'Say one.'\n"
        "from agilerl.cli import main\n"
        f"assert main(['validate', {str(manifest)!r}]) == 1\n"  # the server at port 9 is not running
        f"open({str(manifest)!r}, 'a').write('validation: {{check_env: false}}\\n')\n"
        f"assert main(['validate', {str(manifest)!r}]) == 0"
    )
    assert _loaded_after(code) == []
