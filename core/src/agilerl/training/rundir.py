"""The run directory: one run at a time, never silently reused, metrics that resume cleanly.

- :class:`RunDirLock`: an exclusive ``flock`` on ``RUN_DIR/.agilerl.lock`` held for the whole run.
  A second run into the same directory is refused at once, naming the pid that holds it. The
  kernel drops the lock when the process dies (even by SIGKILL), so a killed run never leaves a
  stale lock behind.
- :func:`claim`: a directory that already holds a run (metrics or checkpoints) is refused unless
  the run resumes (``--resume``) or ``overwrite`` asks to replace it.
- :func:`resume_point`: what ``--resume PATH`` continues (a checkpoint, or the run directory's
  checkpoint holding the newest state by generation and step count, :func:`newest_state`);
  :func:`run_dir_of`: the run directory a checkpoint lies in, where the resumed run writes.
- :func:`truncate_records`: a resumed run first cuts every record file (``metrics.jsonl``,
  ``metrics.csv``, ``population.jsonl``) back to the checkpoint it resumes from, so the rows it
  logs again are not duplicated (and a line a kill or a full disk cut short is dropped).
- :func:`prune_checkpoints`: keep only the newest ``keep`` numbered checkpoints.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agilerl.checkpoint as checkpoint
from agilerl.checkpoint import atomic_write
from agilerl.errors import AgileRLError

LOCK_NAME = ".agilerl.lock"
#: Files (and the tensorboard folder) a run writes into its directory; ``overwrite`` removes them.
RUN_FILES = ("metrics.jsonl", "metrics.csv", "population.jsonl", "elite.pt", "best.pt", "last.pt", "learning_curve.png",
             "completions.jsonl")  # fmt: skip
#: The run's record files, one JSON row per line, each row naming its ``generation``.
RECORD_FILES = ("metrics.jsonl", "population.jsonl")


class RunDirError(AgileRLError):
    """The run directory is in use, already holds a run, or cannot be written."""

    exit_code = 2


@contextlib.contextmanager
def RunDirLock(run_dir: Path) -> Iterator[None]:  # noqa: N802 - used like a class: `with RunDirLock(d):`
    """Hold an exclusive lock on ``run_dir`` for the duration of the block.

    The other processes of a multi-process launch (``RANK`` > 0 under torchrun/accelerate) belong
    to rank 0's run and write nothing to its directory: only rank 0 takes the lock.
    """
    if os.environ.get("RANK", "0") != "0":
        yield
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (documented in docs/reliability.md)
        yield
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)  # the umask applies
    except OSError as exc:
        raise RunDirError(f"cannot create the run directory {run_dir}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            raise RunDirError(
                f"run directory {run_dir} is in use by another run ({holder}); wait for it to finish, "
                "or give this run its own --run-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        remove_stale_temp_files(run_dir)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def check_not_in_use(run_dir: Path) -> None:
    """Raise :class:`RunDirError` now if another run holds ``run_dir`` (before anything is loaded)."""
    if (run_dir / LOCK_NAME).exists():
        with RunDirLock(run_dir):
            pass


def holds_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` already holds a run: metrics, an elite or a checkpoint in it."""
    if not run_dir.is_dir():
        return False
    return any((run_dir / name).exists() for name in RUN_FILES) or any(run_dir.glob("checkpoint*.pt"))


