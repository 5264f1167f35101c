"""Metrics of a run and its console output.

Files in the run directory:

``metrics.jsonl`` / ``metrics.csv``
    one row per (generation, member): ``member`` (also ``agent``) is the member's id, its
    ``index``, which stays with it through selection (offspring get fresh ids), ``fitness``,
    ``steps``, ``mutation``, ``parent``, every mutated hyperparameter as ``hp/<name>`` and the
    strategy's learning metrics (losses, ...).
``population.jsonl``
    one row per generation: ``best``, ``mean``, ``std``, ``min`` of the members' fitness,
    ``best_ever`` (best so far), ``best_member``, ``steps`` (most steps of a member),
    ``total_steps``, ``steps_per_s``, ``wall_s``, ``target_score``.

TensorBoard (when installed) gets the same numbers under grouped tags: ``population/best``,
``population/mean``, ... and ``member/<id>/fitness``, ``member/<id>/hp/<name>``, ...; Weights & Biases
(``logging.wandb`` in the manifest) gets the population series and a per-member table.

Console output goes through the ``agilerl`` :mod:`logging` logger; :func:`console_handler` writes
through tqdm so a progress bar on the terminal is never broken by a log line.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agilerl.errors import AgileRLError

if TYPE_CHECKING:
    from agilerl.training.run import Run

log = logging.getLogger("agilerl")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class TqdmHandler(logging.Handler):
    """Prints records through ``tqdm.write``, above any progress bar, to ``sys.stderr`` as it is at
    the time of the record (so a handler outlives redirections, e.g. pytest's capture)."""

    #: Marks the handlers agilerl installs itself (the CLI swaps them, never the user's).
    agilerl_console = True

    def __init__(self, stream: Any = None, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self._stream = stream

    @property
    def stream(self) -> Any:
        return self._stream if self._stream is not None else sys.stderr

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            text = self.format(record)
            if not getattr(self.stream, "isatty", lambda: False)():
                text = _ANSI.sub("", text)  # colour codes from libraries stay out of log files
            tqdm.write(text, file=self.stream)
        except BrokenPipeError:
            raise
        except Exception:
            self.handleError(record)


def console_handler(level: int = logging.INFO) -> logging.Handler:
    """The handler the CLI installs on the ``agilerl`` logger: ``[agilerl] message`` on stderr."""
    handler = TqdmHandler(level=level)
    handler.setFormatter(logging.Formatter("[agilerl] %(message)s"))
    return handler


def ensure_console_logging() -> None:
    """Show the ``agilerl`` logger's INFO lines when nobody configured logging (library use)."""
    if log.handlers or logging.getLogger().handlers:
        return
    log.addHandler(console_handler())
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def population_summary(run: Run, population: list[Any], *, best_ever: float | None) -> dict[str, Any]:
    """The per-generation row of ``population.jsonl`` (NaN/never-evaluated members left out)."""
    fits = [float(a.fitness[-1]) for a in population if a.fitness and _finite(float(a.fitness[-1]))]
    best_member = max(
        population, key=lambda a: float(a.fitness[-1]) if a.fitness and _finite(a.fitness[-1]) else -math.inf
    )
    return {
        "generation": run.generation,
        "steps": max(a.steps for a in population),
        "total_steps": sum(a.steps for a in population),
        "pop_size": len(population),
        "best": max(fits) if fits else None,
        "mean": statistics.fmean(fits) if fits else None,
        "std": statistics.pstdev(fits) if len(fits) > 1 else (0.0 if fits else None),
        "min": min(fits) if fits else None,
        "best_ever": best_ever,
        "best_member": best_member.index if fits else None,
        "members": [a.index for a in population],
        "target_score": run.manifest.training.target_score,
    }


class MetricsLogger:
    """Writes member rows to ``metrics.jsonl``/``.csv`` and population rows to ``population.jsonl``."""

    def __init__(self, run_dir: Path, *, tensorboard: bool = True, wandb: dict[str, Any] | None = None) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = run_dir / "metrics.jsonl"
        self.csv_path = run_dir / "metrics.csv"
        self.population_path = run_dir / "population.jsonl"
        self._csv_fields: list[str] | None = None
        self._tb: Any = None
        self._wandb: Any = None
        self._pending: dict[str, Any] = {}
        # The sinks start with the first row, so a run that logs nothing (a complete run resumed)
        # leaves no TensorBoard file or W&B run behind.
        self._sinks_wanted: tuple[bool, dict[str, Any] | None] | None = (tensorboard, wandb)

    def _start_sinks(self) -> None:
        if self._sinks_wanted is None:
            return
        tensorboard, wandb = self._sinks_wanted
        self._sinks_wanted = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
            except Exception:  # tensorboard (or torch) not installed: files only
                self._tb = None
        if wandb is not None:
            self._wandb = _start_wandb(self.run_dir, wandb)

    def log(self, row: dict[str, Any]) -> None:
        """One member's row of one generation."""
        self._start_sinks()
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        with self.jsonl_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(clean, default=str) + "\n")
        self._write_csv(clean)
        member = row.get("member", row.get("agent", 0))
        step = int(row.get("steps", 0))
        numbers = {k: v for k, v in row.items() if _finite(v) and k not in {"steps", "agent", "member", "generation"}}
        if self._tb is not None:
            for k, v in numbers.items():
                self._tb.add_scalar(f"member/{member}/{k}", v, step)
        if self._wandb is not None:  # sent with the generation's population row (one W&B step)
            self._pending.update({f"member/{member}/{k}": v for k, v in numbers.items()})

    def log_text(self, tag: str, text: str, step: int) -> None:
        """A text entry (Markdown) in the run's TensorBoard events, through the run's one writer (a
        second writer would start a second event file)."""
        self._start_sinks()
        if self._tb is not None:
            self._tb.add_text(tag, text, step)

    def log_population(self, summary: dict[str, Any]) -> None:
        """The population's row of one generation (see :func:`population_summary`)."""
        self._start_sinks()
        with self.population_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(summary, default=str) + "\n")
        step = int(summary.get("steps", 0))
        numbers = {k: v for k, v in summary.items() if _finite(v) and k not in {"steps", "generation"}}
        if self._tb is not None:
            for k, v in numbers.items():
                self._tb.add_scalar(f"population/{k}", v, step)
        if self._wandb is not None:
            row = {f"population/{k}": v for k, v in numbers.items()}
            self._wandb.log({**self._pending, **row, "generation": summary.get("generation"), "steps": step})
            self._pending = {}

    def _write_csv(self, row: dict[str, Any]) -> None:
        new_fields = self._csv_fields is None or any(k not in self._csv_fields for k in row)
        if new_fields:
            # Rewrite the file with the widened header (rare: only when a new metric appears).
            old = self.read_jsonl()[:-1] if self.csv_path.exists() else []
            fields = list(dict.fromkeys([*(self._csv_fields or []), *row]))
            with self.csv_path.open("w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=fields)
                writer.writeheader()
                for r in [*old, row]:
                    writer.writerow({k: r.get(k) for k in fields})
            self._csv_fields = fields
            return
        assert self._csv_fields is not None
        with self.csv_path.open("a", newline="", encoding="utf-8") as fh:
            csv.DictWriter(fh, fieldnames=self._csv_fields).writerow({k: row.get(k) for k in self._csv_fields})

    def read_jsonl(self) -> list[dict[str, Any]]:
        if not self.jsonl_path.exists():
            return []
        return [json.loads(line) for line in self.jsonl_path.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


class SilentMetricsLogger(MetricsLogger):
    """The logger of ranks other than 0 in a multi-process run: rank 0 writes the run's metrics
    (every rank computes the same rows), so these write no file, TensorBoard event or W&B run."""

    def __init__(self) -> None:  # no run directory, no sinks
        self._tb = self._wandb = None
        self._sinks_wanted = None

    def log(self, row: dict[str, Any]) -> None:
        pass

    def log_population(self, summary: dict[str, Any]) -> None:
        pass

    def read_jsonl(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


def _start_wandb(run_dir: Path, config: dict[str, Any]) -> Any:
    try:
        import wandb
    except ImportError as exc:
        raise AgileRLError("logging.wandb needs Weights & Biases: pip install 'agilerl-core[wandb]'") from exc
    kwargs = {k: v for k, v in config.items() if v is not None}
    timeout = kwargs.pop("init_timeout_s", None)
    if timeout is not None:
        kwargs["settings"] = {"init_timeout": float(timeout)}
    kwargs.setdefault("dir", str(run_dir))
    kwargs.setdefault("name", run_dir.name)
    try:
        run = wandb.init(**kwargs)
    except Exception as exc:  # wandb's own errors (CommError, UsageError, ...): said with the address and setting
        server = os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai"
        bound = f"{timeout:g} s" if timeout is not None else "wandb's default init_timeout (90 s)"
        raise AgileRLError(
            f"logging.wandb: W&B could not start the run at {server} (waited at most {bound}; "
            f"logging.wandb.init_timeout_s sets the bound, mode: offline logs without a server): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        ) from None
    run.define_metric("population/*", step_metric="steps")
    run.define_metric("member/*", step_metric="steps")
    return run


class Progress:
    """Progress over the run's steps: a tqdm bar on a terminal, advancing as each member finishes its
    steps of a generation; elsewhere (a pipe, a file, a terminal without a size) a plain line when a
    member finishes, at most one every 10 s."""

    def __init__(self, total: int, *, enabled: bool = True, unit: str = "step", initial: int = 0) -> None:
        self.enabled = enabled
        self.total = total
        self.count = initial
        self.unit = unit
        self._bar: Any = None
        self._t0 = time.perf_counter()
        self._c0 = initial
        self._last_line = 0.0
        self._finished_line = False
        self.postfix: dict[str, Any] = {}
        if enabled and _terminal_width() > 0 and log.isEnabledFor(logging.INFO):
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, initial=initial, unit=unit, unit_scale=True, dynamic_ncols=True, file=sys.stderr
            )

    def update(self, n: int, **postfix: Any) -> None:
        self.count += n
        self.postfix.update({k: v for k, v in postfix.items() if v is not None})
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            if postfix:
                self._bar.set_postfix({k: _fmt(v) for k, v in self.postfix.items()}, refresh=False)
            return
        now = time.perf_counter()
        finished = self.count >= self.total
        if (now - self._last_line >= 10 and not finished) or (finished and not self._finished_line):
            self._last_line = now
            self._finished_line = finished
            log.info(self.line())

    def rate(self) -> float:
        elapsed = time.perf_counter() - self._t0
        return (self.count - self._c0) / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        pct = 100.0 * self.count / self.total if self.total else 100.0
        extra = " ".join(f"{k}={_fmt(v)}" for k, v in self.postfix.items())
        units = plural(self.unit)
        return f"{self.count}/{self.total} {units} ({pct:.0f}%) {self.rate():.0f} {units}/s {extra}".rstrip()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _terminal_width() -> int:
    """Columns of the terminal stderr is on; 0 when it is not a terminal or reports no size (a bar
    tqdm draws 0 columns wide is invisible: such a terminal gets the plain lines instead)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns if sys.stderr.isatty() else 0
    except (OSError, ValueError, AttributeError):
        return 0


def plural(unit: str) -> str:
    """``step`` -> ``steps``, ``batch`` -> ``batches``."""
    return unit + ("es" if unit.endswith(("s", "x", "ch", "sh")) else "s")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
