"""The benchmarks cannot rot unnoticed: every script is run by ``benchmarks/run.py`` (CI runs
``--smoke``), and the README's summary table is exactly what the dated results give."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import run  # noqa: E402
import summarize  # noqa: E402


def _modules() -> set[str]:
    return {p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*.py") if not any(
        part.startswith(".") for part in p.relative_to(BENCH).parts)}  # fmt: skip


def test_every_benchmark_script_is_run_by_run_py() -> None:
    modules = _modules()
    scripts = {m for m in modules if Path(m).name.startswith("bench_")}
    assert scripts <= set(run.SCRIPTS), f"not in benchmarks/run.py SCRIPTS: {sorted(scripts - set(run.SCRIPTS))}"
    uncovered = modules - set(run.SCRIPTS) - set(run.HELPERS)
    assert not uncovered, f"benchmarks/ modules neither run by run.py nor listed as helpers: {sorted(uncovered)}"
    missing = (set(run.SCRIPTS) | set(run.HELPERS)) - modules
    assert not missing, f"run.py names files that do not exist: {sorted(missing)}"


def test_every_helper_is_used_by_a_script() -> None:
    sources = {m: (BENCH / m).read_text() for m in _modules()}
    for helper in run.HELPERS:
        if helper in ("run.py", "summarize.py"):
            continue
        stem = Path(helper).stem
        users = [m for m, text in sources.items() if m != helper and stem in text]
        assert users, f"benchmarks/{helper} is used by no script: delete it or run it from run.py"


def test_every_smoke_command_parses() -> None:
    """Each script accepts its smoke arguments (``--help`` after them: argparse validates, then exits 0)."""
    for name, script in run.SCRIPTS.items():
        proc = subprocess.run([sys.executable, str(BENCH / name), *script.smoke, "--help"], capture_output=True,
                              text=True, check=False)  # fmt: skip
        assert proc.returncode == 0, f"{name} {script.smoke}: {proc.stderr[-2000:]}"
        assert "unrecognized arguments" not in proc.stderr


def test_readme_summary_table_is_generated_from_results() -> None:
    assert summarize.main(["--check"]) == 0, "run `python benchmarks/summarize.py` and commit the README"


def test_every_result_file_carries_its_metadata() -> None:
    for doc in summarize.load_results():
        for field in ("date", "load_before", "load_after", "command", "versions", "summary", "raw"):
            assert field in doc, f"{doc['_path']} lacks {field}"
        assert {"torch", "numpy"} <= set(doc["versions"]), doc["_path"]
        for row in doc["summary"]:
            assert row["ratio_wall"] is not None or row["ratio_cpu"] is not None or row["met"] is not None


def test_summary_takes_the_latest_result_per_row(tmp_path: Path) -> None:
    def write(name: str, date: str, ratio: float) -> None:
        row = {"key": "k", "what": "PPO env-steps/s", "against": "SB3", "ratio_wall": ratio, "ratio_cpu": ratio,
               "target": ">= 2.2x", "met": ratio >= 2.2, "detail": f"{ratio}", "repeats": 3}  # fmt: skip
        doc = {"script": "gym/bench_cartpole", "date": date, "load_before": [1.0, 1, 1], "load_after": [2.0, 2, 2],
               "command": "python x", "versions": {"torch": "t", "numpy": "n"}, "summary": [row], "raw": {}}  # fmt: skip
        (tmp_path / "results" / "gym").mkdir(parents=True, exist_ok=True)
        (tmp_path / "results" / "gym" / name).write_text(json.dumps(doc))

    write("a.json", "2026-12-01T10:00:00+00:00", 1.5)
    write("b.json", "2026-12-02T10:00:00+00:00", 2.4)
    text = summarize.table(summarize.load_results(tmp_path / "results"), ["gym/bench_cartpole.py", "gym/bench_td3.py"])
    assert "| 2.40x | 2.40x |" in text and "1.50x" not in text
    assert "| yes |" in text and "1.0 → 2.0" in text
    assert "`gym/bench_td3.py`" in text  # no result yet: named, not invented


@pytest.mark.parametrize("bad", ["no markers here"])
def test_summarize_refuses_a_readme_without_markers(bad: str) -> None:
    with pytest.raises(SystemExit, match="markers"):
        summarize.render(bad, "table")


def _learning_doc(side: str, seed: int, final: float, reach_s: float | None, sps: float) -> dict:
    raw = {"cell": "dqn-CartPole-v1", "algo": "dqn", "task": "CartPole-v1", "side": side, "seed": seed,
           "budget": 1000, "threshold": 475.0, "curve": [[500, 10.0], [1000, final]], "final_return": final,
           "reached": None if reach_s is None else {"steps": 1000, "wall_s": reach_s, "cpu_s": reach_s},
           "steps_per_cpu_s": sps, "peak_rss_mb": 100.0 if side == "ours" else 200.0, "notes": ["tau mapped"]}  # fmt: skip
    return {"script": "gym/bench_learning", "date": f"2026-12-0{seed + 1}T00:00:00", "_path": f"x/{side}{seed}",
            "summary": [], "raw": raw}  # fmt: skip


def test_learning_table_from_synthetic_records(tmp_path: Path) -> None:
    docs = [_learning_doc("ours", s, f, r, 2000) for s, f, r in ((0, 500, 10), (1, 480, 12), (2, 100, None))]
    docs += [_learning_doc("sb3", s, f, r, 1000) for s, f, r in ((0, 500, 30), (1, 300, 40))]
    text = summarize.learning_table(docs, ["dqn-CartPole-v1", "a2c-CartPole-v1"])
    row = next(line for line in text.splitlines() if line.startswith("| dqn-CartPole-v1"))
    assert "| 3 / 2 |" in row and "480 [290, 490]" in row  # median and IQR over the 3 seeds of ours
    assert "yes, better" in row  # ours median 480 >= SB3's Q1 (350) and above its median (400)
    assert "12.0 s (2/3)" in row and "0.34x (<= 0.5x: yes)" in row  # median over seeds, unreached = inf
    assert "(2.00x)" in row and "(0.50x)" in row  # steps per CPU s and peak RSS ratios
    assert "`dqn-CartPole-v1` (3 ours / 2 SB3 of 3 seeds)" in text and "`a2c-CartPole-v1` (no run)" in text
    # One cell, better: "1 of 1 cells", the exact test's p over the 10 splits of 5 values into 3 + 2.
    assert "on 1 of 1 cells (dqn-CartPole-v1 p=1.00; target: at least half: yes)" in text
    worse = summarize.learning_table([*docs[3:], _learning_doc("ours", 0, 100, None, 2000)], [])
    assert "**no**, short by 250" in worse
    assert "on 0 of 1 cells (none; target: at least half: **no**)" in worse and "below on 1" in worse
    if importlib.util.find_spec("matplotlib") is not None:
        (png,) = summarize.learning_curves(docs, tmp_path)
        assert png.name == "dqn-CartPole-v1-1000.png" and png.stat().st_size > 0


def test_learning_table_names_cells_whose_runs_mix_processors() -> None:
    """Curves differ across processors (float rounding) and so do times: a cell whose latest runs
    come from two hosts is named under the table; one host (or none recorded) is not."""
    docs = [_learning_doc("ours", 0, 500, 10, 2000), _learning_doc("sb3", 0, 500, 30, 1000)]
    assert "more than one processor" not in summarize.learning_table(docs, [])
    docs[1]["cpu_model"] = "AMD EPYC"
    text = summarize.learning_table(docs, [])
    assert "`dqn-CartPole-v1` at 1,000 (AMD EPYC; not recorded (before 2026-12-07))" in text
    docs[0]["cpu_model"] = "AMD EPYC"
    assert "more than one processor" not in summarize.learning_table(docs, [])


@pytest.mark.parametrize(
    ("a", "b"),
    [([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]), ([1.0, 5.0, 9.0, 2.0], [3.0, 4.0, 7.0]),
     ([117.3, 58.7, 214.4], [143.8, -17.6, 236.0, 88.0])],
)  # fmt: skip
def test_rank_sum_p_is_the_exact_two_sided_mann_whitney_p(a: list[float], b: list[float]) -> None:
    stats = pytest.importorskip("scipy.stats")
    expected = stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue
    assert summarize.rank_sum_p(a, b) == pytest.approx(expected, abs=1e-9)


def test_rank_sum_p_with_ties_counts_splits_as_far_from_the_mean() -> None:
    # Ranks 1, 2 and five 5s; a's rank sum 20 is 4 above its mean 16, and only the 5 splits that
    # take four 500s are as far (sums 13, 16, 17 otherwise): 5 of C(7, 4) = 35.
    assert summarize.rank_sum_p([500.0] * 4, [500.0, 112.0, 41.0]) == pytest.approx(5 / 35)
    assert summarize.rank_sum_p([500.0] * 3, [500.0] * 3) == 1.0


def _rank_sum_p_by_listing(a: list[float], b: list[float]) -> float:
    pooled = sorted(a + b)
    rank = {x: (2 * pooled.index(x) + pooled.count(x) + 1) / 2 for x in pooled}
    ranks = [rank[x] for x in a + b]
    mean = len(a) * (len(pooled) + 1) / 2
    observed = abs(sum(rank[x] for x in a) - mean)
    splits = [abs(sum(c) - mean) >= observed - 1e-9 for c in itertools.combinations(ranks, len(a))]
    return sum(splits) / len(splits)


def test_rank_sum_p_counts_the_splits_it_no_longer_lists() -> None:
    """Counting splits by rank sum gives what listing every split gives (ties, unequal sizes), and
    30 seeds a side (C(60, 30) splits, past listing) land near the normal approximation."""
    rng = random.Random(0)
    for _ in range(40):
        a = [float(rng.choice([20, 112, 300, 500, 500])) for _ in range(rng.randint(1, 6))]
        b = [float(rng.choice([20, 150, 300, 500])) for _ in range(rng.randint(1, 6))]
        assert summarize.rank_sum_p(a, b) == pytest.approx(_rank_sum_p_by_listing(a, b), abs=1e-12)
    a = [float(rng.gauss(265, 90)) for _ in range(30)]
    b = [float(rng.gauss(260, 90)) for _ in range(30)]
    u = sum((x > y) + 0.5 * (x == y) for x in a for y in b)
    z = (abs(u - 450) - 0.5) / math.sqrt(30 * 30 * 61 / 12)  # with the continuity correction
    normal = math.erfc(abs(z) / math.sqrt(2))
    assert 0.01 < normal < 0.5 and summarize.rank_sum_p(a, b) == pytest.approx(normal, rel=0.05)


def test_ablation_summary_gives_each_variant_a_p_against_its_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ablation table's last column: the exact rank-sum p of a variant's last-quarter means against
    its reference's (the cell's ``base``, or ``REFERENCE``'s choice), "-" with no reference records."""
    monkeypatch.syspath_prepend(str(BENCH / "gym"))
    import ablate_learning
    import benchlib

    monkeypatch.setattr(benchlib, "RESULTS", tmp_path)
    cell = tmp_path / ablate_learning.SCRIPT / "tqc-Hopper-v5"
    cell.mkdir(parents=True)
    for variant, tails in (("base", [100.0, 110.0, 120.0]), ("torch_init", [200.0, 210.0, 220.0])):
        for seed, tail in enumerate(tails):
            raw = {"cell": "tqc-Hopper-v5", "variant": variant, "seed": seed, "final_return": tail,
                   "curve": [[1000, 0.0], [2000, tail]], "reached": None}  # fmt: skip
            (cell / f"{variant}-s{seed}-20261207T000000Z.json").write_text(json.dumps({"raw": raw}))
    rows = {line.split("|")[2].strip(): line for line in ablate_learning.summary().splitlines()[2:]}
    assert rows["`base`"].endswith("| - |")
    # 3 against 3, all of one side above the other: 2 of the C(6, 3) = 20 splits are as extreme
    assert rows["`torch_init`"].endswith("| 0.1 against `base` |")
    assert ablate_learning.reference("dqn-CartPole-v1", "exact_torch_init") == "exact"
