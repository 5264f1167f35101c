"""Generate the small categorical bandit dataset in this folder (deterministic; no download).

    python examples/data/make_mushrooms.py

Writes ``mushrooms_features.csv`` (five categorical columns, one numeric) and
``mushrooms_targets.csv`` (one column, three classes). The label is a fixed rule of the features,
so the best policy earns reward 1 on every row and regret is measured against 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

ROWS = 600
SEED = 2026


def label(odor: str, cap_color: str, stem_height: float) -> str:
    if odor in {"foul", "spicy"}:
        return "poisonous"
    if odor in {"almond", "anise"}:
        return "edible"
    if cap_color in {"red", "yellow"}:
        return "poisonous"
    return "inedible" if stem_height > 6.0 else "edible"


def main() -> None:
    rng = np.random.default_rng(SEED)
    features = pd.DataFrame(
        {
            "cap_color": rng.choice(["brown", "white", "red", "yellow", "gray"], ROWS),
            "odor": rng.choice(["none", "almond", "anise", "foul", "spicy"], ROWS, p=[0.4, 0.15, 0.15, 0.15, 0.15]),
            "gill_size": rng.choice(["broad", "narrow"], ROWS),
            "habitat": rng.choice(["woods", "grass", "urban", "meadow"], ROWS),
            "bruises": rng.choice(["yes", "no"], ROWS),
            "stem_height": np.round(np.clip(rng.normal(6.5, 2.0, ROWS), 1.0, 14.0), 1),
        }
    )
    targets = pd.DataFrame(
        {
            "verdict": [
                label(o, c, h) for o, c, h in zip(features.odor, features.cap_color, features.stem_height, strict=True)
            ]
        }
    )
    here = Path(__file__).parent
    features.to_csv(here / "mushrooms_features.csv", index=False)
    targets.to_csv(here / "mushrooms_targets.csv", index=False)
    print(targets.verdict.value_counts().to_dict())


if __name__ == "__main__":
    main()
