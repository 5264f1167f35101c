"""Metrics: JSONL and CSV files in the run directory, TensorBoard when it is installed, and a
progress bar with steps/s and the latest return."""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from pathlib import Path
from typing import Any


class MetricsLogger:
    """Appends one row per (generation, agent) to ``metrics.jsonl`` and ``metrics.csv``."""

    def __init__(self, run_dir: Path, *, tensorboard: bool = True) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = run_dir / "metrics.jsonl"
        self.csv_path = run_dir / "metrics.csv"
        self._csv_fields: list[str] | None = None
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
            except Exception:  # tensorboard (or torch) not installed: files only
                self._tb = None

    def log(self, row: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        with self.jsonl_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(clean, default=str) + "\n")
        self._write_csv(clean)
        if self._tb is not None:
            step = int(row.get("steps", 0))
            tag = f"agent_{row.get('agent', 0)}"
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in {"steps", "agent"}:
                    self._tb.add_scalar(f"{tag}/{k}", v, step)

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


class Progress:
    """A progress bar over env steps (tqdm on a terminal; periodic lines otherwise)."""

    def __init__(self, total: int, *, enabled: bool = True, unit: str = "step", initial: int = 0) -> None:
        self.enabled = enabled
        self.total = total
        self.count = initial
        self.unit = unit
        self._bar: Any = None
        self._t0 = time.perf_counter()
        self._c0 = initial
        self._last_line = 0.0
        self.postfix: dict[str, Any] = {}
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, unit=unit, unit_scale=True, dynamic_ncols=True)

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
        if now - self._last_line >= 10 or self.count >= self.total:
            self._last_line = now
            print(self.line(), file=sys.stderr, flush=True)

    def rate(self) -> float:
        elapsed = time.perf_counter() - self._t0
        return (self.count - self._c0) / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        pct = 100.0 * self.count / self.total if self.total else 100.0
        extra = " ".join(f"{k}={_fmt(v)}" for k, v in self.postfix.items())
        return f"[agilerl] {self.count}/{self.total} {self.unit}s ({pct:.0f}%) {self.rate():.0f} {self.unit}s/s {extra}".rstrip()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
