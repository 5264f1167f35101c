"""The separate virtualenv with PyPI ``agilerl`` that the side-by-side benchmarks compare against.

One venv for every benchmark: ``benchmarks/.venv-agilerl`` (or ``$AGILERL_VENV``), created on first
use with AgileRL 2.58, ``peft`` (AgileRL imports it without declaring it), ``mpe2`` (the
multi-agent benchmark's env) and ``torch==2.13.0`` (the CPU wheel pip finds locally here).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DEFAULT_VENV = Path(os.environ.get("AGILERL_VENV", Path(__file__).resolve().parent / ".venv-agilerl"))
AGILERL_PIN = ["agilerl==2.58.0", "peft", "mpe2", "torch==2.13.0"]


def ensure_agilerl_venv(venv: Path = DEFAULT_VENV) -> Path:
    """The venv's python, creating the venv and installing AgileRL into it when it can't import it."""
    python = venv / "bin" / "python"
    if (
        python.exists()
        and subprocess.run([str(python), "-c", "import agilerl, peft, mpe2"], capture_output=True).returncode == 0
    ):
        return python
    print(f"[bench] creating {venv} and installing {' '.join(AGILERL_PIN)} (one-off, a few minutes)", flush=True)
    if not python.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *AGILERL_PIN], check=True)
    return python
