"""Learning on a task whose answer depends on the prompt: reversing three digits
(``agilerl_plugin_llm.tasks``), scored greedily by exact match on 128 held-out prompts.

The SFT warm start takes held-out exact match from 0 to about 0.6; GRPO (the DAPO-style loss of
``examples/llm/reverse/grpo.yaml``) from that warm start raises it further, measured by the run's
own held-out evaluation (``eval/eval_greedy_success``), which agrees with an independent scorer
(:func:`~agilerl_plugin_llm.tasks.exact_match` on the exported model). LLMPPO (``test_ppo.py``) and
RLOO with batched reward functions (``test_trl_options.py``) learn from the same warm start, built once
per session (``conftest.py``). "Say eight" stays only as a smoke test (``test_grpo.py`` and others): its
answer never depends on the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agilerl_plugin_llm.tasks import exact_match, heldout_rows, reverse_rows, write_rows

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llm" / "reverse"
SPLIT = 0.75  # 512 rows: 384 to train on, 128 held out


def _cli(*args: str) -> None:
    from agilerl.cli import main

    assert main([str(a) for a in args]) == 0


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_reverse_rows_depend_on_the_prompt_and_are_deterministic() -> None:
    rows = reverse_rows(512, seed=0)
    assert rows == reverse_rows(512, seed=0) and rows != reverse_rows(512, seed=1)
    assert len({r["prompt"] for r in rows}) == 512 and len({r["answer"] for r in rows}) == 512
    assert all(r["answer"] == r["prompt"].split()[-1][::-1] == r["response"] for r in rows)
    assert len(heldout_rows(rows, SPLIT, 0)) == 128
    with pytest.raises(ValueError, match="between 1 and 1000"):
        reverse_rows(1001)


@pytest.mark.slow
def test_sft_raises_heldout_exact_match_on_reverse(reverse_warm_start: dict[str, Any]) -> None:
    before, after = reverse_warm_start["before"], reverse_warm_start["after"]
    assert before.n == after.n == 128
    assert before.mean == 0.0, before
    # Measured 0.594 +/- 0.043 (seed 0); well clear of 0 by many standard errors.
    assert after.mean >= 0.4, after
    assert after.mean - before.mean > 5 * after.stderr, (before, after)
    rows = _rows(reverse_warm_start["work"] / "sft")
    losses = [r["eval/loss"] for r in rows if "eval/loss" in r]
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.slow
def test_grpo_from_sft_warm_start_raises_heldout_exact_match(
    reverse_warm_start: dict[str, Any], reverse_manifest: Callable[..., Path]
) -> None:
    work = reverse_warm_start["work"]
    _cli("train", reverse_manifest("grpo.yaml", work))
    rows = _rows(work / "grpo")
    scores = [r["eval/eval_greedy_success"] for r in rows]
    assert all(r["eval/eval_prompts"] == 128 for r in rows)
    # The run's step-0 evaluation is the warm start, scored the same way by the independent scorer.
    assert scores[0] == pytest.approx(reverse_warm_start["after"].mean), (scores, reverse_warm_start["after"])
    stderr = rows[-1]["eval/eval_success_stderr"]
    assert 0 < stderr < 0.05
    # Measured 0.594 -> 0.758 (seed 0): asserted above the start by more than one standard error.
    assert scores[-1] > scores[0] + stderr, scores
    _cli("export", work / "grpo", work / "grpo-model", "--trust-checkpoint")  # its manifest names the rubric file
    assert exact_match(work / "grpo-model", None, reverse_warm_start["heldout"]).mean == pytest.approx(scores[-1])


@pytest.mark.slow
def test_grpo_with_lora_from_sft_warm_start_raises_heldout_exact_match(
    reverse_warm_start: dict[str, Any], reverse_manifest: Callable[..., Path]
) -> None:
    work = reverse_warm_start["work"]
    path = reverse_manifest("grpo.yaml", work, run_dir=str(work / "grpo-lora"))
    data = yaml.safe_load(path.read_text())
    data["network"]["lora_config"] = {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0}
    data["algorithm"]["lr"] = 0.005  # an adapter moves the output less per step than full fine-tuning
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _cli("train", path)
    rows = _rows(work / "grpo-lora")
    scores = [r["eval/eval_greedy_success"] for r in rows]
    # Measured 0.594 -> 0.680 / 0.750 / 0.711 at steps 40 / 80 / 120 (seed 0).
    assert scores[-1] > scores[0] + rows[-1]["eval/eval_success_stderr"], scores


@pytest.mark.parametrize("greedy", [True, False])
def test_heldout_evaluation_names_its_decoding_and_reports_its_spread(
    tiny_model_dir: Path, tmp_path: Path, reverse_manifest: Callable[..., Path], greedy: bool
) -> None:
    """``training.eval_samples_per_task`` adds a sampled evaluation beside the greedy one;
    ``eval_greedy: false`` makes the sampled one the fitness. Each score comes with its standard error."""
    work = tmp_path
    (work / "tiny-model").symlink_to(tiny_model_dir)
    (work / "sft-model").symlink_to(tiny_model_dir)  # no warm start needed to check the metric names
    write_rows(reverse_rows(80, seed=0), work / "reverse.jsonl")
    path = reverse_manifest("grpo.yaml", work, max_steps=1, evo_steps=1, eval_prompts=8, eval_samples_per_task=3)
    data = yaml.safe_load(path.read_text())
    data["training"]["eval_greedy"] = greedy
    data["algorithm"].update(batch_size=4, group_size=2)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _cli("train", path)
    rows = _rows(work / "grpo")
    assert len(rows) == 2  # the step-0 evaluation, then generation 0's
    for row in rows:
        assert row["eval/eval_prompts"] == 8  # training.eval_prompts
        for metric in ("reward", "success"):
            assert 0.0 <= row[f"eval/eval_sampled_{metric}"] <= 1.0
            assert row[f"eval/eval_sampled_{metric}_stderr"] >= 0.0
            head = "greedy" if greedy else "sampled"
            assert row[f"eval/eval_{metric}"] == row[f"eval/eval_{head}_{metric}"]
            assert row[f"eval/eval_{metric}_stderr"] == row[f"eval/eval_{head}_{metric}_stderr"]
            assert (f"eval/eval_greedy_{metric}" in row) is greedy
        if "fitness" in row:
            assert row["fitness"] == row["eval/eval_reward"]


@pytest.mark.parametrize(
    ("training", "prompts"),
    [({}, 20), ({"eval_prompts": 6}, 6), ({"eval_loop": 3}, 12)],
    ids=["default-every-heldout-row", "eval_prompts", "eval_loop-x-batch_size"],
)
def test_the_heldout_evaluation_scores_as_many_prompts_as_the_manifest_says(
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    reverse_manifest: Callable[..., Path],
    training: dict[str, Any],
    prompts: int,
) -> None:
    """``training.eval_prompts`` prompts are scored (held-out rows 0..n-1, each once); unset, every
    held-out row up to 128; with AgileRL's ``eval_loop`` instead, ``eval_loop x batch_size``. Counted
    at the env: the held-out rows each evaluation actually scored, not the run's own report."""
    from agilerl_plugin_llm.rollout.sources import RubricEnv

    work = tmp_path
    (work / "tiny-model").symlink_to(tiny_model_dir)
    (work / "sft-model").symlink_to(tiny_model_dir)
    write_rows(reverse_rows(80, seed=0), work / "reverse.jsonl")  # split 0.75: 60 to train on, 20 held out
    path = reverse_manifest("grpo.yaml", work, max_steps=1, evo_steps=1)
    data = yaml.safe_load(path.read_text())
    del data["training"]["eval_prompts"]
    data["training"].update(training)
    data["algorithm"].update(batch_size=4, group_size=2)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    scored: list[int] = []
    step = RubricEnv.step

    def counting_step(self: RubricEnv, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if len(self.rows) == 20:  # the held-out split: which of its rows this reply answered
            scored.append(self.rows.index(self.row))
        return step(self, action)

    monkeypatch.setattr(RubricEnv, "step", counting_step)
    _cli("train", path)
    rows = _rows(work / "grpo")
    assert [r["eval/eval_prompts"] for r in rows] == [prompts, prompts]  # the step-0 evaluation, generation 0's
    assert sorted(scored) == sorted(list(range(prompts)) * 2), scored


def test_eval_prompts_beyond_rows_read_at_run_start_stop_the_run_before_the_model_loads(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], reverse_manifest: Callable[..., Path]
) -> None:
    """Parquet rows are read when the run starts (validation checks .jsonl/.json/.csv held-out splits:
    the bad-manifest corpus): a size larger than the held-out split stops it there, naming the field."""
    import pandas as pd

    from agilerl.cli import main

    (tmp_path / "sft-model").symlink_to(tiny_model_dir)
    pd.DataFrame(reverse_rows(80, seed=0)).to_parquet(tmp_path / "reverse.parquet")
    path = reverse_manifest("grpo.yaml", tmp_path, max_steps=1, evo_steps=1, eval_prompts=21)
    data = yaml.safe_load(path.read_text())
    data["environment"]["dataset_path"] = str(tmp_path / "reverse.parquet")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["train", str(path)]) != 0
    err = capsys.readouterr().err
    assert "training.eval_prompts: 21 is more than the 20 held-out rows" in err, err
    assert not (tmp_path / "grpo" / "metrics.jsonl").exists()


def test_eval_decoding_fields_are_refused_for_dataset_algorithms(tmp_path: Path, tiny_model_dir: Path) -> None:
    from agilerl.models import load_manifest

    data = yaml.safe_load((EXAMPLE / "sft.yaml").read_text())
    data["network"]["pretrained_model_name_or_path"] = str(tiny_model_dir)
    data["training"]["eval_samples_per_task"] = 4
    with pytest.raises(Exception, match="eval_samples_per_task"):
        load_manifest(data)
    del data["training"]["eval_samples_per_task"]
    data["training"]["eval_prompts"] = 16  # SFT scores every held-out row's loss: no prompts to count
    with pytest.raises(Exception, match="eval_prompts"):
        load_manifest(data)
