"""Using a trained gym agent: load from a run dir, predict on plain envs, evaluate, export.

Every agent here is a real one: trained for a tiny budget, or built by the builder for real spaces
(the export tests compare the exported file's actions to the agent's own on random observations,
which needs no training).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from agilerl.builders import AlgorithmBuildRuntime
from agilerl.errors import AgileRLError
from agilerl.inference import evaluate, load
from agilerl.models import load_manifest
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.multi_agent.builder import MultiAgentBuilder
from agilerl_plugin_gym.multi_agent.vec_env import make_pz_env
from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder

HERE = Path(__file__).resolve().parent

PPO_CARTPOLE = {
    "algorithm": {"name": "PPO", "learn_step": 256, "batch_size": 64},
    "environment": {"name": "CartPole-v1", "num_envs": 4, "sync": True},
    # As examples/ppo_cartpole.yaml: the checkpoint's manifest must keep the encoder's `arch`.
    "network": {"latent_dim": 32, "encoder_config": {"arch": "mlp", "hidden_size": [32], "layer_norm": False}},
    "training": {"max_steps": 2048, "evo_steps": 1024, "pop_size": 2, "seed": 0, "progress": False},
    "mutation": {},
    "tournament_selection": {},
}


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    run_dir = tmp_path_factory.mktemp("ppo") / "run"
    LocalTrainer.from_manifest({**PPO_CARTPOLE}, run_dir=run_dir).train()
    return run_dir


def test_run_dir_keeps_best_last_and_elite(ppo_run: Path) -> None:
    from agilerl import checkpoint

    best = checkpoint.load(ppo_run / "best.pt")
    last = checkpoint.load(ppo_run / "last.pt")
    elite = checkpoint.load(ppo_run / "elite.pt")
    rows = [json.loads(x) for x in (ppo_run / "population.jsonl").read_text().splitlines()]
    best_row = max(rows, key=lambda r: r["best"])
    assert best["best"]["fitness"] == best_row["best"] and best["best"]["generation"] == best_row["generation"]
    assert len(best["agents"]) == 1 and best["agents"][0]["fitness"][-1] == best_row["best"]
    assert len(last["agents"]) == 2 and len(elite["agents"]) == 1
    assert rows[-1]["best_ever"] == max(r["best"] for r in rows)


def test_load_predicts_on_a_plain_gymnasium_env_and_on_a_vector_env(ppo_run: Path) -> None:
    from agilerl_plugin_gym.single_agent.dqn import DQN
    from agilerl_plugin_gym.single_agent.ppo import PPO

    agent = load(ppo_run)
    assert isinstance(agent, PPO) and agent.device == torch.device("cpu")
    assert agent.checkpoint_path == ppo_run / "best.pt"
    last = load(ppo_run, device="auto", which="last")
    assert last.device.type in ("cpu", "cuda")
    # Which indices survive selection depends on the run's draws: ask for the one ``last`` holds.
    assert PPO.load(ppo_run / "last.pt", member=last.index).index == last.index
    with pytest.raises(AgileRLError, match="has no member 99"):
        load(ppo_run / "last.pt", member=99)
    with pytest.raises(AgileRLError, match="not a DQN"):
        DQN.load(ppo_run)

    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    action, state = agent.predict(obs)
    assert state is None and np.ndim(action) == 0 and env.action_space.contains(action)
    total, done = 0.0, False
    while not done:
        action, _ = agent.predict(obs)
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
    assert total > 0

    venv = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    batch, _ = venv.reset(seed=1)
    actions, _ = agent.predict(batch)
    assert actions.shape == (3,)
    np.testing.assert_array_equal(actions, [agent.predict(o)[0] for o in batch])
    np.testing.assert_array_equal(actions, agent.greedy_action(batch))
    sampled, _ = agent.predict(batch, deterministic=False)
    assert sampled.shape == (3,) and venv.action_space.contains(sampled)
    with pytest.raises(AgileRLError, match="fits neither"):
        agent.predict(np.zeros(5, np.float32))


def test_evaluate_reports_returns_and_lengths(ppo_run: Path) -> None:
    result = evaluate(ppo_run, episodes=3, seed=0)
    assert result.lengths == [int(r) for r in result.returns]  # CartPole: +1 per step
    assert result.mean_return == pytest.approx(np.mean(result.returns))
    again = evaluate(ppo_run, episodes=3, seed=0)
    assert again.returns == result.returns  # greedy and seeded: the same episodes


def test_eval_records_a_video(ppo_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("moviepy")
    video = tmp_path / "videos" / "cartpole.mp4"
    result = evaluate(ppo_run, episodes=2, seed=0, video=video)
    assert len(result.episodes) == 2
    second = video.with_name("cartpole-episode-1.mp4")
    assert video.stat().st_size > 1000 and second.stat().st_size > 1000
    assert sorted(p.name for p in video.parent.iterdir()) == ["cartpole-episode-1.mp4", "cartpole.mp4"]
    imageio = pytest.importorskip("imageio")
    for path, episode in ((video, result.episodes[0]), (second, result.episodes[1])):
        # one frame per step (and the reset frame, which the encoder may fold into the first)
        assert imageio.get_reader(path).count_frames() in (episode.length, episode.length + 1)


def test_eval_renders_to_a_window(ppo_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pygame")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # a real pygame window, on no display
    result = evaluate(ppo_run, episodes=1, seed=0, render=True)
    assert result.lengths[0] > 0
    with pytest.raises(AgileRLError, match="not both"):
        evaluate(ppo_run, episodes=1, render=True, video="x.mp4")


def _single(algo: str, env_id: str, **algo_fields: Any) -> Any:
    manifest = load_manifest(
        {"algorithm": {"name": algo, **algo_fields}, "environment": {"name": env_id, "num_envs": 1}}
    )
    env = gym.make(env_id)
    return SingleAgentBuilder.build(
        manifest.algorithm, env.observation_space, env.action_space, runtime=AlgorithmBuildRuntime(seed=0)
    ), env


@pytest.mark.parametrize(
    ("algo", "env_id"),
    [
        ("PPO", "CartPole-v1"),
        ("PPO", "Pendulum-v1"),
        ("DDPG", "Pendulum-v1"),
        ("SAC", "Pendulum-v1"),
        ("TQC", "Pendulum-v1"),
        ("A2C", "Pendulum-v1"),
        ("A2C", "CartPole-v1"),
        ("DQN", "FrozenLake-v1"),
    ],
)
def test_export_gives_the_agents_actions(algo: str, env_id: str, tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    from agilerl.export import export_policy

    torch.manual_seed(0)
    agent, env = _single(algo, env_id)
    obs = np.stack([np.asarray(env.observation_space.sample()) for _ in range(16)])
    if obs.dtype.kind == "f":
        obs = obs.astype(np.float32)
    expected, _ = agent.predict(obs)
    onnx_file = export_policy(agent, format="onnx", output=tmp_path / "p.onnx")
    meta = json.loads((tmp_path / "p.onnx.json").read_text())
    assert meta["input"] == "observation" and meta["observation_shape"] == list(obs.shape[1:])
    session = ort.InferenceSession(str(onnx_file))
    got = session.run(["action"], {"observation": obs})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    ts_file = export_policy(agent, format="torchscript", output=tmp_path / "p.pt")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates TorchScript
        ts_got = torch.jit.load(str(ts_file))(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(ts_got, expected, rtol=1e-5, atol=1e-5)
    # one observation from a plain env, as predict takes it
    single = np.asarray(env.observation_space.sample())[None]
    single = single.astype(np.float32) if single.dtype.kind == "f" else single
    one = session.run(["action"], {"observation": single})[0][0]
    np.testing.assert_allclose(one, agent.predict(single[0])[0], rtol=1e-5, atol=1e-5)


def test_predict_on_discrete_observations_takes_a_scalar() -> None:
    agent, env = _single("DQN", "FrozenLake-v1")
    obs, _ = env.reset(seed=0)
    action, _ = agent.predict(obs)
    assert np.ndim(action) == 0 and env.action_space.contains(int(action))
    assert agent.predict(np.array([0, 5, 7]))[0].shape == (3,)
    with pytest.raises(AgileRLError, match=r"needs an agent from agilerl\.load"):
        evaluate(agent)  # built by hand: no manifest to make its env from


def test_multi_agent_predict_on_a_pettingzoo_dict_with_agents_that_leave() -> None:
    manifest = load_manifest(
        {
            "algorithm": {"name": "IPPO"},
            "environment": {"name": "relay", "entrypoint": "test_multi_agent_envs:RelayEnv", "path": str(HERE),
                            "num_envs": 2, "sync": True},
        }
    )  # fmt: skip
    with make_pz_env(manifest.environment, sync=True) as venv:
        agent = MultiAgentBuilder.build_for_run(
            manifest.algorithm, env=venv, manifest=manifest, runtime=AlgorithmBuildRuntime(seed=0)
        )
        batch, _ = venv.reset(seed=0)
        batched, _ = agent.predict(batch)
        assert set(batched) == set(agent.agent_ids) and all(len(v) == 2 for v in batched.values())
    from test_multi_agent_envs import RelayEnv  # importable now: environment.path is on sys.path

    env = RelayEnv()
    obs, _ = env.reset(seed=0)
    steps = 0
    while env.agents:
        actions, _ = agent.predict(obs)
        assert set(actions) == set(obs)
        for a, act in actions.items():
            assert env.action_space(a).contains(act)
        obs, *_ = env.step(actions)
        steps += 1
    assert steps > 0
    episodes = agent.run_episodes(manifest.environment, episodes=2, seed=0)
    assert len(episodes) == 2 and all(e.length > 0 for e in episodes)
    with pytest.raises(AgileRLError, match="--video records gymnasium envs"):
        agent.run_episodes(manifest.environment, episodes=1, video="x.mp4")


def test_a_multi_agent_run_loads_and_plays_a_pettingzoo_env(tmp_path: Path) -> None:
    manifest = {
        "algorithm": {"name": "IPPO", "learn_step": 64, "batch_size": 32},
        "environment": {"name": "relay", "entrypoint": "test_multi_agent_envs:RelayEnv", "path": str(HERE),
                        "num_envs": 2, "sync": True},
        "training": {"max_steps": 128, "evo_steps": 128, "seed": 0, "progress": False},
    }  # fmt: skip
    LocalTrainer.from_manifest(manifest, run_dir=tmp_path / "run").train()
    agent = load(tmp_path / "run", manifest=manifest)  # the manifest given: its custom env is ours
    assert type(agent).__name__ == "IPPO" and agent.steps >= 128
    result = evaluate(agent, episodes=3, seed=0)
    assert len(result.episodes) == 3 and all(e.length > 0 for e in result.episodes)


def test_a_pettingzoo_env_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mpe2")
    pytest.importorskip("pygame")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # a real pygame window, on no display
    env = {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 1, "sync": True, "env_config": {"max_cycles": 10}}
    manifest = load_manifest({"algorithm": {"name": "IPPO"}, "environment": env})
    with make_pz_env(manifest.environment, sync=True) as venv:
        agent = MultiAgentBuilder.build_for_run(
            manifest.algorithm, env=venv, manifest=manifest, runtime=AlgorithmBuildRuntime(seed=0)
        )
    (episode,) = agent.run_episodes(manifest.environment, episodes=1, seed=0, render=True)
    assert episode.length == 10


def test_render_reads_env_config_files_as_training_does(tmp_path: Path) -> None:
    """``--render``/``--video`` re-read ``env_config`` with the env makers' loader: a file that
    is gone or unparsable is the same named error as in training, never an empty config."""
    from agilerl_plugin_gym.env_spec import GymEnvSpec
    from agilerl_plugin_gym.envs import GymEnvError
    from agilerl_plugin_gym.inference import render_spec
    from agilerl_plugin_gym.multi_agent.vec_env import PettingZooEnvError

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("sutton_barto_reward: true\n")
    spec = GymEnvSpec(name="CartPole-v1", env_config=str(cfg))
    assert render_spec(spec, "rgb_array").env_config == {"sutton_barto_reward": True, "render_mode": "rgb_array"}
    cfg.write_text("sutton_barto_reward: [true\n")
    with pytest.raises(GymEnvError, match=rf"^environment\.env_config: {cfg} could not be parsed"):
        render_spec(spec, "rgb_array")
    cfg.unlink()
    with pytest.raises(GymEnvError, match="neither a mapping nor an existing YAML/JSON file"):
        render_spec(spec, "human")
    with pytest.raises(PettingZooEnvError, match="neither a mapping nor an existing YAML/JSON file"):
        render_spec(spec, "human", multi_agent=True)
