"""Completions you can read: ``completions.jsonl`` in the run directory, and ``agilerl completions``.

Every ``log_completions_steps`` iterations (and at the first), a rollout algorithm keeps a sample of
its batch (:func:`completion_records`): the prompt as the policy saw it (rendered by the chat
template, system message included), the completion, the reward, each reward function's value (when
the rewards come from ``reward_funcs``) and the advantage. The rollout strategy appends them to
``completions.jsonl`` (one JSON object per completion), adds them to TensorBoard as text and to
W&B as a table when those sinks are on (:func:`write_completions`). ``agilerl completions RUN_DIR
[--last N] [--min-reward X]`` prints them readably.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agilerl.errors import AgileRLError

FILENAME = "completions.jsonl"


def completions_due(spec: Any, steps: int) -> bool:
    """Whether iteration ``steps`` (counted from 0) logs completions (``log_completions_steps``; 0: never)."""
    every = int(getattr(spec, "log_completions_steps", 0) or 0)
    return every > 0 and int(steps) % every == 0


def _row_advantage(adv: Any, loss_mask: Any, row: int) -> float | None:
    if adv is None:
        return None
    value = adv[row]
    if value.dim() == 0:
        return float(value)
    mask = loss_mask[row].bool().clone()  # per-token advantages: their mean over the policy tokens
    mask[0] = False
    return float(value[mask].mean()) if bool(mask.any()) else 0.0


def completion_records(
    trajs: Sequence[Any], tokenizer: Any, *, advantages: Any, loss_mask: Any, step: int, agent: int, count: int
) -> list[dict[str, Any]]:
    """The first ``count`` episodes of a batch as readable records."""
    out: list[dict[str, Any]] = []
    for i, t in enumerate(trajs[: max(int(count), 0)]):
        prompt = tokenizer.decode(t.token_ids[: t.prompt_len], skip_special_tokens=False)
        completion = tokenizer.decode(t.token_ids[t.prompt_len :], skip_special_tokens=True)
        record: dict[str, Any] = {
            "step": int(step),
            "agent": int(agent),
            "prompt": prompt,
            "completion": completion,
            "reward": float(t.total_reward),
        }
        if isinstance(t.info.get("rewards"), dict):
            record["rewards"] = dict(t.info["rewards"])
        record["advantage"] = _row_advantage(advantages, loss_mask, i)
        record["truncated"] = bool(t.cut_off)
        out.append(record)
    return out


def write_completions(run: Any, records: Sequence[dict[str, Any]]) -> None:
    """Append ``records`` to the run's ``completions.jsonl``; TensorBoard text and a W&B table when on.

    Written by the process that writes the run's metrics (rank 0): others write nothing.
    """
    from agilerl.training.metrics import SilentMetricsLogger

    if not records or isinstance(run.logger, SilentMetricsLogger):
        return
    path = Path(run.run_dir) / FILENAME
    stamp = time.time()  # one per write: a step written again (after a resume) is told apart
    with path.open("a", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps({**r, "logged_at": stamp}, default=str) + "\n")
    sinks = getattr(run.manifest, "logging", None)
    step = int(records[0]["step"])
    agent = int(records[0]["agent"])
    if sinks is None or getattr(sinks, "tensorboard", True):
        run.logger.log_text(f"member/{agent}/completions", to_markdown(records), step)
    if sinks is not None and getattr(sinks, "wandb", None) is not None:
        _wandb_table(records, agent)


def _wandb_table(records: Sequence[dict[str, Any]], agent: int) -> None:
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is None:
        return
    names = sorted({k for r in records for k in (r.get("rewards") or {})})
    columns = ["step", "prompt", "completion", "reward", *names, "advantage"]
    rows = [[r["step"], r["prompt"], r["completion"], r["reward"], *[(r.get("rewards") or {}).get(n) for n in names],
             r["advantage"]] for r in records]  # fmt: skip
    wandb.log({f"member/{agent}/completions": wandb.Table(columns=columns, data=rows)}, commit=False)


def to_markdown(records: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of ``records`` (TensorBoard's text panel renders it)."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", "<br>")

    lines = ["| prompt | completion | reward | advantage |", "|---|---|---|---|"]
    for r in records:
        reward = _fmt(r["reward"]) + "".join(f"<br>{k}: {_fmt(v)}" for k, v in (r.get("rewards") or {}).items())
        lines.append(f"| {cell(r['prompt'])} | {cell(r['completion'])} | {reward} | {_fmt(r.get('advantage'))} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Reading: agilerl completions RUN_DIR
# --------------------------------------------------------------------------------------------------


class CompletionsError(AgileRLError):
    """No completions to show (no run directory, or no completions.jsonl in it)."""

    exit_code = 2


def read_completions(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir)
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        where = Path(run_dir)
        why = "no such directory" if not where.exists() else f"no {FILENAME} in it"
        raise CompletionsError(
            f"{run_dir}: {why}; a rollout run (GRPO, RLOO, ...) writes {FILENAME} into its run directory every "
            "algorithm.log_completions_steps iterations"
        )
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise CompletionsError(f"{path}:{n}: not JSON ({exc.msg}); the file is damaged") from None
    return records


def select(records: Sequence[dict[str, Any]], *, last: int | None = None,
           min_reward: float | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The records of the last ``last`` logged steps whose reward is at least ``min_reward``.

    A step logged twice (a resumed run redoes the iterations after its checkpoint) shows its last log.
    """
    blocks: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    previous: tuple[Any, Any, Any] | None = None
    for r in records:
        key = (r.get("agent", 0), r.get("step", 0))
        if (*key, r.get("logged_at")) != previous:
            blocks.pop(key, None)  # a new write of this step replaces the earlier one
            blocks[key] = []
            previous = (*key, r.get("logged_at"))
        blocks[key].append(r)
    chosen = [r for block in blocks.values() for r in block]
    if last is not None:
        steps = sorted({int(r.get("step", 0)) for r in chosen})[-max(int(last), 0) :] if last > 0 else []
        chosen = [r for r in chosen if int(r.get("step", 0)) in set(steps)]
    if min_reward is not None:
        chosen = [r for r in chosen if float(r.get("reward", -math.inf)) >= float(min_reward)]
    return chosen


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_records(records: Sequence[dict[str, Any]]) -> str:
    """``records`` as text for a terminal: a header line per completion, then the prompt and the reply."""
    blocks = []
    for r in records:
        parts = [f"step {r.get('step')}", f"agent {r.get('agent', 0)}", f"reward {_fmt(r.get('reward'))}"]
        parts += [f"{k} {_fmt(v)}" for k, v in (r.get("rewards") or {}).items()]
        parts.append(f"advantage {_fmt(r.get('advantage'))}")
        if r.get("truncated"):
            parts.append("truncated")
        blocks.append(
            "=== " + " | ".join(parts) + " ===\n--- prompt ---\n" + str(r.get("prompt", "")).rstrip()
            + "\n--- completion ---\n" + str(r.get("completion", "")).rstrip()
        )  # fmt: skip
    return "\n\n".join(blocks)


def cmd_completions(args: argparse.Namespace) -> int:
    records = select(read_completions(args.run_dir), last=args.last, min_reward=args.min_reward)
    if not records:
        print("no completions match")
        return 0
    print(format_records(records))
    return 0


def register_commands(subparsers: Any) -> None:
    p = subparsers.add_parser("completions", help="print the completions a rollout run logged (completions.jsonl)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (or its completions.jsonl)")
    p.add_argument("--last", type=int, metavar="N", help="only the last N logged steps")
    p.add_argument("--min-reward", type=float, metavar="X", help="only completions whose reward is at least X")
    p.set_defaults(handler=cmd_completions)


__all__ = [
    "FILENAME",
    "CompletionsError",
    "completion_records",
    "completions_due",
    "format_records",
    "read_completions",
    "register_commands",
    "select",
    "to_markdown",
    "write_completions",
]
