"""``agilerl plot RUN`` and ``agilerl compare RUN ...``: learning curves as PNG files.

A run is drawn as its best-so-far fitness (a line), the population's mean with a band of one
standard deviation around it, and ``training.target_score`` as a dashed line. Members are not
drawn one by one: at population 16 that is 16 legend entries and a tangle. ``compare`` overlays the
best-so-far and mean of several runs, one colour per run.

The curves come from ``population.jsonl`` (written since the population metrics exist) or, for
older runs, are computed from ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError


@dataclass
class Curve:
    """One run's per-generation series (x: the most env steps of any member)."""

    name: str
    steps: list[int]
    best: list[float]
    mean: list[float]
    std: list[float]
    best_so_far: list[float]
    target_score: float | None
    pop_size: int


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


def read_curve(run_dir: str | Path) -> Curve:
    """The learning curve of a run directory."""
    run = Path(run_dir)
    metrics = run / "metrics.jsonl"
    population = run / "population.jsonl"
    if not metrics.is_file() and not population.is_file():
        raise AgileRLError(f"no metrics.jsonl in {run} (is it a run directory written by agilerl train?)")
    gens: dict[int, dict[str, Any]] = {}
    target: float | None = None
    pop_size = 0
    if population.is_file():
        for row in _rows(population):
            gens[int(row["generation"])] = row  # a resumed generation replaces the earlier row
            if row.get("target_score") is not None:
                target = float(row["target_score"])
            pop_size = max(pop_size, int(row.get("pop_size") or 0))
    else:
        per_gen: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in _rows(metrics):
            per_gen[int(row.get("generation", 0))].append(row)
        for g, rows in per_gen.items():
            fits = [_num(r.get("fitness")) for r in rows]
            fits = [f for f in fits if not math.isnan(f)]
            if not fits:
                continue
            gens[g] = {
                "steps": max(int(r.get("steps", 0)) for r in rows),
                "best": max(fits),
                "mean": statistics.fmean(fits),
                "std": statistics.pstdev(fits) if len(fits) > 1 else 0.0,
            }
            pop_size = max(pop_size, len(rows))
    ordered = [gens[g] for g in sorted(gens) if gens[g].get("best") is not None]
    if not ordered:
        raise AgileRLError(f"{run} has no fitness rows yet")
    best = [_num(r["best"]) for r in ordered]
    so_far: list[float] = []
    for b in best:
        so_far.append(b if not so_far or b > so_far[-1] else so_far[-1])
    return Curve(
        name=run.name,
        steps=[int(r["steps"]) for r in ordered],
        best=best,
        mean=[_num(r.get("mean")) for r in ordered],
        std=[_num(r.get("std")) if r.get("std") is not None else 0.0 for r in ordered],
        best_so_far=so_far,
        target_score=target,
        pop_size=pop_size,
    )


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise AgileRLError("agilerl plot needs matplotlib: pip install 'agilerl-core[plot]'") from exc
    return plt


def _draw(ax: Any, curve: Curve, color: str, *, label_prefix: str = "") -> None:
    lo = [m - s for m, s in zip(curve.mean, curve.std, strict=True)]
    hi = [m + s for m, s in zip(curve.mean, curve.std, strict=True)]
    ax.fill_between(curve.steps, lo, hi, color=color, alpha=0.18, linewidth=0)
    ax.plot(
        curve.steps, curve.mean, color=color, lw=1.2, ls="-", alpha=0.8, label=f"{label_prefix}population mean ± std"
    )
    ax.plot(curve.steps, curve.best_so_far, color=color, lw=2.2, label=f"{label_prefix}best so far")


def _finish(ax: Any, fig: Any, out: Path, targets: list[float]) -> Path:
    for t in sorted(set(targets)):
        ax.axhline(t, color="0.35", ls="--", lw=1, label=f"target_score {t:g}")
    if targets:  # keep the target line off the frame's edge
        lo, hi = ax.get_ylim()
        pad = 0.06 * (max(hi, *targets) - min(lo, *targets))
        ax.set_ylim(min(lo, min(targets) - pad), max(hi, max(targets) + pad))
    ax.set_xlabel("env steps per member")
    ax.set_ylabel("evaluation fitness")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best", framealpha=0.85)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out


def plot_run(run_dir: str | Path, output: str | Path | None = None) -> Path:
    """Write ``RUN_DIR/learning_curve.png`` (or ``output``); returns the path."""
    curve = read_curve(run_dir)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    _draw(ax, curve, "C0")
    ax.set_title(f"{curve.name} (population {curve.pop_size})", fontsize=10)
    out = Path(output) if output else Path(run_dir) / "learning_curve.png"
    try:
        return _finish(ax, fig, out, [curve.target_score] if curve.target_score is not None else [])
    finally:
        plt.close(fig)


def compare_runs(run_dirs: list[str | Path], output: str | Path) -> Path:
    """Overlay the curves of several runs in one PNG."""
    if not run_dirs:
        raise AgileRLError("agilerl compare needs at least one run directory")
    curves = [read_curve(r) for r in run_dirs]
    names = [c.name for c in curves]
    if len(set(names)) < len(names):  # same leaf names: label with the whole path
        names = [str(Path(r)) for r in run_dirs]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (curve, name) in enumerate(zip(curves, names, strict=True)):
        _draw(ax, curve, f"C{i % 10}", label_prefix=f"{name}: ")
    ax.set_title(f"{len(curves)} runs", fontsize=10)
    try:
        return _finish(ax, fig, Path(output), [c.target_score for c in curves if c.target_score is not None])
    finally:
        plt.close(fig)


__all__ = ["Curve", "compare_runs", "plot_run", "read_curve"]
