"""Offline RL (CQN with ``env_type: offline``): learning from a recorded dataset, the dataset formats,
AgileRL's manifests, and what a resumed run checks.

The learning test records its own data: a DQN trained briefly on CartPole-v1 (half-way to solving
it) acts epsilon-greedily for ~10k steps; CQN trained only on those transitions (as AgileRL HDF5
and as a local Minari dataset) must beat the mean return of the episodes it learned from, and the
env is stepped only by evaluation.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
import yaml
from gymnasium.vector import SyncVectorEnv
from offline_test_helpers import mean_return, record_episodes, write_hdf5, write_minari

import agilerl
from agilerl.errors import AgileRLError, ManifestError
from agilerl.models import load_manifest
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.offline.cqn import CQN
from agilerl_plugin_gym.offline.datasets import read_dataset

REPO = Path(__file__).resolve().parents[3]
UPSTREAM = Path(os.environ.get("AGILERL_UPSTREAM_MANIFESTS", REPO.parent / "shared" / "agilerl-manifests"))
NET = {"latent_dim": 64, "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False},
       "head_config": {"hidden_size": [], "layer_norm": False}}  # fmt: skip


@pytest.fixture
def minari_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh local Minari directory (MINARI_DATASETS_PATH)."""
    root = tmp_path / "minari"
    root.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def half_trained_dqn(tmp: Path) -> Any:
    """A DQN trained for 10k CartPole steps (evaluation return ~170 of 500)."""
    m = {
        "algorithm": {"name": "DQN", "batch_size": 64, "lr": 0.0023, "learn_step": 4, "tau": 0.01, "double": True},
        "environment": {"name": "CartPole-v1", "num_envs": 8, "sync": True},
        "network": NET,
        "replay_buffer": {"max_size": 20_000},
        "training": {"max_steps": 10_000, "evo_steps": 10_000, "learning_delay": 500, "eps_start": 1.0,
                     "eps_end": 0.05, "eps_decay": 0.995, "seed": 3, "progress": False, "save_elite": False},
    }  # fmt: skip
    return LocalTrainer.from_manifest(m, run_dir=tmp / "dqn").train().population[0]


def cqn_manifest(environment: dict[str, Any], max_steps: int, tmp: Path) -> dict[str, Any]:
    return {
        "algorithm": {"name": "CQN", "batch_size": 128, "lr": 0.003, "learn_step": 1, "tau": 0.05, "double": True},
        "environment": {"name": "CartPole-v1", "num_envs": 10, "sync": True, **environment},
        "network": NET,
        "training": {"max_steps": max_steps, "evo_steps": max_steps // 3, "eval_loop": 2, "seed": 1,
                     "progress": False, "save_elite": False, "run_dir": str(tmp / "cqn")},
    }  # fmt: skip


