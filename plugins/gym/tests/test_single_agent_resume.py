"""Resume, determinism and Ctrl-C through the ``agilerl train`` CLI.

A run stopped half way and resumed from its checkpoint must reach the full step count and produce
exactly the evaluations of the uninterrupted run (same seed): network and optimizer state, the
torch RNG, the replay buffer and its RNG, epsilon and the env seeds all continue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


def _ppo(max_steps: int) -> dict[str, Any]:
    return {
        "algorithm": {"name": "PPO", "learn_step": 1024, "batch_size": 128, "lr": 0.001, "ent_coef": 0.0},
        "environment": {"name": "CartPole-v1", "num_envs": 8, "sync": True},
        "network": {"latent_dim": 64, "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False}},
        "training": {"max_steps": max_steps, "evo_steps": 4096, "seed": 3},
    }


def _dqn(max_steps: int) -> dict[str, Any]:
    return {
        "algorithm": {"name": "DQN", "batch_size": 64, "lr": 0.001, "learn_step": 4, "tau": 0.01},
        "environment": {"name": "CartPole-v1", "num_envs": 4, "sync": True},
        "replay_buffer": {"max_size": 10_000},
        "training": {"max_steps": max_steps, "evo_steps": 2000, "learning_delay": 500, "eps_decay": 0.99, "seed": 5},
    }


def _fitness(rows: list[dict[str, Any]]) -> list[tuple[int, float]]:
    return [(r["steps"], r["fitness"]) for r in rows]


@pytest.mark.parametrize("make", [_ppo, _dqn], ids=["ppo", "dqn"])
def test_resume_continues_exactly(train, read_metrics, tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    full = make(8192 if make is _ppo else 4000)
    half_steps = full["training"]["evo_steps"]
    code, full_dir, out = train(full, name="full")
    assert code == 0, out
    reference = _fitness(read_metrics(full_dir))
    assert len(reference) == 2

    half = make(half_steps)
    half["training"]["checkpoint_steps"] = half_steps
    half["training"]["checkpoint_path"] = str(tmp_path / "ckpt")
    code, half_dir, out = train(half, name="half")
    assert code == 0, out
    ckpt = tmp_path / f"ckpt_{half_steps}.pt"
    assert ckpt.is_file(), out
    assert _fitness(read_metrics(half_dir)) == reference[:1]

    code, resumed_dir, out = train(full, "--resume", str(ckpt), name="resumed")
    assert code == 0, out
    resumed = _fitness(read_metrics(resumed_dir))
    # Same step count, and the very same evaluation as the run that was never stopped.
    assert resumed == reference[1:], (resumed, reference)


def test_same_seed_same_returns_other_seed_differs(train, read_metrics) -> None:  # type: ignore[no-untyped-def]
    runs = []
    for name, seed in (("a", 11), ("b", 11), ("c", 12)):
        m = _ppo(4096)
        m["training"]["seed"] = seed
        code, run_dir, out = train(m, name=name)
        assert code == 0, out
        runs.append([(r["fitness"], r.get("train_return")) for r in read_metrics(run_dir)])
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_ctrl_c_writes_checkpoint_and_resumes(train, read_metrics, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m = _ppo(8192)
    m["training"]["checkpoint_path"] = str(tmp_path / "ckpt")
    interrupted = {**m, "environment": {**m["environment"], "path": str(HERE),
                                        "env_wrappers": [["gym_test_wrappers.InterruptAfter", {"steps": 700}]]}}  # fmt: skip
    code, _, out = train(interrupted, name="interrupted")
    assert code == 130, out
    ckpt = tmp_path / "ckpt_interrupted.pt"
    assert ckpt.is_file() and "--resume" in out
    code, run_dir, out = train(m, "--resume", str(ckpt), name="after")
    assert code == 0, out
    rows = read_metrics(run_dir)
    assert rows[-1]["steps"] == 8192


@pytest.mark.parametrize("algo", ["PPO", "DQN", "TD3", "SAC"])
def test_population_with_mutations_trains_and_resumes(train, read_metrics, tmp_path: Path, algo: str) -> None:  # type: ignore[no-untyped-def]
    """A population under tournament selection and every mutation operator (architecture, parameter
    noise, hyperparameters) trains through the core loop, checkpoints mutated architectures, and
    resumes from them."""
    env = {"name": "Pendulum-v1" if algo in ("TD3", "SAC") else "CartPole-v1", "num_envs": 4, "sync": True}
    algorithm = {"name": algo, "batch_size": 32, "learn_step": 128 if algo == "PPO" else 4}
    m: dict[str, Any] = {
        "algorithm": algorithm,
        "environment": env,
        "network": {"latent_dim": 32, "encoder_config": {"arch": "mlp", "hidden_size": [32], "layer_norm": False}},
        "mutation": {
            "probabilities": {"no_mut": 0.1, "arch_mut": 0.4, "new_layer": 0.5, "params_mut": 0.2, "rl_hp_mut": 0.3},
            "rand_seed": 1,
        },
        "tournament_selection": {"tournament_size": 2, "elitism": True},
        "training": {"max_steps": 1024, "evo_steps": 256, "pop_size": 2, "eval_steps": 50, "seed": 0,
                     "checkpoint_steps": 512, "checkpoint_path": str(tmp_path / "pop")},
    }  # fmt: skip
    if algo != "PPO":  # PPO reads no learning_delay: validation refuses it there
        m["training"]["learning_delay"] = 64
    code, run_dir, out = train(m, name="pop")
    assert code == 0, out
    rows = read_metrics(run_dir)
    assert {r["agent"] for r in rows} and max(r["steps"] for r in rows) == 1024
    muts = {r["mutation"] for r in rows}
    assert any(str(x).startswith("arch:") for x in muts), muts
    m["training"]["max_steps"] = 1536
    code, run_dir, out = train(m, "--resume", str(tmp_path / "pop_1024.pt"), name="pop_resumed")
    assert code == 0, out
    assert max(r["steps"] for r in read_metrics(run_dir)) == 1536


@pytest.mark.parametrize("algo", ["PPO", "DQN"])
def test_a_run_dir_resumes_from_its_newest_state_and_a_finished_one_is_a_no_op(
    read_metrics, tmp_path: Path, capsys: pytest.CaptureFixture[str], algo: str
) -> None:  # type: ignore[no-untyped-def]
    """Interrupted, resumed and finished: the run dir then holds an older ``checkpoint_interrupted.pt``
    beside a newer ``last.pt``. ``--resume RUN_DIR`` takes the newest state (``last.pt``), says so,
    and, the run being complete, trains nothing and rewrites nothing."""
    import yaml

    from agilerl.cli import main

    env = {"name": "CartPole-v1", "num_envs": 2, "sync": True}
    if algo == "PPO":
        algorithm: dict[str, Any] = {"name": "PPO", "learn_step": 128, "batch_size": 64}
        extra: dict[str, Any] = {}
    else:
        algorithm = {"name": "DQN", "batch_size": 32, "learn_step": 4}
        extra = {"learning_delay": 64}
    m: dict[str, Any] = {
        "algorithm": algorithm,
        "environment": env,
        "network": {"latent_dim": 16, "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False}},
        "training": {"max_steps": 768, "evo_steps": 256, "eval_steps": 20, "seed": 1, **extra},
    }
    run_dir = tmp_path / "run"
    clean = tmp_path / "m.yaml"
    clean.write_text(yaml.safe_dump(m))
    interrupting = tmp_path / "interrupting.yaml"
    wrapped = {**env, "path": str(HERE), "env_wrappers": [["gym_test_wrappers.InterruptAfter", {"steps": 200}]]}
    interrupting.write_text(yaml.safe_dump({**m, "environment": wrapped}))

    def cli(*args: str) -> tuple[int, str]:
        code = main(["train", *args, "--no-progress"])
        out, err = capsys.readouterr()
        return code, out + err

    code, out = cli(str(interrupting), "--run-dir", str(run_dir))  # Ctrl-C in generation 2 (steps 128 per env each)
    assert code == 130, out
    assert (run_dir / "checkpoint_interrupted.pt").is_file()
    code, out = cli(str(clean), "--resume", str(run_dir))
    assert code == 0, out
    assert f"resuming from {run_dir / 'checkpoint_interrupted.pt'}" in out
    assert (run_dir / "last.pt").is_file() and (run_dir / "checkpoint_interrupted.pt").is_file()
    finished = read_metrics(run_dir)
    assert max(r["steps"] for r in finished) == 768
    kept = {p.name: p.read_bytes() for p in run_dir.glob("*.pt")}

    code, out = cli(str(clean), "--resume", str(run_dir))
    assert code == 0, out
    assert f"resuming from {run_dir / 'last.pt'} (the newest state in {run_dir}: generation 2 (evaluated), " in out
    assert "is already complete (stopped by max_steps); nothing was trained" in out
    assert read_metrics(run_dir) == finished  # no generation redone
    assert {p.name: p.read_bytes() for p in run_dir.glob("*.pt")} == kept
