"""MF-PBT (``selection_strategy.strategy: multi_frequency``): validation with upstream's field
names, sub-populations evolving at their own frequencies with migration, exact resume, and the
same result on the local and the Ray backends."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl import LocalTrainer
from agilerl.errors import ManifestError
from agilerl.hpo import MultiFrequencySelection
from agilerl.models import MultiFrequencySelectionSpec, load_manifest

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT.parent / "shared" / "agilerl-manifests" / "configs" / "training"

MFPBT: dict[str, Any] = {
    "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32, "update_epochs": 2, "lr": 0.003},
    "environment": {"name": "CartPole-v1", "num_envs": 2},
    "network": {"latent_dim": 16, "arch": "mlp", "encoder_config": {"hidden_size": [16]},
                "head_config": {"hidden_size": [16]}},
    "mutation": {"probabilities": {"no_mut": 0.3, "params_mut": 0.3, "rl_hp_mut": 0.4, "arch_mut": 0},
                 "rl_hp_selection": {"lr": {"min": 0.0003, "max": 0.01}, "ent_coef": {"min": 0.001, "max": 0.1}}},
    "selection_strategy": {"strategy": "multi_frequency", "n_subpopulations": 2, "n_winners": 1,
                           "n_survivors": 0, "n_open_for_migration": 1, "n_losers": 1,
                           "evolution_frequency_ratios": [1, 2]},
    "training": {"pop_size": 6, "max_steps": 512, "evo_steps": 128, "eval_steps": 100, "seed": 11,
                 "progress": False, "save_elite": False},
}  # fmt: skip


def mfpbt(tmp: Path, run: str, **training: Any) -> dict[str, Any]:
    m = copy.deepcopy(MFPBT)
    m["training"].update({"run_dir": str(tmp / run), **training})
    return m


@pytest.mark.parametrize("name", ["ppo/ppo_mfpbt.yaml", "dqn/dqn_mfpbt.yaml", "multi_agent/ippo_mfpbt.yaml", "cqn_mfpbt.yaml", "multi_agent/maddpg_mfpbt.yaml",
                                  "bandit/neural_ucb_mfpbt.yaml"])  # fmt: skip
def test_upstream_mfpbt_manifests_validate_with_their_meaning(name: str) -> None:
    path = UPSTREAM / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    try:
        m = load_manifest(path)
    except ManifestError as exc:  # refused for another section's reason: never for selection_strategy
        assert not [p for p in exc.problems if "selection" in p.path], exc
        return
    sel = m.tournament_selection
    assert isinstance(sel, MultiFrequencySelectionSpec)
    assert (sel.n_subpopulations, sel.evolution_frequency_ratios) == (2, [1, 5])
    assert sel.brackets(m.training.pop_size) == (2, 0, 2, 4)


def test_bad_layouts_are_refused_by_name() -> None:
    m = copy.deepcopy(MFPBT)
    m["training"]["pop_size"] = 7
    with pytest.raises(ManifestError, match=r"selection_strategy: training.pop_size \(7\) must split into 2"):
        load_manifest(m)
    m = copy.deepcopy(MFPBT)
    m["selection_strategy"]["n_losers"] = 2
    with pytest.raises(ManifestError, match=r"must equal the sub-population size"):
        load_manifest(m)
    m = copy.deepcopy(MFPBT)
    m["selection_strategy"]["evolution_frequency_ratios"] = [3, 2]
    with pytest.raises(ManifestError, match="strictly increasing"):
        load_manifest(m)


def test_subpopulations_evolve_at_their_frequencies(tmp_path: Path) -> None:
    result = LocalTrainer.from_manifest(mfpbt(tmp_path, "run")).train()
    assert result.generations == 4
    rows = result.history
    by_gen: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_gen.setdefault(r["generation"], []).append(r)
    # Slots 0-2 are sub-population 0 (evolves every generation), 3-5 sub-population 1 (every 2nd).
    # A slot's agent changes only when its sub-population evolved after the previous generation.
    for g in range(1, 4):
        before, after = [r["agent"] for r in by_gen[g - 1]], [r["agent"] for r in by_gen[g]]
        fast_changed = before[:3] != after[:3]
        slow_changed = before[3:] != after[3:]
        assert fast_changed  # its loser is always replaced
        assert slow_changed == (g % 2 == 0)
    # Each evolution of a sub-population turns its loser into a clone of its winner.
    losers_replaced = sum(1 for g in range(1, 4) for r in by_gen[g] if r["parent"] is not None and
                          r["agent"] not in [x["agent"] for x in by_gen[g - 1]])  # fmt: skip
    assert losers_replaced >= 3 + 1


def params(agent: Any) -> list[torch.Tensor]:
    return [v for net in agent.nets.values() for v in net.state_dict().values()]


def assert_same(a: Any, b: Any) -> None:
    assert [x.index for x in a.population] == [x.index for x in b.population]
    assert [x.fitness for x in a.population] == [x.fitness for x in b.population]
    for x, y in zip(a.population, b.population, strict=True):
        assert all(torch.equal(p, q) for p, q in zip(params(x), params(y), strict=True))


def test_mfpbt_resumes_exactly_and_matches_on_ray(tmp_path: Path, ray_local: Any) -> None:
    full = LocalTrainer.from_manifest(mfpbt(tmp_path, "full", max_steps=384, checkpoint_steps=128)).train()
    # The checkpoint after generation 1 (256 steps): the slow sub-population is half-way through its
    # 2-generation cycle there, and evolves right after the resume.
    ckpt = tmp_path / "full" / "checkpoint_256.pt"
    assert ckpt.exists()
    resumed = LocalTrainer.from_checkpoint(ckpt, run_dir=tmp_path / "resumed").train()
    assert_same(full, resumed)
    on_ray = LocalTrainer.from_manifest(mfpbt(tmp_path, "ray", max_steps=384, backend="ray", ray_workers=2)).train()
    assert_same(full, on_ray)


def test_migration_brings_fitter_agents_and_resets_hyperparameters_from_faster_ones(tmp_path: Path) -> None:
    """Through real PPO agents: a slow sub-population whose open slot is worse than the fast
    sub-population's best takes its networks and keeps its own elite's hyperparameters."""
    manifest = load_manifest(mfpbt(tmp_path, "unit"))
    from agilerl_plugin_gym.envs import make_gym_env
    from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder

    env = make_gym_env(manifest.environment)
    agents = [SingleAgentBuilder.build(manifest.algorithm, env.single_observation_space, env.single_action_space)
              for _ in range(6)]  # fmt: skip
    for i, (agent, fit, lr) in enumerate(
        zip(agents, [5, 50, 1, 9, 8, 7], [1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3], strict=True)
    ):
        agent.index, agent.fitness = i, [float(fit)]
        agent.set_hyperparameter("lr", lr)
    sel = MultiFrequencySelection.from_spec(manifest.tournament_selection, 6, hp_names=["lr"])  # type: ignore[arg-type]
    sel.counters = [0, 1]  # both evolve this cycle
    _, new = sel.select(agents)
    # Fast sub-population (0-2): winner slot 1 (50), open slot 0 (5), loser slot 2 (1) -> a clone of 1.
    # The best outsider, slot 3 (9 > 5), comes from the slower sub-population: whole, lr included.
    assert sel.ops[:3] == ["migrate_full", "keep", "clone"]
    assert sel.parents[:3] == [3, 1, 1]
    assert new[0].get_hyperparameter("lr") == pytest.approx(4e-3)
    # Slow sub-population (3-5): winner 3 (9), open 4 (8), loser 5 (7). The best outsider is agent 1
    # (50 > 8) from the faster sub-population: its weights, slot 3's lr.
    assert sel.ops[4] == "migrate_weights" and sel.parents[4] == 1
    assert new[4].get_hyperparameter("lr") == pytest.approx(4e-3)
    assert all(torch.equal(p, q) for p, q in zip(params(new[4]), params(agents[1]), strict=True))
    assert sel.ops[5] == "clone" and sel.parents[5] == 3
    assert sel.mutation_skip() == {0, 1, 3, 4}
    assert len({a.index for a in new}) == 6