@pytest.mark.slow  # a DQN, a recording and two CQN runs (~40 s on one core)
def test_cqn_trained_only_on_a_recorded_dataset_beats_its_behaviour_policy(
    tmp_path: Path, minari_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    dqn = half_trained_dqn(tmp_path)
    episodes = record_episodes(lambda o: int(dqn.greedy_action(o[None])[0]), 10_000, eps=0.3, seed=5)
    behaviour = mean_return(episodes)
    assert 40 < behaviour < 300, behaviour  # a mediocre behaviour policy: room to do better
    write_hdf5(tmp_path / "cartpole.h5", episodes)
    write_minari("cartpole/half-dqn-v0", episodes)

    # Every env step happens inside an evaluation (CQN.test): training only samples the dataset.
    steps = {"all": 0, "in_test": 0}
    step, test = SyncVectorEnv.step, CQN.test

    def counting_step(self: Any, actions: Any) -> Any:
        steps["all"] += 1
        return step(self, actions)

    def counting_test(self: Any, *args: Any, **kwargs: Any) -> float:
        before = steps["all"]
        try:
            return test(self, *args, **kwargs)
        finally:
            steps["in_test"] += steps["all"] - before

    monkeypatch.setattr(SyncVectorEnv, "step", counting_step)
    monkeypatch.setattr(CQN, "test", counting_test)
    for source, budget in (({"dataset_path": str(tmp_path / "cartpole.h5")}, 6000),
                           ({"minari_dataset_id": "cartpole/half-dqn-v0"}, 5000)):  # fmt: skip
        m = cqn_manifest(source, budget, tmp_path)
        m["training"].update({"evo_steps": 1000, "save_elite": True})
        result = LocalTrainer.from_manifest(m, overwrite=True).train()
        assert result.population[0].steps == budget
        fitness = [r["fitness"] for r in result.history]
        # The run's best agent (best.pt, chosen by the evaluations during training), played on 20
        # episodes of other seeds: it beats the policy that recorded its data.
        assert steps["all"] == steps["in_test"] > 0, steps
        played = agilerl.evaluate(result.run_dir, episodes=20, seed=9_999)
        assert played.mean_return > behaviour + 50, (source, fitness, played.returns, behaviour)


def test_hdf5_pairs_rows_like_agilerl_and_honours_next_observations_and_timeouts(tmp_path: Path) -> None:
    import gymnasium as gym

    from agilerl_plugin_gym.offline.specs import OfflineEnvSpec

    env = gym.make("CartPole-v1")
    episodes = record_episodes(None, 60, seed=1)
    n = sum(len(e["rewards"]) for e in episodes)
    spec = OfflineEnvSpec(name="CartPole-v1", dataset_path=str(write_hdf5(tmp_path / "a.h5", episodes)))
    data = read_dataset(spec, env.observation_space, env.action_space)
    # AgileRL's pairing: row i's next observation is row i + 1; the last row is dropped.
    assert len(data) == n - 1
    obs = np.concatenate([e["observations"][:-1] for e in episodes])
    np.testing.assert_array_equal(data.fields["next_obs"], obs[1:])
    assert data.fields["done"].sum() == sum(int(e["terminations"].sum()) for e in episodes) - int(
        episodes[-1]["terminations"][-1]
    )
    assert data.behaviour_return == pytest.approx(mean_return(episodes))
    # next_observations: every row is a transition with its own next observation.
    spec = spec.model_copy(
        update={"dataset_path": str(write_hdf5(tmp_path / "b.h5", episodes, next_observations=True))}
    )
    data = read_dataset(spec, env.observation_space, env.action_space)
    assert len(data) == n
    np.testing.assert_array_equal(data.fields["next_obs"], np.concatenate([e["observations"][1:] for e in episodes]))
    # timeouts (D4RL): a cut-off row's next row starts another episode, so it is not a transition.
    with h5py.File(tmp_path / "a.h5", "a") as f:
        timeouts = np.zeros(n, dtype=bool)
        timeouts[[5, 9]] = True
        f["timeouts"] = timeouts
    data = read_dataset(spec.model_copy(update={"dataset_path": str(tmp_path / "a.h5")}), env.observation_space,
                        env.action_space)  # fmt: skip
    assert len(data) == n - 1 - 2
    assert not any(np.array_equal(row, obs[6]) for row in data.fields["next_obs"][:8])


def test_minari_dataset_of_another_env_is_refused_naming_it(tmp_path: Path, minari_dir: Path) -> None:
    write_minari("cartpole/random-v0", record_episodes(None, 50, seed=2))
    m = cqn_manifest({"minari_dataset_id": "cartpole/random-v0"}, 300, tmp_path)
    m["environment"]["name"] = "Acrobot-v1"
    with pytest.raises(ManifestError) as info:
        load_manifest(m)
    msg = str(info.value)
    assert "environment.minari_dataset_id: Minari dataset 'cartpole/random-v0'" in msg
    assert "observation space Box" in msg and "(4,)" in msg and "(6,)" in msg, msg
    # A typo'd id gets the local ids as a hint, and how to get a dataset that is not there.
    m = cqn_manifest({"minari_dataset_id": "cartpole/randm-v0"}, 300, tmp_path)
    with pytest.raises(ManifestError, match=r"did you mean 'cartpole/random-v0'\?.*minari download cartpole/randm-v0"):
        load_manifest(m)


def test_agilerl_cqn_manifests_validate_and_train_once_their_minari_dataset_is_local(
    tmp_path: Path, minari_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AgileRL's own CQN manifests name Minari ids; absent they are refused by name, present they run."""
    path = UPSTREAM / "tests" / "manifests" / "cqn.yaml"
    if not path.exists():
        pytest.skip(f"{path} not present")
    with pytest.raises(ManifestError, match=r"environment.minari_dataset_id: Minari dataset 'cartpole-v0' is not in"):
        load_manifest(path)
    write_minari("cartpole-v0", record_episodes(None, 400, seed=3))
    m = yaml.safe_load(path.read_text())
    m["training"].update({"progress": False, "save_elite": False, "seed": 0})
    result = LocalTrainer.from_manifest(m, run_dir=tmp_path / "run").train()
    assert [a.steps for a in result.population] == [1000, 1000]
    assert result.generations == 10
    # configs/training/cqn.yaml (with HPO, activation mutation included): valid unchanged once
    # cartpole/random-v0 is local.
    cfg = yaml.safe_load((UPSTREAM / "configs" / "training" / "cqn.yaml").read_text())
    assert cfg["mutation"]["probabilities"]["act_mut"] > 0
    with pytest.raises(ManifestError, match="Minari dataset 'cartpole/random-v0' is not in"):
        load_manifest(copy.deepcopy(cfg))
    write_minari("cartpole/random-v0", record_episodes(None, 400, seed=4))
    spec = load_manifest(cfg)
    assert spec.environment.minari_dataset_id == "cartpole/random-v0"  # type: ignore[union-attr]
    assert spec.algorithm.learn_step == 1 and spec.evo_steps == 5000


def test_a_resumed_run_refuses_a_dataset_that_changed(tmp_path: Path) -> None:
    episodes = record_episodes(None, 300, seed=6)
    h5 = write_hdf5(tmp_path / "d.h5", episodes)
    m = cqn_manifest({"dataset_path": str(h5), "num_envs": 2}, 200, tmp_path)
    m["algorithm"]["batch_size"] = 32
    m["training"].update({"evo_steps": 100, "eval_loop": 1, "checkpoint_steps": 100,
                          "checkpoint_path": str(tmp_path / "ckpt")})  # fmt: skip
    LocalTrainer.from_manifest(m).train()
    ckpt = tmp_path / "ckpt_100.pt"
    assert ckpt.is_file()
    write_hdf5(h5, record_episodes(None, 300, seed=7))  # other data under the same name
    with pytest.raises(AgileRLError, match="the dataset differs from the one the checkpoint trained on"):
        LocalTrainer.from_manifest(m, run_dir=tmp_path / "resumed", resume_from=ckpt).train()


def test_learn_step_and_learning_delay_set_the_number_of_gradient_steps(tmp_path: Path) -> None:
    h5 = write_hdf5(tmp_path / "d.h5", record_episodes(None, 300, seed=8))
    counts = {}
    for learn_step, delay in ((1, 0), (4, 0), (4, 200)):
        m = cqn_manifest({"dataset_path": str(h5), "num_envs": 1}, 400, tmp_path)
        m["algorithm"].update({"batch_size": 32, "learn_step": learn_step})
        m["training"].update({"evo_steps": 400, "eval_steps": 5, "learning_delay": delay})
        result = LocalTrainer.from_manifest(m, overwrite=True).train()
        counts[(learn_step, delay)] = result.history[-1]["gradient_steps"]
    # learning_delay 200: the first update comes at step 200, then every 4th step up to 400.
    assert counts == {(1, 0): 400, (4, 0): 100, (4, 200): 51}


def test_offline_env_type_is_not_for_online_algorithms(tmp_path: Path) -> None:
    h5 = write_hdf5(tmp_path / "d.h5", record_episodes(None, 50, seed=9))
    env = {"env_type": "offline", "name": "CartPole-v1", "dataset_path": str(h5)}
    with pytest.raises(ManifestError, match=r"environment.env_type: DQN trains on gym environments"):
        load_manifest({"algorithm": {"name": "DQN"}, "environment": env})


def test_the_only_env_is_the_evaluation_env_with_num_envs_and_sync_as_given(tmp_path: Path) -> None:
    from gymnasium.vector import AsyncVectorEnv

    from agilerl_plugin_gym.offline.strategy import OfflineStrategy

    h5 = write_hdf5(tmp_path / "d.h5", record_episodes(None, 200, seed=10))
    for sync, kind, num_envs, made in ((True, SyncVectorEnv, 16, 10), (False, AsyncVectorEnv, 2, 2)):
        m = load_manifest(cqn_manifest({"dataset_path": str(h5), "num_envs": num_envs, "sync": sync}, 100, tmp_path))
        strategy = OfflineStrategy()
        env = strategy.make_env(m, seed=0)
        try:
            assert isinstance(env, kind) and env.num_envs == made
            assert strategy.make_eval_env(m, seed=1, train_env=env) is env
        finally:
            env.close()


def test_a_batch_size_mutated_past_the_dataset_size_still_learns(tmp_path: Path) -> None:
    from types import SimpleNamespace

    h5 = write_hdf5(tmp_path / "d.h5", record_episodes(None, 100, seed=11))
    raw = cqn_manifest({"dataset_path": str(h5), "num_envs": 1}, 100, tmp_path)
    raw["algorithm"]["batch_size"] = 32
    raw["training"]["eval_steps"] = 5
    m = load_manifest(raw)
    trainer = LocalTrainer(m, run_dir=tmp_path / "run")
    agent = trainer.train().population[0]
    size = len(trainer.strategy.memory)
    agent.set_hyperparameter("batch_size", 4 * size)  # what rl_hp_mut may do with a small dataset
    assert agent.spec.batch_size == 4 * size
    stats = trainer.strategy.learn(agent, SimpleNamespace(manifest=m), 10)  # type: ignore[arg-type]
    assert stats["gradient_steps"] == 10 and np.isfinite(stats["loss"])


def test_offline_gradient_steps_run_with_denormals_flushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agilerl_plugin_gym.offline.strategy as offline_strategy
    from agilerl_plugin_gym.denormals import flushing

    seen: list[bool] = []
    real = offline_strategy.gradient_steps

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(flushing())
        return real(*args, **kwargs)

    monkeypatch.setattr(offline_strategy, "gradient_steps", recording)
    h5 = write_hdf5(tmp_path / "d.h5", record_episodes(None, 300, seed=8))
    m = cqn_manifest({"dataset_path": str(h5), "num_envs": 1}, 100, tmp_path)
    m["algorithm"]["batch_size"] = 32
    m["training"].update({"evo_steps": 100, "eval_steps": 5})
    LocalTrainer.from_manifest(m, overwrite=True).train()
    assert seen and all(seen)
    assert not flushing()