def claim(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse a directory holding another run, unless resuming or overwriting (which clears it)."""
    if resume or not holds_run(run_dir):
        return
    if not overwrite:
        raise RunDirError(
            f"run directory {run_dir} already holds a run (metrics or checkpoints). Continue it with "
            "agilerl train --resume CHECKPOINT, replace it with --overwrite, or choose another --run-dir"
        )
    for name in RUN_FILES:
        with contextlib.suppress(FileNotFoundError):
            (run_dir / name).unlink()
    shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
    for path in run_dir.glob("checkpoint*.pt"):
        path.unlink()


def latest_checkpoint(directory: Path) -> Path:
    """The checkpoint in ``directory`` holding the run's newest state (see :func:`newest_state`)."""
    return newest_state(directory)[0]


def state_order(payload: dict[str, Any]) -> tuple[int, int, int]:
    """Where a checkpoint's state lies in its run's course: ``(generation, phase, steps)``.

    A run goes generation by generation; within one, a ``"trained"`` checkpoint (Ctrl-C or a failed
    member part way through its training) comes before the ``"evaluated"`` one that completes it, and
    among interrupted ones the one with more steps trained is later. So the largest key is the newest
    state, whatever the files' names or modification times say."""
    agents = payload.get("agents") or []
    steps = sum(int(a.get("steps", 0) or 0) for a in agents if isinstance(a, dict))
    return int(payload.get("generation", 0)), int(payload.get("phase") == "evaluated"), steps


def describe_state(payload: dict[str, Any]) -> str:
    """``generation 3 (evaluated), 6144 steps``: the state :func:`state_order` ranks, in words."""
    generation, evaluated, steps = state_order(payload)
    phase = "evaluated" if evaluated else "part-trained"
    return f"generation {generation} ({phase}), {steps} steps"


def newest_state(directory: Path) -> tuple[Path, dict[str, Any]]:
    """The intact checkpoint of ``directory`` holding the run's newest state, and its payload.

    Every checkpoint the run writes there is a candidate: the numbered ones (only the highest intact
    number need be read: numbers count steps), ``checkpoint.pt``, ``checkpoint_interrupted.pt`` and
    ``last.pt``. They are ranked by :func:`state_order`, never by modification time (a run
    interrupted, resumed and finished leaves an older ``checkpoint_interrupted.pt`` beside a newer
    ``last.pt``). On a tie a numbered checkpoint is preferred to ``last.pt`` (the same state). A
    damaged file is skipped with a warning naming it."""
    numbered = sorted(
        (p for p in directory.glob("checkpoint_*.pt") if p.is_file() and _number(p) is not None),
        key=lambda p: (_number(p), p.stat().st_mtime_ns),
        reverse=True,
    )
    singles = [directory / n for n in ("checkpoint.pt", "checkpoint_interrupted.pt", "last.pt")]
    singles = [p for p in singles if p.is_file()]
    # any other checkpoint*.pt (a hand-named copy) competes like a single file
    singles += sorted(
        p for p in directory.glob("checkpoint*.pt") if p.is_file() and p not in singles and p not in numbered
    )
    if not numbered and not singles:
        raise checkpoint.no_checkpoint(directory, "checkpoint*.pt or last.pt")
    loaded: list[tuple[Path, dict[str, Any]]] = []
    first_error: checkpoint.CheckpointCorruptError | None = None
    if numbered:
        try:
            loaded.append(checkpoint.newest_intact(numbered))
        except checkpoint.CheckpointCorruptError as exc:
            first_error = exc
    for path in singles:
        try:
            loaded.append((path, checkpoint.load(path)))
        except checkpoint.CheckpointCorruptError as exc:
            import logging

            logging.getLogger("agilerl.checkpoint").warning("%s; skipping it", exc)
            first_error = first_error or exc
    if not loaded:
        assert first_error is not None
        raise first_error
    # max() keeps the first of equal keys: numbered, then checkpoint.pt, interrupted, last.pt
    return max(loaded, key=lambda found: state_order(found[1]))


def _number(path: Path) -> int | None:
    m = re.match(r"^checkpoint_(\d+)\.pt$", path.name)
    return int(m.group(1)) if m else None


def resume_point(path: Path) -> tuple[Path, dict[str, Any]]:
    """The checkpoint ``--resume PATH`` continues and its payload: ``PATH`` itself, or the run
    directory ``PATH``'s checkpoint holding the newest state (the one rule for the CLI and
    :class:`LocalTrainer`)."""
    return newest_state(path) if path.is_dir() else (path, checkpoint.load(path))


def run_dir_of(checkpoint_file: Path) -> Path | None:
    """The run directory ``checkpoint_file`` lies in: its folder, when that holds a run's records
    (``metrics.jsonl``, ``population.jsonl``, ``metrics.csv``) or lock file; ``None`` for a checkpoint
    kept anywhere else (``training.checkpoint_path`` outside the run dir, a file copied on its own).
    A resumed run continues in it (a copy of a run dir continues in the copy), unless told otherwise."""
    folder = checkpoint_file.parent
    marks = (*RECORD_FILES, "metrics.csv", LOCK_NAME)
    return folder if any((folder / name).is_file() for name in marks) else None


def remove_stale_temp_files(run_dir: Path) -> list[Path]:
    """Temp files a killed checkpoint write left behind (never loaded; removed under the lock)."""
    removed = []
    for p in run_dir.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            removed.append(p)
    return removed


def numbered_checkpoints(base: Path) -> list[tuple[int, Path]]:
    """``BASE_<steps>.pt`` files beside ``base``, oldest first."""
    if not base.parent.is_dir():
        return []
    pattern = re.compile(rf"^{re.escape(base.name)}_(\d+)\.pt$")
    found = []
    for p in base.parent.iterdir():
        m = pattern.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def prune_checkpoints(base: Path, keep: int | None, *, protect: Path | None = None) -> list[Path]:
    """Delete all but the newest ``keep`` numbered checkpoints of ``base``; return those deleted."""
    if keep is None:
        return []
    files = numbered_checkpoints(base)
    removed = []
    for _, path in files[: max(len(files) - keep, 0)]:
        if protect is not None and path == protect:
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def _read_rows(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The rows of a JSONL record file and how many lines it has (a line cut short is no row)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rows: list[dict[str, Any]] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a kill or a full disk: drop it
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows, len(lines)


def truncate_records(run_dir: Path, last_generation: int) -> int:
    """Cut every record file of ``run_dir`` back to generation ``last_generation`` (rows of later
    generations, and damaged lines, go); ``metrics.csv`` is rewritten from the kept metric rows.
    Returns the number of lines dropped."""
    dropped = 0
    for name in RECORD_FILES:
        path = run_dir / name
        if not path.exists():
            continue
        rows, lines = _read_rows(path)
        kept = [r for r in rows if _generation(r) <= last_generation]
        if lines == 0 or (len(kept) == lines and path.read_bytes().endswith(b"\n")):
            continue  # nothing to cut, and no line left unfinished
        dropped += lines - len(kept)
        text = "".join(json.dumps(r) + "\n" for r in kept)
        atomic_write(path, lambda fh, text=text: fh.write(text.encode("utf-8")))
        if name == "metrics.jsonl":
            _rewrite_csv(run_dir / "metrics.csv", kept)
    return dropped


def _generation(row: dict[str, Any]) -> int:
    try:
        return int(row.get("generation", -1))
    except (TypeError, ValueError):
        return -1


def _rewrite_csv(csv_path: Path, rows: list[dict[str, Any]]) -> None:
    if not csv_path.exists():
        return
    fields = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    for r in rows:
        writer.writerow({k: r.get(k) for k in fields})
    data = buf.getvalue().encode("utf-8")
    atomic_write(csv_path, lambda fh: fh.write(data))


__all__ = ["LOCK_NAME", "RECORD_FILES", "RUN_FILES", "RunDirError", "RunDirLock", "check_not_in_use", "claim", "holds_run",
           "describe_state", "latest_checkpoint", "newest_state", "numbered_checkpoints", "prune_checkpoints", "remove_stale_temp_files", "resume_point", "run_dir_of",
           "state_order", "truncate_records"]  # fmt: skip
