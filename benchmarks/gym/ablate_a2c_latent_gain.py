"""A2C CartPole-v1 with the encoder's latent layer at orthogonal gain sqrt(2) (SB3's second hidden layer's), ours otherwise.

The one suspect of the A2C ablation (``benchmarks/README.md``, "Why DQN and A2C lose on CartPole")
that no manifest field switches yet: our MLP encoder initialises its last (latent, activated) layer
at orthogonal gain 1, SB3's policy at sqrt(2). This diagnostic scales that layer's initial weights
by sqrt(2) in the process (no extra random draws) and trains the learning table's A2C cell with
its protocol, one seed per process; it prints, per seed, the greedy return at the budget and the
mean over the last quarter of the evaluations (no records: a declared option comes first)::

    for s in 0 1 2 3 4 5 6 7 8 9; do python benchmarks/gym/ablate_a2c_latent_gain.py $s; done
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def _patch_latent_gain() -> None:
    import torch

    from agilerl_plugin_gym.networks import mlp

    build = mlp.EvolvableMLP._build

    def _build(self: Any) -> None:
        build(self)
        # The encoder's latent layer: an activated output layer (heads have no output activation).
        if self.init_layers and self.output_activation is not None and not self.output_vanish:
            with torch.no_grad():
                self.output.weight.mul_(math.sqrt(2))  # orthogonal gain 1 -> sqrt(2)

    mlp.EvolvableMLP._build = _build  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    import bench_learning as bl
    from ablate_learning import last_quarter

    seed = int((argv if argv is not None else sys.argv[1:])[0])
    _patch_latent_gain()
    cell = bl.CELLS["a2c-CartPole-v1"]
    raw = bl.run_cell(cell, "ours", seed, cell.budget)
    print(
        "RESULT", json.dumps({"seed": seed, "final": raw["final_return"], "last_quarter": last_quarter(raw["curve"])})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
