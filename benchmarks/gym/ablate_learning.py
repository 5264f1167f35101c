"""Ablations of our side of a ``bench_learning.py`` cell: one suspect at a time switched to SB3's semantics.

Where a cell of the learning benchmark loses to SB3, this script names the cause before anything is
tuned (issue 35, point 3): each variant patches our manifest of the cell (``VARIANTS``: the
manifest keys it sets; ``RUNTIME``: for semantics no manifest key sets, what it patches in the
worker process) and trains it with the very protocol of ``bench_learning.py`` (same
evaluation episodes, same budget), one (cell, variant, seed) per process, one record each under
``results/gym/bench_learning_ablation/<cell>/<variant>-s<seed>-<UTC time>.json``. With ``--summary``
it prints the table of ``benchmarks/README.md`` from the latest record of each (cell, variant,
seed): the median over seeds of the greedy return at the budget (one evaluation, noisy) and of the
mean greedy return over the run's last quarter of evaluations (steadier), and the exact two-sided
rank-sum p of those last-quarter means against the variant's reference (``REFERENCE``)::

    python benchmarks/gym/ablate_learning.py --cell dqn-CartPole-v1 --variant base hard_target --seeds 0 1 2
    python benchmarks/gym/ablate_learning.py --cell a2c-CartPole-v1 --variant base sb3 --seeds 0 1 2 3 4 5
    python benchmarks/gym/ablate_learning.py --summary

The ``sb3`` variant runs SB3's side of the cell unchanged (the reference, for more seeds than the
learning table's).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import bench_learning as bl  # noqa: E402
import benchlib  # noqa: E402
from summarize import rank_sum_p  # noqa: E402

SCRIPT = "gym/bench_learning_ablation"


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        elif v is None:
            into.pop(k, None)
        else:
            into[k] = v


def _with(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` merged in (a new dict)."""
    out = copy.deepcopy(base)
    _merge(out, copy.deepcopy(patch))
    return out


#: DQN CartPole's learning-table mapping, written over BASE's first mapping: SB3's bursts, hard target
#: copies, gradient clip and linear epsilon, the Q head's output layer at gain 1; BASE's orthogonal init
#: (the table's row was recorded with it until exact_torch_init made torch's init DQN's default).
EXACT_DQN_CARTPOLE: dict[str, dict[str, Any]] = {
    "algorithm": {"update_burst": 128, "target_update_interval": 128, "max_grad_norm": 10.0, "tau": None},
    "training": {"eps_decay": None, "eps_linear_steps": 8000},
    "network": {"head_config": {"output_vanish": False}},
}

#: EXACT_DQN_CARTPOLE with torch's default layer init throughout (SB3's QNetwork).
EXACT_DQN_CARTPOLE_TORCH_INIT = _with(
    EXACT_DQN_CARTPOLE, {"network": {"encoder_config": {"init_layers": False}, "head_config": {"init_layers": False}}}
)

