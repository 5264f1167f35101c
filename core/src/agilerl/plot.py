"""``agilerl plot RUN_DIR``: a PNG learning curve from a run's ``metrics.jsonl``."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from agilerl.errors import AgileRLError


def plot_run(run_dir: str | Path, output: str | Path | None = None) -> Path:
    run = Path(run_dir)
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise AgileRLError(f"no metrics.jsonl in {run} (is it a run directory written by agilerl train?)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise AgileRLError("agilerl plot needs matplotlib: pip install 'agilerl-core[plot]'") from exc
    series: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for line in metrics.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("fitness") is not None:
            series[int(row["agent"])].append((int(row["steps"]), float(row["fitness"])))
    if not series:
        raise AgileRLError(f"{metrics} has no fitness rows yet")
    fig, ax = plt.subplots(figsize=(7, 4))
    for agent, points in sorted(series.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", ms=3, label=f"agent {agent}")
    ax.set_xlabel("env steps (per agent)")
    ax.set_ylabel("evaluation fitness")
    ax.set_title(run.name)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    out = Path(output) if output else run / "learning_curve.png"
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
