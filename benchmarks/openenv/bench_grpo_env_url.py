"""What OpenEnv costs inside a training run: GRPO iterations with the word game in-process
(``environment.entrypoint``) versus served by ``agilerl serve-env`` on loopback (``environment.env_url``).

Same manifest (``examples/openenv/grpo_word_game.yaml``), tiny model, seed and iterations; only the
env source differs. Reports the mean seconds per iteration and per rollout (generation + env) from
each run's metrics, and the ratio. Run from the repository root::

    python benchmarks/openenv/bench_grpo_env_url.py [--iterations 30] [--turns 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchlib

REPO = Path(__file__).resolve().parents[2]
GAME = "examples/openenv/word_game.py:SayWordGame"


def train(manifest: Path, run_dir: Path, overrides: list[str]) -> list[dict[str, str]]:
    from agilerl.cli import main

    args = ["train", str(manifest), "--no-progress", "--set", f"training.run_dir={run_dir}"]
    for o in overrides:
        args += ["--set", o]
    if main(args) != 0:
        raise SystemExit("training failed")
    with (run_dir / "metrics.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def mean(rows: list[dict[str, str]], key: str) -> float:
    values = [float(r[key]) for r in rows[1:]] or [float(r[key]) for r in rows]  # skip the warm-up generation
    return sum(values) / len(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--turns", type=int, default=1)
    args = parser.parse_args()
    record = benchlib.Record("openenv/bench_grpo_env_url")
    os.chdir(REPO)
    import torch

    torch.set_num_threads(1)
    from agilerl_plugin_llm.testing import build_tiny_model

    tmp = Path(tempfile.mkdtemp(prefix="bench-openenv-"))
    model = build_tiny_model(tmp / "model")
    manifest = REPO / "examples" / "openenv" / "grpo_word_game.yaml"
    common = [
        f"network.pretrained_model_name_or_path={model}",
        f"training.max_steps={args.iterations}",
        f"environment.max_turns={args.turns}",
        "training.checkpoint_steps=100000",
    ]
    config = json.dumps({"turns": args.turns})
    local = train(manifest, tmp / "local", [*common, "environment.env_url=null", f"environment.entrypoint={GAME}",
                                            f"environment.env_config={config}", "environment.request_timeout_s=null"])  # fmt: skip
    code = "import sys; from agilerl.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve-env", GAME, "--port", "0", "--env-config", config],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "AGILERL_LOAD_PLUGINS": "openenv"},
    )  # fmt: skip
    assert proc.stdout is not None
    url = next(m.group(1) for line in proc.stdout if (m := re.search(r"on (http://127\.0\.0\.1:\d+)", line)))
    try:
        remote = train(manifest, tmp / "remote", [*common, f"environment.env_url={url}"])
    finally:
        proc.kill()
        proc.wait()
    print(f"# GRPO, tiny model, {args.iterations} iterations x 16 episodes x {args.turns} turn(s), 1 torch thread; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| env source | s/iteration | rollout s/iteration | final train reward |")
    print("|---|---:|---:|---:|")
    for name, rows in (("entrypoint (in-process)", local), ("env_url (serve-env, loopback)", remote)):
        print(f"| {name} | {mean(rows, 'train/iteration_s'):.3f} | {mean(rows, 'train/rollout_s'):.3f} | "
              f"{float(rows[-1]['train/reward']):.2f} |")  # fmt: skip
    ratio = mean(remote, "train/iteration_s") / mean(local, "train/iteration_s")
    print(f"\noverhead per iteration: {ratio:.2f}x")
    record.save({"args": vars(args), "ratio": ratio, "local": local, "remote": remote})


if __name__ == "__main__":
    main()