#: cell -> variant -> (what it switches, the manifest keys it sets: {section: {key: value}}).
VARIANTS: dict[str, dict[str, tuple[str, dict[str, dict[str, Any]]]]] = {
    "dqn-CartPole-v1": {
        "base": ("the learning table's first mapping (`learn_step: 2`, `tau: 1/64`, multiplicative epsilon, "
                 "Q head output gain .01)", {}),
        "torch_init": ("torch's default layer init (SB3's QNetwork) instead of orthogonal, output gain .01",
                       {"network": {"encoder_config": {"init_layers": False}, "head_config": {"init_layers": False,
                                                                                             "output_vanish": False}}}),
        "no_output_vanish": ("orthogonal init kept, but the Q head's output layer at gain 1 (a value head, as our "
                             "critics and SB3's value_net), not the policy-logit gain .01",
                             {"network": {"head_config": {"output_vanish": False}}}),
        "grad_clip_10": ("gradient norm clipped to 10 (SB3's DQN max_grad_norm)", {"algorithm": {"max_grad_norm": 10.0}}),
        "linear_eps": ("SB3's linear epsilon: 1 -> .04 over 8,000 steps",
                       {"training": {"eps_decay": None, "eps_linear_steps": 8000}}),
        "burst": ("SB3's bursts: 128 gradient steps every 256 env steps (soft target kept)",
                  {"algorithm": {"update_burst": 128}}),
        "hard_target": ("a hard target copy every 128 gradient steps (no Polyak averaging; updates spread)",
                        {"algorithm": {"target_update_interval": 128}}),
        "burst_hard_target": ("bursts of 128 + a hard copy after each burst: SB3's train_freq 256 / gradient_steps "
                              "128 / target_update_interval 10 exactly",
                              {"algorithm": {"update_burst": 128, "target_update_interval": 128}}),
        "torch_init_burst_hard_target": ("torch_init + burst_hard_target",
                                         {"network": {"encoder_config": {"init_layers": False},
                                                      "head_config": {"init_layers": False, "output_vanish": False}},
                                          "algorithm": {"update_burst": 128, "target_update_interval": 128}}),
        "all_sb3": ("burst_hard_target + linear_eps + grad_clip_10: bench_learning.py's exact SB3 mapping now",
                    {"algorithm": {"update_burst": 128, "target_update_interval": 128, "max_grad_norm": 10.0},
                     "training": {"eps_decay": None, "eps_linear_steps": 8000}}),
        # Against the learning table's mapping (all_sb3 + the Q head at gain 1), orthogonal init.
        "exact": ("the learning table's mapping: all_sb3 with the Q head's output layer at gain 1, orthogonal init "
                  "(DQN's default until `exact_torch_init`)",
                  EXACT_DQN_CARTPOLE),
        "exact_torch_init": ("`exact` with torch's default layer init throughout (SB3's QNetwork; DQN's default since "
                             "this ablation)", EXACT_DQN_CARTPOLE_TORCH_INIT),
        "exact_continue_episodes": ("`exact` with the training env's episodes running on across `learn` calls, as "
                                    "SB3's do (ours resets the env at each call: every `evo_steps`)", EXACT_DQN_CARTPOLE),
        "exact_torch_init_continue_episodes": ("`exact_torch_init` and `exact_continue_episodes` together",
                                               EXACT_DQN_CARTPOLE_TORCH_INIT),
        "exact_latent_gain_sqrt2": ("`exact` with the encoder's latent layer at orthogonal gain sqrt(2) (He's gain "
                                    "for a ReLU layer; gain 1 is the value-based default)",
                                    _with(EXACT_DQN_CARTPOLE, {"network": {"encoder_config": {
                                        "output_gain": math.sqrt(2)}}})),
    },
    "a2c-CartPole-v1": {
        "base": ("the learning table's mapping (SB3's A2C defaults)", {}),
        "torch_init": ("torch's default layer init instead of the orthogonal one (SB3's ortho_init: false)",
                       {"network": {"encoder_config": {"init_layers": False, "output_gain": None},
                                    "head_config": {"init_layers": False}}}),
        "latent_gain_sqrt2": ("orthogonal init kept, the encoder's latent layer at gain sqrt(2) as SB3's second "
                              "hidden layer (A2C's default since this ablation)",
                              {"network": {"encoder_config": {"output_gain": math.sqrt(2)}}}),
    },
    "ppo-LunarLander-v3": {
        "base": ("the learning table's first mapping (the zoo's LunarLander row), the encoder's latent layer "
                 "at gain 1", {}),
        "latent_gain_sqrt2": ("orthogonal init kept, the encoder's latent layer at gain sqrt(2) as SB3's second "
                              "hidden layer (PPO's default since this ablation)",
                              {"network": {"encoder_config": {"output_gain": math.sqrt(2)}}}),
    },
    "sac-Hopper-v5": {
        "base": ("the learning table's mapping (the zoo's Hopper row)", {}),
        "torch_init": ("torch's default layer init (SB3's SAC networks) instead of the orthogonal one",
                       {"network": {"encoder_config": {"init_layers": False}, "head_config": {"init_layers": False}}}),
    },
    "tqc-Hopper-v5": {
        "base": ("the learning table's mapping (the zoo's Hopper row, sb3-contrib's defaults)", {}),
        "torch_init": ("torch's default layer init throughout, output layers unscaled (`output_vanish: false`): "
                       "sb3-contrib's TQC networks, where ours start orthogonal with the actor's and critics' "
                       "output layers at gain .01",
                       {"network": {"encoder_config": {"init_layers": False},
                                    "head_config": {"init_layers": False, "output_vanish": False}}}),
    },
    "td3-Hopper-v5": {
        "base": ("the learning table's mapping (the zoo's Hopper row)", {}),
        "torch_init": ("torch's default layer init (SB3's TD3 networks) instead of the orthogonal one",
                       {"network": {"encoder_config": {"init_layers": False}, "head_config": {"init_layers": False}}}),
    },
}  # fmt: skip
SB3 = "sb3"

