"""One permission policy for everything a run writes (docs/reliability.md, "File permissions").

Run directories, metrics, ``population.jsonl``, TensorBoard events, checkpoints (``best.pt``,
``last.pt``, ``elite.pt``, ``checkpoint_*.pt``) and exported policies are all created with the
process's umask applied to 0666 (files) and 0777 (directories), as any other program's files:
0644/0755 under the usual umask 022, 0600/0700 under umask 077. Nothing secret is written into
them (literal credentials are refused at validation), so nothing needs a mode of its own.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agilerl.export import export_policy
from agilerl.training.trainer import LocalTrainer

pytest.importorskip("agilerl_plugin_gym")


def _manifest(run_dir: Path) -> dict[str, object]:
    return {
        "algorithm": {"name": "PPO", "batch_size": 32, "learn_step": 64},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
        "network": {"encoder_config": {"arch": "mlp", "hidden_size": [8]}, "head_config": {"hidden_size": []}},
        "training": {"max_steps": 128, "evo_steps": 64, "checkpoint_steps": 64, "pop_size": 1, "seed": 0,
                     "eval_loop": 1, "progress": False, "run_dir": str(run_dir)},
        "logging": {"tensorboard": True},
    }  # fmt: skip


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_every_file_of_a_run_follows_the_umask(tmp_path: Path, mask: int) -> None:
    run_dir = tmp_path / "runs" / "one"
    old = os.umask(mask)
    try:
        LocalTrainer.from_manifest(_manifest(run_dir)).train()
        export_policy(run_dir, format="torchscript", output=run_dir / "policy.pt")
        # a resume rewrites metrics.jsonl (cut back to its checkpoint): the mode stays the same
        ckpt = sorted(run_dir.glob("checkpoint_*.pt"))[0]
        LocalTrainer.from_checkpoint(ckpt).train()
    finally:
        os.umask(old)
    names = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")}
    for expected in ("metrics.jsonl", "population.jsonl", "best.pt", "last.pt", "policy.pt", "policy.pt.json"):
        assert expected in names, sorted(names)
    assert any(n.startswith("tensorboard/") and "tfevents" in n for n in names), sorted(names)
    assert any(n.startswith("checkpoint_") for n in names)
    for p in [run_dir, *run_dir.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        want = (0o777 if p.is_dir() else 0o666) & ~mask
        assert mode == want, f"{p.relative_to(tmp_path)}: {oct(mode)}, want {oct(want)} under umask {oct(mask)}"
