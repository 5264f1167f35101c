"""What a newcomer sees on the console (issue 30): a bar on a terminal and plain lines in a log,
no colour codes in files, "batches" not "batchs", the elapsed time in the summary, and no
MUJOCO_LOG.TXT left in the working directory."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
import yaml

from agilerl.training.metrics import Progress, plural

ROOT = Path(__file__).resolve().parents[1]
AGILERL_CLI = [sys.executable, "-m", "agilerl.cli"]
PPO = ROOT / "examples" / "ppo_cartpole.yaml"


def _small_ppo(tmp_path: Path) -> Path:
    data = yaml.safe_load(PPO.read_text())
    data["training"].update(max_steps=2048, evo_steps=1024, eval_steps=50)
    data["environment"]["name"] = "CartPole-v0"  # gymnasium colours its "out of date" warning
    path = tmp_path / "ppo.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _in_a_terminal(args: list[str], cwd: Path) -> str:
    """Run ``agilerl ARGS`` with stdout and stderr on a pseudo-terminal; what it printed."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a sized terminal
        os.chdir(cwd)
        os.execv(sys.executable, [*AGILERL_CLI, *args])
    out = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


def test_units_are_pluralised_in_progress_lines() -> None:
    assert plural("batch") == "batches" and plural("step") == "steps" and plural("episode") == "episodes"
    p = Progress(6, enabled=False, unit="batch")
    p.update(6)
    assert p.line().startswith("6/6 batches (100%)") and "batchs" not in p.line()


def test_a_log_file_gets_plain_lines_and_the_summary_says_how_long_it_took(tmp_path: Path) -> None:
    proc = subprocess.run([*AGILERL_CLI, "train", str(_small_ppo(tmp_path)), "--run-dir", "run"],
                          cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stderr and "\x1b" not in proc.stdout  # no ANSI codes in a pipe
    assert "warning: WARN: The environment CartPole-v0 is out of date" in proc.stderr
    assert "%|" not in proc.stderr  # no bar: a line per generation instead
    assert "[agilerl] generation 0: steps 1024" in proc.stderr
    done = next(x for x in proc.stdout.splitlines() if x.startswith("done:"))
    assert " generation(s) in " in done and (done.split(" in ")[1].split(",")[0].endswith((" s", " min")))


def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    out = _in_a_terminal(["train", str(_small_ppo(tmp_path)), "--run-dir", "run"], tmp_path)
    assert "%|" in out and "2.05k/2.05k" in out, out  # tqdm's bar over the run's steps, to its end
    assert "[agilerl] generation 1:" in out


def test_validating_a_mujoco_env_writes_no_mujoco_log(tmp_path: Path) -> None:
    pytest.importorskip("mujoco")
    manifest = ROOT.parent / "shared" / "agilerl-manifests" / "configs" / "training" / "ddpg" / "ddpg_simba.yaml"
    if not manifest.exists():
        pytest.skip("AgileRL's manifests are not beside this checkout (../shared)")
    proc = subprocess.run([*AGILERL_CLI, "validate", str(manifest)], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    assert "[agilerl] MuJoCo: compiler attribute 'settotalmass' is deprecated" in proc.stderr  # said, not filed
    assert not (ROOT / "MUJOCO_LOG.TXT").exists()  # and none is committed at the root
