"""Regenerate the tiny LLM example datasets in this folder (deterministic): ``python make_data.py``.

* ``sft_tiny.jsonl``: prompt/response rows (colours of animals, small sums) for SFT.
* ``sft_chat_tiny.jsonl``: the same rows as chat ``messages`` (a system turn, a user turn, an
  assistant turn).
* ``dpo_tiny.jsonl``: prompt/chosen/rejected pairs for DPO: both sides give the same answer; the
  chosen one closes politely, the rejected one rudely.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
ANIMALS = {"cat": "black", "dog": "white", "bird": "blue", "fish": "red", "cow": "green", "horse": "yellow",
           "sheep": "white"}  # fmt: skip


def sft_rows(rng: random.Random) -> list[dict[str, str]]:
    rows = [{"prompt": f"what is the color of the {a}?", "response": f"the {a} is {c}."} for a, c in ANIMALS.items()]
    rows += [
        {"prompt": f"what is {a} + {b}?", "response": f"{a} + {b} = {a + b}."} for a in range(10) for b in range(10)
    ]
    rng.shuffle(rows)
    return rows


POLITE = ["thank you.", "thank you for asking.", "happy to help."]
RUDE = ["go away.", "stop asking.", "no more questions."]


def dpo_rows(rng: random.Random) -> list[dict[str, str]]:
    # Same answer on both sides; only the closing differs (polite vs rude), so a pair cannot be told
    # apart by its length or first tokens, and the preference generalises to held-out prompts.
    answers = [(f"what is {a} + {b}?", f"{a} + {b} = {a + b},") for a in range(10) for b in range(10)]
    answers += [(f"what is the color of the {a}?", f"the {a} is {c},") for a, c in ANIMALS.items()]
    rows = [
        {"prompt": prompt, "chosen": f"{answer} {rng.choice(POLITE)}", "rejected": f"{answer} {rng.choice(RUDE)}"}
        for prompt, answer in answers
    ]
    rng.shuffle(rows)
    return rows


def write(name: str, rows: list[dict[str, object]]) -> None:
    with (HERE / name).open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    rng = random.Random(0)
    sft = sft_rows(rng)
    write("sft_tiny.jsonl", sft)
    chat = [{"messages": [{"role": "system", "content": "answer briefly."},
                          {"role": "user", "content": r["prompt"]},
                          {"role": "assistant", "content": r["response"]}]} for r in sft]  # fmt: skip
    write("sft_chat_tiny.jsonl", chat)
    write("dpo_tiny.jsonl", dpo_rows(rng))