#: What the summary's p compares a variant with: the cell's ``base`` unless named here (the DQN
#: ``exact_*`` rows against ``exact``, the mapping they each change one thing of).
REFERENCE: dict[str, dict[str, str]] = {
    "dqn-CartPole-v1": {v: "exact" for v in VARIANTS["dqn-CartPole-v1"] if v.startswith("exact_")},
}


def reference(cell: str, variant: str) -> str:
    return REFERENCE.get(cell, {}).get(variant, "base")


class _ContinuingEnv:
    """The training vector env with ``reset`` a no-op after the first call unless the last step ended
    an episode (one sub-env: the reset then stands in for the auto-reset step): episodes run on
    across the strategy's ``learn`` calls, as SB3's collection does. A diagnostic only: a resumed
    run could not rebuild the env's state, which is why the strategies reset it (docs/gym.md)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.obs, self.info, self.ended = inner, None, None, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[Any, Any]:
        if self.ended:
            self.obs, self.info = self.inner.reset(seed=seed, options=options)
            self.ended = False
        return self.obs, self.info

    def step(self, action: Any) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, info = self.inner.step(action)
        self.obs, self.info, self.ended = obs, info, bool((terminated | truncated).any())
        return obs, reward, terminated, truncated, info


def _continue_episodes() -> None:
    from agilerl_plugin_gym.single_agent.strategies import OffPolicyStrategy

    learn = OffPolicyStrategy.learn

    def learn_on(self: Any, agent: Any, run: Any, num_steps: int) -> Any:
        if run.env.num_envs != 1:
            raise SystemExit("continue_episodes: one sub-env only")
        if not isinstance(run.env, _ContinuingEnv):
            run.env = _ContinuingEnv(run.env)
        return learn(self, agent, run, num_steps)

    OffPolicyStrategy.learn = learn_on  # type: ignore[method-assign]


#: variant -> what it patches in the worker process besides the manifest (semantics with no manifest key).
RUNTIME: dict[str, Callable[[], None]] = {
    "exact_continue_episodes": _continue_episodes,
    "exact_torch_init_continue_episodes": _continue_episodes,
}

#: What every variant of a cell starts from: the mapping and defaults the learning table was first
#: recorded with (commit 74537da), kept here so the ablation stays reproducible after
#: bench_learning.py moved to the exact SB3 mapping and the defaults changed: DQN CartPole spread its gradient steps (`learn_step: 2`), averaged its
#: target (`tau: 1/64`, the mean lag of SB3's copies) and decayed epsilon multiplicatively (to .04
#: at the same 8,000th step), with the Q head's output layer at gain .01.
BASE: dict[str, dict[str, dict[str, Any]]] = {
    "dqn-CartPole-v1": {
        "algorithm": {"update_burst": None, "target_update_interval": None, "max_grad_norm": None, "tau": 1 / 64},
        "training": {"eps_linear_steps": None, "eps_decay": float(math.exp(math.log(0.04) / 8000))},
        # The Q head's output gain .01, DQN's default until the ablation (no_output_vanish) changed it;
        # the orthogonal init, DQN's default until the 30-seed ablation (exact_torch_init) changed it.
        "network": {
            "encoder_config": {"init_layers": True},
            "head_config": {"output_vanish": True, "init_layers": True},
        },
    },
    # The encoder's latent layer at gain 1, A2C's init until the ablation (latent_gain_sqrt2) changed it.
    "a2c-CartPole-v1": {"network": {"encoder_config": {"output_gain": 1.0}}},
    # Likewise PPO's, until its LunarLander ablation (latent_gain_sqrt2) changed it.
    "ppo-LunarLander-v3": {"network": {"encoder_config": {"output_gain": 1.0}}},
}


def _variant_cell(cell: bl.Cell, variant: str) -> bl.Cell:
    patch = VARIANTS[cell.key][variant][1]

    def ours(seed: int, steps: int) -> dict[str, Any]:
        manifest = copy.deepcopy(cell.ours(seed, steps))
        _merge(manifest, copy.deepcopy(BASE.get(cell.key, {})))
        _merge(manifest, copy.deepcopy(patch))
        return manifest

    return bl.Cell(cell.algo, cell.task, cell.budget, cell.eval_every, cell.threshold, ours, cell.sb3,
                   notes=[*cell.notes, f"ablation variant {variant}"], eval_episodes=cell.eval_episodes,
                   num_envs=cell.num_envs, normalize=cell.normalize, masked=cell.masked)  # fmt: skip


def last_quarter(curve: list[list[float]]) -> float:
    """Mean greedy return over the last quarter of a run's evaluations (at least one)."""
    tail = curve[-max(1, len(curve) // 4) :]
    return statistics.fmean(r for _, r in tail)


def summary() -> str:
    root = benchlib.RESULTS / SCRIPT
    latest: dict[tuple[str, str, int], dict[str, Any]] = {}
    for path in sorted(root.glob("*/*.json")):  # names end in the UTC time: the last one wins
        raw = json.loads(path.read_text())["raw"]
        latest[(raw["cell"], raw["variant"], raw["seed"])] = raw
    rows = ["| cell | variant | what it switches | seeds | greedy return at budget: median (per seed) | "
            "mean greedy return, last quarter of the run: median (per seed) | runs reaching the threshold | "
            "last quarter against the reference: rank-sum p |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for (cell, variant, _), raw in sorted(latest.items()):
        groups.setdefault((cell, variant), []).append(raw)
    order = {c: [*v, SB3] for c, v in VARIANTS.items()}
    for cell, variant in sorted(groups, key=lambda k: (k[0], order.get(k[0], []).index(k[1]))):
        runs = groups[(cell, variant)]
        finals = [r["final_return"] for r in runs]
        tails = [last_quarter(r["curve"]) for r in runs]
        what = "SB3's side, unchanged" if variant == SB3 else VARIANTS[cell][variant][0]
        seeds = ",".join(str(r["seed"]) for r in runs)
        reached = sum(r["reached"] is not None for r in runs)
        ref = reference(cell, variant)
        against = groups.get((cell, ref)) if ref != variant else None
        p = "-"
        if against:
            p = f"{rank_sum_p(tails, [last_quarter(r['curve']) for r in against]):.2g} against `{ref}`"
        rows.append(f"| {cell} | `{variant}` | {what} | {seeds} | {statistics.median(finals):.0f} "
                    f"({', '.join(f'{x:.0f}' for x in finals)}) | {statistics.median(tails):.0f} "
                    f"({', '.join(f'{x:.0f}' for x in tails)}) | {reached}/{len(runs)} | {p} |")  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cell", choices=sorted(VARIANTS))
    ap.add_argument("--variant", nargs="+", help="variants (default: all of the cell's); `sb3`: SB3's side")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, help="env steps per run (default: the cell's budget)")
    ap.add_argument("--summary", action="store_true", help="print the README table from the records and exit")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.summary:
        print(summary())
        return 0
    if not args.cell:
        ap.error("--cell is required (or --summary)")
    variants = args.variant or [*VARIANTS[args.cell], SB3]
    unknown = [v for v in variants if v != SB3 and v not in VARIANTS[args.cell]]
    if unknown:
        ap.error(f"unknown variant(s) {unknown} for {args.cell}; known: {[*VARIANTS[args.cell], SB3]}")
    cell = bl.CELLS[args.cell]
    if args.worker:
        (variant,), (seed,) = variants, args.seeds
        side = "sb3" if variant == SB3 else "ours"
        run = cell if variant == SB3 else _variant_cell(cell, variant)
        if variant in RUNTIME:
            RUNTIME[variant]()
        record = benchlib.Record(SCRIPT)
        raw = bl.run_cell(run, side, seed, args.steps or cell.budget)
        raw.update(variant=variant, last_quarter=round(last_quarter(raw["curve"]), 2))
        record.save(raw, name=f"{cell.key}/{variant}-s{seed}-{record.started:%Y%m%dT%H%M%SZ}")
        return 0
    failed = 0
    for variant in variants:
        for seed in args.seeds:
            print(f"[ablate] {cell.key} {variant} seed {seed}", flush=True)
            failed += not bl.run_worker(__file__, ["--cell", cell.key, "--variant", variant, "--seeds", str(seed)],
                                        args.steps)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
