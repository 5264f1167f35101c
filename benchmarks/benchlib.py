"""What every benchmark script shares: peers (installed or skipped with a reason), smoke mode, dated results.

A benchmark script measures both sides of a comparison in one run, interleaved, and hands its raw
numbers to a :class:`Record`, which writes ``benchmarks/results/<script>/<UTC time>.json`` with the
date, the load average before and after, the torch / numpy versions, the git commit and the command.
``benchmarks/summarize.py`` builds the summary table of ``benchmarks/README.md`` from those files.

Smoke mode (``AGILERL_BENCH_SMOKE=1``, set by ``python benchmarks/run.py --smoke``) proves that the
commands work with tiny budgets: nothing is written under ``benchmarks/`` and no figure is claimed.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
SMOKE = os.environ.get("AGILERL_BENCH_SMOKE") == "1"
#: Set (to a reason) where the PyPI AgileRL venv must not be built, e.g. in CI; its sides are skipped.
NO_AGILERL = os.environ.get("AGILERL_BENCH_SKIP_AGILERL", "")
PEER_HINT = "pip install -r benchmarks/requirements.txt -r benchmarks/llm/requirements.txt"


def skip(side: str, reason: str) -> None:
    """Say, on one line the smoke runner echoes, that ``side`` is left out and why."""
    print(f"[bench] SKIP {side}: {reason}", flush=True)


def has_module(module: str, side: str) -> bool:
    """Whether ``module`` imports in this interpreter; prints why the side is skipped when it does not."""
    if importlib.util.find_spec(module) is not None:
        return True
    skip(side, f"`{module}` is not installed ({PEER_HINT})")
    return False


def agilerl_python(side: str = "AgileRL 2.58") -> Path | None:
    """The PyPI AgileRL venv's python (made on first use), or None with a printed reason."""
    if NO_AGILERL:
        skip(side, NO_AGILERL)
        return None
    sys.path.insert(0, str(HERE))
    from agilerl_venv import ensure_agilerl_venv

    try:
        return ensure_agilerl_venv()
    except (subprocess.CalledProcessError, OSError) as exc:
        skip(side, f"the PyPI AgileRL venv could not be installed ({exc})")
        return None


def scratch_dir(prefix: str) -> Path:
    """A fresh temporary directory: one per run, so no two runs share a run directory (its lock)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def cpu_seconds() -> float:
    """This process's user + system CPU seconds so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def worker_result(cmd: list[str], what: str) -> dict[str, Any]:
    """Run a worker command with one BLAS/OpenMP thread and return the JSON of its ``RESULT <json>``
    line; a worker that prints none fails with the tail of its output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]
    raise RuntimeError(f"{what} worker failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_model() -> str | None:
    """The processor's name (``/proc/cpuinfo``'s ``model name``, else ``platform.processor()``): ratios
    are measured side by side on one machine, but the host a session lands on changes (the README's
    tables name an Intel Xeon; 2026-12-07's session ran on an AMD EPYC), so each record says which one
    measured it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def _git_commit() -> str | None:
    """HEAD's short hash, with ``+dirty`` when tracked source files differ from it (results files
    aside): the figures were then measured on code no commit holds."""
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    commit = out.stdout.strip()
    if not commit:
        return None
    changed = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results",
         ":!benchmarks/README.md"],
        capture_output=True, text=True,
    )  # fmt: skip
    return f"{commit}+dirty" if changed.stdout.strip() else commit


def _versions() -> dict[str, str]:
    import platform

    versions = {"python": platform.python_version()}
    for name in ("torch", "numpy", "gymnasium", "stable_baselines3", "sb3_contrib", "transformers", "trl"):
        try:
            mod = __import__(name)
        except ImportError:
            continue
        versions[name] = str(getattr(mod, "__version__", "?"))
    return versions


class Record:
    """One run of one benchmark script: its metadata now, its raw results and summary rows at :meth:`save`.

    A summary row is one ratio, measured side by side in this run::

        record.row("ppo_cartpole_sps", what="PPO env-steps/s, CartPole, 8 envs", against="SB3 2.9.2",
                   wall=2.05, cpu=2.10, target="per CPU s >= 2.2x", met=False, detail="4,100 vs 2,000 steps/s")

    ``wall`` / ``cpu`` are ours / theirs for that row's quantity (throughput: > 1 is better; time:
    < 1 is better; the row's ``what`` says which).
    """

    def __init__(self, script: str) -> None:
        self.script = script
        self.started = _dt.datetime.now(_dt.UTC)
        self.load_before = loadavg()
        self.command = shlex.join(["python", os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
        self.rows: list[dict[str, Any]] = []
        print(f"[bench] {self.started:%Y-%m-%d %H:%M} UTC, load average {self.load_before}", flush=True)

    def row(self, key: str, *, what: str, against: str, wall: float | None, cpu: float | None, target: str,
            met: bool | None, detail: str = "", repeats: int = 1, decimals: int = 2) -> None:  # fmt: skip
        """One summary row; ``decimals``: how many the table prints its ratios with (3 where the
        target is decided in the third, e.g. peak RSS against 0.8x)."""
        self.rows.append({"key": key, "what": what, "against": against, "ratio_wall": wall, "ratio_cpu": cpu,
                          "target": target, "met": met, "detail": detail, "repeats": repeats,
                          "decimals": decimals})  # fmt: skip
        w = "-" if wall is None else f"{wall:.{decimals}f}x"
        c = "-" if cpu is None else f"{cpu:.{decimals}f}x"
        print(f"[bench] {what} vs {against}: {w} wall, {c} per CPU s (target {target}): {detail}", flush=True)

    def save(self, raw: Any, name: str | None = None) -> Path | None:
        """Write the result file (not in smoke mode); returns its path. ``name``: the file's path under
        ``results/<script>/`` without ``.json`` (default: the UTC start time), for a script whose
        runs are cells of their own (``gym/bench_learning``: ``<cell>/<side>-s<seed>-<time>``)."""
        doc = {
            "script": self.script,
            "date": self.started.isoformat(timespec="seconds"),
            "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "load_before": self.load_before,
            "load_after": loadavg(),
            "cpus": os.cpu_count(),
            "cpu_model": cpu_model(),
            "commit": _git_commit(),
            "command": self.command,
            "versions": _versions(),
            "summary": self.rows,
            "raw": raw,
        }
        print(f"[bench] load average after {doc['load_after']}", flush=True)
        if SMOKE:
            print("[bench] smoke run: nothing written", flush=True)
            return None
        out = RESULTS / self.script / f"{name or f'{self.started:%Y%m%dT%H%M%SZ}'}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(f"[bench] wrote {out.relative_to(ROOT)}", flush=True)
        return out


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None where either side has no finite, non-zero figure (e.g. never solved)."""
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or b == 0:
        return None
    return a / b


def paired(ours: list[float], theirs: list[float]) -> tuple[float, list[float]]:
    """The median over repeats of ours / theirs within each repeat, and the per-repeat ratios.

    The sides of one repeat run back to back, so each repeat's ratio sees one load; a median of
    each side's own figures would pair a quiet run of one side with a loaded run of the other.
    """
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    return statistics.median(ratios), ratios
