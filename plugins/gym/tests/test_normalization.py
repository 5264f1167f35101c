"""``environment.normalize``: running-statistics normalisation saved with the agent (SB3's VecNormalize).

Real runs on real envs, seeded and tiny: the statistics are learned during training, frozen at
evaluation, carried per member in every checkpoint (exact resume), and applied by ``agilerl.load``
+ ``predict`` on raw observations, ``evaluate`` and the exported ONNX/TorchScript graph.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gym_test_helpers import TINY_EVO, flat_state, tiny_manifest

from agilerl.builders import AlgorithmBuildRuntime
from agilerl.errors import AgileRLError, ManifestError
from agilerl.inference import evaluate, load
from agilerl.models import load_manifest
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.engine.on_policy import OnPolicyEngine
from agilerl_plugin_gym.normalization import Normalizer, NormalizeSettings, RunningMeanStd
from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder

TD3_PENDULUM = {
    "algorithm": {"name": "TD3", "batch_size": 64, "learn_step": 1},
    "environment": {"name": "Pendulum-v1", "num_envs": 2, "sync": True, "normalize": {"obs": True, "reward": True}},
    "network": {"latent_dim": 16, "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False}},
    "replay_buffer": {"max_size": 2000},
    "training": {"pop_size": 2, "max_steps": 600, "evo_steps": 300, "learning_delay": 100, "eval_steps": 50,
                 "eval_loop": 1, "seed": 0, "progress": False},
}  # fmt: skip


def _snapshot(norm: Normalizer) -> dict[str, Any]:
    return copy.deepcopy(norm.state_dict())


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    fa, fb = flat_state(a), flat_state(b)
    return fa.keys() == fb.keys() and all(
        torch.equal(fa[k], fb[k]) if isinstance(fa[k], torch.Tensor) else fa[k] == fb[k] for k in fa
    )


@pytest.fixture(scope="module")
def td3_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    torch.set_num_threads(1)
    run_dir = tmp_path_factory.mktemp("norm") / "run"
    result = LocalTrainer.from_manifest(copy.deepcopy(TD3_PENDULUM), run_dir=run_dir).train()
    return run_dir, result


def test_running_mean_std_matches_the_whole_sample() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(500, 3))
    rms = RunningMeanStd((3,))
    for chunk in np.array_split(data, 7):
        rms.update(chunk)
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-5)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-4)


def test_each_member_learns_its_own_statistics_and_load_predict_uses_them(td3_run: tuple[Path, Any]) -> None:
    run_dir, result = td3_run
    members = sorted(result.population, key=lambda a: a.index)
    norms = [a.normalizer for a in members]
    assert all(isinstance(n, Normalizer) for n in norms)
    # learned from Pendulum's observations (cos, sin, angular velocity): not the initial (0, 1)
    assert norms[0].obs_rms[""].count > 100 and not np.allclose(norms[0].obs_rms[""].var, 1.0)
    assert norms[0].ret_rms.count > 100
    assert not np.array_equal(norms[0].obs_rms[""].mean, norms[1].obs_rms[""].mean)  # per member

    env = gym.make("Pendulum-v1")
    raws = []
    obs, _ = env.reset(seed=1)
    for _ in range(20):
        raws.append(obs)
        obs, *_ = env.step(env.action_space.sample())
    raw = np.stack(raws).astype(np.float32)

    for member, agent in enumerate(members):
        loaded = load(run_dir / "last.pt", member=member)
        assert _same(loaded.normalizer.state_dict(), agent.normalizer.state_dict())
        # the in-run greedy action: what the agent's evaluation (agent.test) takes for these observations
        in_run = agent.greedy_action(agent.normalizer.normalize_obs(raw))
        got, _ = loaded.predict(raw)
        np.testing.assert_array_equal(got, in_run)
        np.testing.assert_array_equal(loaded.predict(raw[0])[0], in_run[0])  # one raw observation
        # and normalisation matters: the networks fed raw observations act differently
        assert not np.allclose(loaded.greedy_action(raw), got)


def test_evaluation_predict_and_eval_leave_the_statistics_frozen(td3_run: tuple[Path, Any]) -> None:
    run_dir, result = td3_run
    agent = result.population[0]
    before = _snapshot(agent.normalizer)
    venv = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    agent.test(venv, max_steps=20, seed=0)
    agent.predict(np.zeros(3, np.float32))
    assert _same(agent.normalizer.state_dict(), before)
    loaded = load(run_dir, which="last")
    frozen = _snapshot(loaded.normalizer)
    evaluate(loaded, episodes=1, seed=0)
    assert _same(loaded.normalizer.state_dict(), frozen)


def test_exported_policy_takes_raw_observations(td3_run: tuple[Path, Any], tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    from agilerl.export import export_policy

    run_dir, _ = td3_run
    agent = load(run_dir)
    env = gym.make("Pendulum-v1")
    obs = np.stack([env.observation_space.sample() for _ in range(16)]).astype(np.float32)
    expected, _ = agent.predict(obs)
    onnx_file = export_policy(agent, format="onnx", output=tmp_path / "p.onnx")
    got = ort.InferenceSession(str(onnx_file)).run(["action"], {"observation": obs})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    ts_file = export_policy(agent, format="torchscript", output=tmp_path / "p.pt")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates TorchScript
        ts_got = torch.jit.load(str(ts_file))(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(ts_got, expected, rtol=1e-5, atol=1e-5)
    assert json.loads((tmp_path / "p.onnx.json").read_text())["observation_shape"] == [3]


@pytest.mark.parametrize("algo", ["PPO", "DQN", "TD3", "RainbowDQN", "SAC", "TQC", "A2C"])
def test_resume_with_normalisation_is_exact(algo: str, tmp_path: Path) -> None:
    from test_exact_resume import assert_same_state

    torch.set_num_threads(1)
    m = tiny_manifest(algo, tmp_path)
    m["environment"] = {**m["environment"], "normalize": {"obs": True, "reward": True}}
    full = LocalTrainer.from_manifest(m, run_dir=tmp_path / "full").train()
    resumed = LocalTrainer.from_manifest(
        m, run_dir=tmp_path / "resumed", resume_from=tmp_path / f"ckpt_{TINY_EVO}.pt"
    ).train()
    assert resumed.fitnesses == full.fitnesses
    states = [[a.state_dict() for a in sorted(r.population, key=lambda a: a.index)] for r in (resumed, full)]
    assert all("normalizer" in s for s in states[0])
    assert_same_state(states[0], states[1])


@pytest.mark.parametrize(
    ("algo", "env"),
    [("SAC", None), ("TQC", None), ("A2C", None), ("A2C", {"name": "Pendulum-v1", "num_envs": 4, "sync": True})],
    ids=["SAC", "TQC", "A2C-Discrete", "A2C-Box"],
)
def test_load_predict_eval_and_export_take_raw_observations(
    algo: str, env: dict[str, Any] | None, tmp_path: Path
) -> None:
    """SAC, TQC and A2C as TD3 above: statistics learned in training, frozen at evaluation,
    restored by ``agilerl.load``, whose ``predict`` on raw observations is the in-run greedy action
    and whose exported ONNX/TorchScript graph (the deterministic actor) takes raw observations."""
    ort = pytest.importorskip("onnxruntime")
    from agilerl.export import export_policy

    torch.set_num_threads(1)
    m = tiny_manifest(algo, tmp_path)
    m["environment"] = {**(env or m["environment"]), "normalize": {"obs": True, "reward": True}}
    for key in ("checkpoint_path", "checkpoint_steps", "save_elite"):  # the run directory's last.pt instead
        m["training"].pop(key)
    result = LocalTrainer.from_manifest(m, run_dir=tmp_path / "run").train()
    members = sorted(result.population, key=lambda a: a.index)
    rms = members[0].normalizer.obs_rms[""]
    assert rms.count > 100 and not np.allclose(rms.var, 1.0)  # learned in training
    assert members[0].normalizer.ret_rms.count > 100

    space = gym.make(m["environment"]["name"]).observation_space
    space.seed(0)
    raw = np.stack([space.sample() for _ in range(16)]).astype(np.float32)
    if m["environment"]["name"] == "Pendulum-v1":  # angular velocities far from the learned mean
        raw[:, 2] *= 2.0
    for agent in members:
        loaded = load(tmp_path / "run" / "last.pt", member=agent.index)
        assert _same(loaded.normalizer.state_dict(), agent.normalizer.state_dict())
        in_run = agent.greedy_action(agent.normalizer.normalize_obs(raw))
        got, _ = loaded.predict(raw)
        np.testing.assert_array_equal(got, in_run)
        # one raw observation (a batch of one may round differently in the matmul)
        np.testing.assert_allclose(loaded.predict(raw[0])[0], in_run[0], rtol=1e-5, atol=1e-6)
        # the statistics matter: the actor's outputs on raw observations differ (an argmax may not)
        with torch.no_grad():
            actor = loaded.nets[loaded.policy_name]
            on_raw, on_normalised = (
                actor(torch.as_tensor(raw)),
                actor(torch.as_tensor(agent.normalizer.normalize_obs(raw))),
            )
        assert not torch.allclose(on_raw, on_normalised)

    loaded = load(tmp_path / "run", which="last")
    frozen = _snapshot(loaded.normalizer)
    evaluate(loaded, episodes=1, seed=0)
    loaded.predict(raw, deterministic=False)
    venv = gym.make_vec(m["environment"]["name"], num_envs=2, vectorization_mode="sync")
    loaded.test(venv, max_steps=20, seed=0)
    assert _same(loaded.normalizer.state_dict(), frozen)  # frozen outside training

    expected, _ = loaded.predict(raw)
    onnx_file = export_policy(loaded, format="onnx", output=tmp_path / "p.onnx")
    got = ort.InferenceSession(str(onnx_file)).run(["action"], {"observation": raw})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    ts_file = export_policy(loaded, format="torchscript", output=tmp_path / "p.pt")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates TorchScript
        ts_got = torch.jit.load(str(ts_file))(torch.as_tensor(raw)).numpy()
    np.testing.assert_allclose(ts_got, expected, rtol=1e-5, atol=1e-5)


def _ppo_agent(normalize: dict[str, Any] | None, learn_step: int = 128) -> tuple[Any, Any]:
    env_section: dict[str, Any] = {"name": "CartPole-v1", "num_envs": 4, "sync": True}
    if normalize is not None:
        env_section["normalize"] = normalize
    algorithm = {"name": "PPO", "learn_step": learn_step, "batch_size": 64}
    manifest = load_manifest({"algorithm": algorithm, "environment": env_section})
    venv = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
    torch.manual_seed(0)
    agent = SingleAgentBuilder.build(
        manifest.algorithm, venv.single_observation_space, venv.single_action_space,
        runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest),
    )  # fmt: skip
    return agent, venv


def test_reward_scaling_changes_what_the_learner_sees_not_the_reported_returns() -> None:
    runs = {}
    for name, normalize in (("plain", None), ("scaled", {"obs": False, "reward": True, "clip_reward": 5.0})):
        agent, venv = _ppo_agent(normalize, learn_step=1024)  # one rollout: the same actions in both runs
        engine = OnPolicyEngine()
        stats = engine.learn(agent, venv, 1024, seed=0)
        (buf,) = engine.buffers.values()
        runs[name] = (agent, stats, buf.rewards[buf.valid.astype(bool)].copy())
    plain, scaled = runs["plain"], runs["scaled"]
    assert np.all(plain[2] == 1.0)  # CartPole pays +1 per step
    assert not np.allclose(scaled[2], 1.0) and np.all(scaled[2] > 0) and np.all(scaled[2] <= 5.0)
    assert scaled[1]["train_return"] == plain[1]["train_return"]  # reported returns: the env's rewards
    norm = scaled[0].normalizer
    assert norm.ret_rms.count > 1000 and not norm.obs_rms  # obs: false keeps observations raw


def test_observation_normalisation_feeds_the_rollout_normalised_observations() -> None:
    agent, venv = _ppo_agent({})
    engine = OnPolicyEngine()
    engine.learn(agent, venv, 1024, seed=0)
    (buf,) = engine.buffers.values()
    obs = buf.obs.reshape(-1, 4)
    # roughly standardised (the statistics still move while the policy learns)
    assert np.abs(obs.mean(0)).max() < 0.5 and np.all((obs.std(0) > 0.5) & (obs.std(0) < 2.0))
    assert agent.normalizer.obs_rms[""].count == pytest.approx(4 * (1 + 1024 // 4))  # the reset, then each step
    assert np.abs(obs).max() <= 10.0


def test_settings_and_refusals() -> None:
    m = load_manifest({"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1", "normalize": True}})
    assert m.environment.normalize is not None and m.environment.normalize.obs and not m.environment.normalize.reward
    off = load_manifest({"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1", "normalize": False}})
    assert off.environment.normalize is None
    with pytest.raises(ManifestError, match=r"environment\.normalize\.clip_ob"):
        load_manifest(
            {"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1", "normalize": {"clip_ob": 5}}}
        )
    with pytest.raises(ManifestError, match=r"environment\.normalize\.obs.*no float Box part"):
        load_manifest({"algorithm": {"name": "DQN"}, "environment": {"name": "FrozenLake-v1", "normalize": True}})
    with pytest.raises(ManifestError, match=r"environment\.normalize.*not supported yet by IPPO"):
        load_manifest({"algorithm": {"name": "IPPO"}, "environment": {**tiny_manifest("IPPO", Path("."))["environment"],
                                                                      "normalize": True}})  # fmt: skip
    with pytest.raises(AgileRLError, match="no float Box part"):
        Normalizer(NormalizeSettings(), gym.spaces.Discrete(4))
    # Dict observations: the float Box parts are normalised, the others pass through
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-5, 5, (2,)), "cell": gym.spaces.Discrete(3)})
    norm = Normalizer(NormalizeSettings(), space)
    out = norm.train_obs({"pos": np.array([[1.0, 2.0], [3.0, 6.0]], np.float32), "cell": np.array([0, 2])})
    np.testing.assert_array_equal(out["cell"], [0, 2])
    np.testing.assert_allclose(out["pos"], [[-1, -1], [1, 1]], atol=1e-3)


@pytest.mark.slow
def test_td3_learns_pendulum_with_normalised_observations_and_rewards(train, example, read_metrics) -> None:  # type: ignore[no-untyped-def]
    """The example TD3 manifest with ``normalize: {obs, reward}``: -300 within 20k steps, as without
    (test_single_agent_learning.py); seed 1 reaches -122 after 10k steps of its best member."""
    m = example("td3_pendulum.yaml")
    m["environment"]["normalize"] = {"obs": True, "reward": True}
    m["training"]["max_steps"] = 20_000
    m["training"]["target_score"] = -300
    code, run_dir, out = train(m)
    assert code == 0, out
    best = max(r["fitness"] for r in read_metrics(run_dir))
    assert best >= -300, best
    assert load(run_dir).normalizer is not None


@pytest.mark.slow
def test_sac_learns_pendulum_with_normalised_observations_and_rewards(tmp_path: Path) -> None:
    """test_sac.py's Pendulum manifest (-1200 to better than -400 in 6,000 steps) with ``normalize:
    {obs, reward}``, SB3's VecNormalize setting for SAC. Seed 2: -1185, -1182, -1087, -1021, -347,
    -153 per evaluation; the loaded agent, acting on raw observations, scores as well."""
    from test_sac import PENDULUM

    torch.set_num_threads(1)
    m = copy.deepcopy(PENDULUM)
    m["environment"] = {**m["environment"], "normalize": {"obs": True, "reward": True}}
    result = LocalTrainer.from_manifest(m, run_dir=tmp_path / "run").train()
    fitness = [r["fitness"] for r in result.history]
    assert fitness[0] < -900 and fitness[-1] > -400, fitness
    loaded = load(tmp_path / "run", which="last")
    assert loaded.normalizer is not None and loaded.normalizer.ret_rms.count > 1000
    assert evaluate(loaded, episodes=2, seed=0).mean_return > -400


def test_recurrent_ppo_normalises_too(tmp_path: Path) -> None:
    """Recurrent PPO shares the on-policy engine: it learns statistics, and its stateful ``predict``
    on raw observations is its greedy step on normalised ones."""
    torch.set_num_threads(1)
    m = {
        "algorithm": {"name": "PPO", "recurrent": True, "learn_step": 128, "batch_size": 8, "max_seq_len": 8},
        "environment": {"name": "CartPole-v1", "num_envs": 4, "sync": True, "normalize": True},
        "network": {"latent_dim": 16, "encoder_config": {"hidden_state_size": 16}},
        "training": {"max_steps": 256, "evo_steps": 256, "pop_size": 1, "seed": 0, "progress": False},
    }
    result = LocalTrainer.from_manifest(m, run_dir=tmp_path / "run").train()
    agent = result.population[0]
    assert agent.normalizer.obs_rms[""].count == pytest.approx(4 * (1 + 256 // 4))
    loaded = load(tmp_path / "run", which="last")
    space = gym.make("CartPole-v1").observation_space
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(32)]).astype(np.float32)
    state = agent.initial_hidden_state(32)
    expected, expected_state = agent.greedy_recurrent(agent.normalizer.normalize_obs(obs), state)
    got, new_state = loaded.predict(obs)
    np.testing.assert_array_equal(got, expected)
    # the LSTM state follows its input continuously: it shows which observations the network read
    assert torch.equal(torch.as_tensor(new_state), torch.as_tensor(expected_state))
    assert not torch.equal(torch.as_tensor(agent.greedy_recurrent(obs, state)[1]), torch.as_tensor(new_state))
