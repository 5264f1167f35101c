"""Every single-agent algorithm trains from a YAML manifest through ``agilerl train`` and learns.

Budgets are the example manifests' hyperparameters with CI-sized ``max_steps``; each run stops as
soon as an evaluation reaches ``target_score`` (the threshold asserted), so a healthy run is short.
"""

from __future__ import annotations

from typing import Any

import pytest


def _solved(train, read_metrics, manifest, threshold: float) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    code, run_dir, out = train(manifest)
    assert code == 0, out
    rows = read_metrics(run_dir)
    best = max(r["fitness"] for r in rows)
    assert best >= threshold, f"best evaluation return {best:.1f} < {threshold} after {rows[-1]['steps']} steps"
    assert (run_dir / "elite.pt").is_file()
    return rows


@pytest.mark.slow
def test_ppo_solves_cartpole(train, example, read_metrics) -> None:  # type: ignore[no-untyped-def]
    m = example("ppo_cartpole.yaml")
    # Seed 1 first evaluates at >= 475 after 15 generations (153,600 steps) with gymnasium 1.4.
    m["training"]["max_steps"] = 200_000
    rows = _solved(train, read_metrics, m, 475)
    assert rows[-1]["steps"] <= 200_000


@pytest.mark.slow
def test_dqn_solves_cartpole(train, example, read_metrics) -> None:  # type: ignore[no-untyped-def]
    m = example("dqn_cartpole.yaml")
    m["training"]["max_steps"] = 150_000
    _solved(train, read_metrics, m, 475)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["td3_pendulum.yaml", "ddpg_pendulum.yaml"])
def test_continuous_control_solves_pendulum(train, example, read_metrics, name: str) -> None:  # type: ignore[no-untyped-def]
    m = example(name)
    m["training"]["max_steps"] = 20_000
    m["training"]["target_score"] = -300
    _solved(train, read_metrics, m, -300)


def test_custom_entrypoint_env_trains(train, example, read_metrics, examples_dir) -> None:  # type: ignore[no-untyped-def]
    m = example("custom_env/ppo_corridor.yaml")
    m["environment"]["path"] = str(examples_dir / "custom_env")
    code, run_dir, out = train(m)
    assert code == 0, out
    rows = read_metrics(run_dir)
    # Random walking rarely reaches the end within 40 steps (return < 0); the trained policy does.
    assert rows[-1]["fitness"] >= 0.9, rows


def test_ppo_discrete_observations_frozenlake(train, read_metrics) -> None:  # type: ignore[no-untyped-def]
    """Discrete observations (one-hot encoded) on a registered toy-text env: PPO learns to reach the goal."""
    m = {
        "algorithm": {"name": "PPO", "learn_step": 512, "batch_size": 64, "lr": 0.003, "ent_coef": 0.01},
        "environment": {"name": "FrozenLake-v1", "num_envs": 4, "sync": True, "env_config": {"is_slippery": False}},
        "training": {"max_steps": 30_000, "evo_steps": 2048, "target_score": 1.0, "seed": 0},
    }
    code, run_dir, out = train(m)
    assert code == 0, out
    assert max(r["fitness"] for r in read_metrics(run_dir)) == 1.0


@pytest.mark.parametrize(
    ("entrypoint", "threshold"),
    [("gym_test_wrappers:ReachTarget", -0.02), ("gym_test_wrappers:PickPair", 1.9)],
    ids=["box-actions", "multidiscrete-actions"],
)
def test_ppo_continuous_and_multidiscrete_actions(train, read_metrics, entrypoint: str, threshold: float) -> None:  # type: ignore[no-untyped-def]
    """PPO's Gaussian (Box) and per-dimension categorical (MultiDiscrete) policies learn."""
    here = str(__import__("pathlib").Path(__file__).resolve().parent)
    m = {
        "algorithm": {"name": "PPO", "learn_step": 256, "batch_size": 64, "lr": 0.003, "ent_coef": 0.0},
        "environment": {"name": "Toy", "custom": True, "entrypoint": entrypoint, "path": here, "num_envs": 8,
                        "sync": True},
        "training": {"max_steps": 30_000, "evo_steps": 2048, "eval_loop": 4, "target_score": threshold, "seed": 0},
    }  # fmt: skip
    code, run_dir, out = train(m)
    assert code == 0, out
    rows = read_metrics(run_dir)
    assert max(r["fitness"] for r in rows) >= threshold, rows
