"""Action masking (``action_masking: true``, PPO): masks from ``info["action_mask"]``, a Dict
observation's ``action_mask`` key or an ``action_masks()`` method; masked logits in rollouts,
updates, greedy actions and ``predict``; a masked env and an unmasked algorithm (or the reverse)
is an error naming the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gym_test_helpers import EnvsMade
from masked_env import N_ACTIONS, MaskedChoiceEnv

from agilerl.builders import AlgorithmBuildRuntime
from agilerl.errors import AgileRLError, ManifestError
from agilerl.models import load_manifest
from agilerl_plugin_gym.engine.off_policy import OffPolicyEngine
from agilerl_plugin_gym.engine.on_policy import OnPolicyEngine
from agilerl_plugin_gym.engine.replay_per import ReplaySettings
from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder


def _vec(source: str | None, n: int = 4) -> Any:
    return gym.vector.SyncVectorEnv([lambda: MaskedChoiceEnv(source) for _ in range(n)])


def _ppo(env: Any, **fields: Any) -> Any:
    manifest = load_manifest({
        "algorithm": {"name": "PPO", "learn_step": 256, "batch_size": 64, "update_epochs": 4, "lr": 3e-3, **fields},
        "environment": {"name": "CartPole-v1"},
    })  # fmt: skip
    torch.manual_seed(0)
    return SingleAgentBuilder.build_for_run(
        manifest.algorithm, env=env, manifest=manifest, runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest)
    )


def test_masked_actions_are_never_taken_over_random_masks() -> None:
    """A property over 2,000 random masks (one to all actions allowed, seeded): sampling, the greedy
    action and predict pick allowed actions only, and the update's log-probabilities of the
    allowed actions sum to one with finite entropy."""
    agent = _ppo(_vec("info"), action_masking=True)
    rng = np.random.default_rng(0)
    obs = torch.as_tensor(rng.random((2000, N_ACTIONS)), dtype=torch.float32)
    masks = rng.random((2000, N_ACTIONS)) < rng.random((2000, 1))
    masks[np.arange(2000), rng.integers(0, N_ACTIONS, 2000)] = True  # at least one allowed
    for _ in range(3):
        action, _, _ = agent.act(obs, torch.as_tensor(masks))
        assert masks[np.arange(2000), action.numpy()].all()
    greedy = agent.greedy_action(obs.numpy(), masks)
    assert masks[np.arange(2000), greedy].all()
    predicted, _ = agent.predict(obs.numpy(), action_masks=masks)
    assert masks[np.arange(2000), predicted].all()
    sampled, _ = agent.predict(obs.numpy(), action_masks=masks, deterministic=False)
    assert masks[np.arange(2000), sampled].all()
    logp = torch.stack([agent.evaluate_actions(obs, torch.full((2000,), a), torch.as_tensor(masks))[0]
                        for a in range(N_ACTIONS)], -1)  # fmt: skip
    allowed_mass = (logp.exp() * torch.as_tensor(masks)).sum(-1)
    torch.testing.assert_close(allowed_mass, torch.ones(2000))
    assert torch.isfinite(agent.evaluate_actions(obs, action.clone(), torch.as_tensor(masks))[1]).all()


@pytest.mark.parametrize("source", ["info", "method", "obs"])
def test_each_mask_source_trains_without_a_forbidden_action(source: str) -> None:
    env = _vec(source)
    agent = _ppo(env, action_masking=True)
    stats = OnPolicyEngine().learn(agent, env, 512, seed=0)
    assert stats["train_return"] == 20.0  # every action of every episode was an allowed one
    assert agent.test(_vec(source), seed=1) == 20.0  # the greedy evaluation reads the masks too


def test_masking_learns_a_masked_env_faster_than_no_masking() -> None:
    masked_env, plain_env = _vec("info"), _vec(None)
    masked, plain = _ppo(masked_env, action_masking=True), _ppo(plain_env)
    engine = OnPolicyEngine()
    got = {name: engine.learn(agent, env, 2048, seed=0)["train_return"]
           for name, agent, env in (("masked", masked, masked_env), ("plain", plain, plain_env))}  # fmt: skip
    assert got["masked"] == 20.0 and got["plain"] < 15.0, got


def test_a_masked_env_and_the_algorithm_must_agree() -> None:
    with pytest.raises(AgileRLError, match=r"set algorithm\.action_masking: true"):
        OnPolicyEngine().learn(_ppo(_vec("info")), _vec("info"), 64, seed=0)
    cartpole = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    with pytest.raises(AgileRLError, match="the env gives no action mask"):
        OnPolicyEngine().learn(_ppo(cartpole, action_masking=True), cartpole, 64, seed=0)
    with pytest.raises(AgileRLError, match=r"predict: this policy was trained with action_masking"):
        _ppo(_vec("info"), action_masking=True).predict(np.zeros(N_ACTIONS, np.float32))
    with pytest.raises(Exception, match="not supported with recurrent"):
        load_manifest({"algorithm": {"name": "PPO", "recurrent": True, "action_masking": True},
                       "environment": {"name": "CartPole-v1"}})  # fmt: skip
    env = _vec("info")
    replay = ReplaySettings()
    with pytest.raises(AgileRLError, match=r"set algorithm\.action_masking: true"):
        OffPolicyEngine(replay, 10, 100).learn(_dqn(env), env, replay.make_buffer(100, seed=0),
                                               np.random.default_rng(0), 16, seed=0)  # fmt: skip
    rainbow_manifest = load_manifest({"algorithm": {"name": "RainbowDQN"}, "environment": {"name": "CartPole-v1"}})
    rainbow = SingleAgentBuilder.build_for_run(
        rainbow_manifest.algorithm, env=env, manifest=rainbow_manifest,
        runtime=AlgorithmBuildRuntime(seed=0, manifest=rainbow_manifest),
    )  # fmt: skip
    per = ReplaySettings(per=True, alpha=0.6, n_step=3)
    with pytest.raises(AgileRLError, match=r"set algorithm\.action_masking: true"):
        OffPolicyEngine(per, 10, 100).learn(rainbow, env, per.make_buffer(100, seed=0), np.random.default_rng(0), 16,
                                            seed=0)  # fmt: skip
    with pytest.raises(ManifestError, match="not supported with combined_reward"):
        load_manifest({"algorithm": {"name": "RainbowDQN", "action_masking": True, "combined_reward": True},
                       "environment": {"name": "CartPole-v1"}})  # fmt: skip
    td3_manifest = load_manifest({"algorithm": {"name": "TD3"}, "environment": {"name": "Pendulum-v1"}})
    assert "action_masking" not in type(td3_manifest.algorithm).model_fields  # continuous: nothing to mask


def test_validation_catches_a_masked_env_without_action_masking() -> None:
    """The manifest fails validation (the env is made there, as for any custom env), not the run."""
    env = {"name": "Masked", "custom": True, "entrypoint": "masked_env:MaskedChoiceEnv",
           "path": str(Path(__file__).parent), "env_config": {"source": "method"}}  # fmt: skip
    with pytest.raises(ManifestError, match=r"algorithm\.action_masking"):
        load_manifest({"algorithm": {"name": "PPO"}, "environment": env})
    load_manifest({"algorithm": {"name": "PPO", "action_masking": True}, "environment": env})
    with pytest.raises(ManifestError, match=r"set algorithm\.action_masking: true"):
        load_manifest({"algorithm": {"name": "RainbowDQN"}, "environment": env})


def test_validation_builds_a_custom_env_once_for_its_spaces_api_and_masks(envs_made: EnvsMade) -> None:
    """The env made for the space checks also serves the custom-env API and mask checks, and is closed."""
    env = {"name": "Masked", "custom": True, "entrypoint": "masked_env:MaskedChoiceEnv",
           "path": str(Path(__file__).parent), "env_config": {"source": "method"}}  # fmt: skip
    with pytest.raises(ManifestError, match=r"algorithm\.action_masking"):  # the mask check ran on it
        load_manifest({"algorithm": {"name": "PPO"}, "environment": env})
    assert len(envs_made.made) == 1 and envs_made.closed == envs_made.made
    envs_made.clear()
    load_manifest({"algorithm": {"name": "PPO", "action_masking": True}, "environment": env})
    assert len(envs_made.made) == 1 and envs_made.closed == envs_made.made


def test_the_onnx_export_takes_the_mask_as_its_second_input(tmp_path: Any) -> None:
    ort = pytest.importorskip("onnxruntime")
    from agilerl.export import export_policy

    agent = _ppo(_vec("info"), action_masking=True)
    onnx_file = export_policy(agent, format="onnx", output=tmp_path / "masked.onnx")
    session = ort.InferenceSession(str(onnx_file))
    assert [i.name for i in session.get_inputs()] == ["observation", "action_mask"]
    rng = np.random.default_rng(3)
    obs = rng.random((64, N_ACTIONS)).astype(np.float32)
    masks = rng.random((64, N_ACTIONS)) < 0.4
    masks[np.arange(64), rng.integers(0, N_ACTIONS, 64)] = True
    got = session.run(["action"], {"observation": obs, "action_mask": masks})[0]
    assert masks[np.arange(64), got].all()
    np.testing.assert_array_equal(got, agent.predict(obs, action_masks=masks)[0])


def _dqn(env: Any, **fields: Any) -> Any:
    manifest = load_manifest({
        "algorithm": {"name": "DQN", "batch_size": 32, "learn_step": 4, "lr": 1e-3, **fields},  # name: or Rainbow
        "environment": {"name": "CartPole-v1"},
    })  # fmt: skip
    torch.manual_seed(0)
    return SingleAgentBuilder.build_for_run(
        manifest.algorithm, env=env, manifest=manifest, runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest)
    )


def test_dqn_never_takes_a_masked_action_over_random_masks() -> None:
    """Greedy, epsilon-greedy and fully random (warm-up) actions over 2,000 random masks."""
    agent = _dqn(_vec("info"), action_masking=True)
    rng = np.random.default_rng(1)
    obs = rng.random((2000, N_ACTIONS)).astype(np.float32)
    masks = rng.random((2000, N_ACTIONS)) < rng.random((2000, 1))
    masks[np.arange(2000), rng.integers(0, N_ACTIONS, 2000)] = True
    rows = np.arange(2000)
    for eps, warmup in ((0.0, False), (0.5, False), (1.0, True)):
        agent.epsilon = eps
        action, _ = agent.explore(obs, rng, warmup=warmup, action_mask=masks)
        assert masks[rows, action].all()
    assert masks[rows, agent.predict(obs, action_masks=masks)[0]].all()
    one_allowed = np.eye(N_ACTIONS, dtype=bool)[rng.integers(0, N_ACTIONS, 2000)]
    agent.epsilon = 1.0
    assert (agent.explore(obs, rng, action_mask=one_allowed)[0] == one_allowed.argmax(1)).all()


@pytest.mark.parametrize(
    ("source", "algo", "replay"),
    [
        ("info", "DQN", ReplaySettings()),
        ("method", "DQN", ReplaySettings(n_step=3)),
        ("obs", "DQN", ReplaySettings()),
        ("info", "RainbowDQN", ReplaySettings(per=True, alpha=0.6, n_step=3)),
    ],
)
def test_dqn_and_rainbow_train_on_each_mask_source_without_a_forbidden_action(
    source: str, algo: str, replay: ReplaySettings
) -> None:
    env = _vec(source)
    agent = _dqn(env, action_masking=True, name=algo)
    buf = replay.make_buffer(2000, seed=0, dtypes={"reward": np.float32, "done": np.float32})
    stats = OffPolicyEngine(replay, 64, 2000).learn(agent, env, buf, np.random.default_rng(0), 400, seed=0)
    assert stats["train_return"] == 20.0 and "loss" in stats
    sample = buf.sample(8, beta=0.4) if replay.per else buf.sample(8)
    assert sample["next_action_mask"].shape == (8, N_ACTIONS)  # the bootstrap's allowed actions
    assert agent.test(_vec(source), seed=1) == 20.0


def _normalized(algo: str, env: Any, **fields: Any) -> Any:
    """A masked agent built with ``environment.normalize`` (observations and rewards)."""
    defaults = {"PPO": {"learn_step": 256, "batch_size": 64, "update_epochs": 4, "lr": 3e-3},
                "DQN": {"batch_size": 32, "learn_step": 4, "lr": 1e-3}}[algo]  # fmt: skip
    manifest = load_manifest({
        "algorithm": {"name": algo, "action_masking": True, **defaults, **fields},
        "environment": {"name": "CartPole-v1", "normalize": {"obs": True, "reward": True}},
    })  # fmt: skip
    torch.manual_seed(0)
    return SingleAgentBuilder.build_for_run(
        manifest.algorithm, env=env, manifest=manifest, runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest)
    )


@pytest.mark.parametrize("source", ["info", "obs"])
def test_masking_and_normalisation_together(source: str) -> None:
    """The mask is read from the raw observation and taken out before the statistics and the
    networks see it; training, evaluation, predict (raw observations in) and the exported policy
    (raw observation and mask in) all pick allowed actions only."""
    env = _vec(source)
    agent = _normalized("PPO", env)
    stats = OnPolicyEngine().learn(agent, env, 512, seed=0)
    assert stats["train_return"] == 20.0
    norm = agent.normalizer
    assert set(norm.obs_rms) == ({"obs"} if source == "obs" else {""})  # never the mask
    assert all(rms.count > 1 for rms in norm.obs_rms.values())
    assert agent.test(_vec(source), seed=1) == 20.0
    rng = np.random.default_rng(4)
    raw = rng.random((256, N_ACTIONS)).astype(np.float32)
    masks = rng.random((256, N_ACTIONS)) < 0.4
    masks[np.arange(256), rng.integers(0, N_ACTIONS, 256)] = True
    obs: Any = {"obs": raw} if source == "obs" else raw
    predicted, _ = agent.predict(obs, action_masks=masks)
    assert masks[np.arange(256), predicted].all()
    np.testing.assert_array_equal(predicted, agent.greedy_action(norm.normalize_obs(obs), masks))
    if source == "info":  # the exported module: raw observations and the mask in
        module = agent.policy_module()
        exported = module(torch.as_tensor(raw), torch.as_tensor(masks)).numpy()
        np.testing.assert_array_equal(exported, predicted)


@pytest.mark.parametrize("source", ["info", "obs"])
def test_dqn_masking_and_normalisation_together(source: str) -> None:
    env = _vec(source)
    agent = _normalized("DQN", env)
    replay = ReplaySettings(n_step=3)
    buf = replay.make_buffer(2000, seed=0, dtypes={"reward": np.float32, "done": np.float32})
    stats = OffPolicyEngine(replay, 64, 2000).learn(agent, env, buf, np.random.default_rng(0), 400, seed=0)
    assert stats["train_return"] == 20.0 and "loss" in stats
    assert set(agent.normalizer.obs_rms) == ({"obs"} if source == "obs" else {""})
    assert agent.test(_vec(source), seed=1) == 20.0


def test_a_normalised_masked_policy_exports_with_both_inputs(tmp_path: Any) -> None:
    ort = pytest.importorskip("onnxruntime")
    from agilerl.export import export_policy

    agent = _normalized("PPO", _vec("info"))
    OnPolicyEngine().learn(agent, _vec("info"), 256, seed=0)  # statistics away from the initial ones
    session = ort.InferenceSession(str(export_policy(agent, format="onnx", output=tmp_path / "masked.onnx")))
    assert [i.name for i in session.get_inputs()] == ["observation", "action_mask"]
    rng = np.random.default_rng(5)
    raw = rng.random((64, N_ACTIONS)).astype(np.float32)
    masks = rng.random((64, N_ACTIONS)) < 0.4
    masks[np.arange(64), rng.integers(0, N_ACTIONS, 64)] = True
    got = session.run(["action"], {"observation": raw, "action_mask": masks})[0]
    np.testing.assert_array_equal(got, agent.predict(raw, action_masks=masks)[0])


def test_finding_the_mask_source_leaves_an_async_vector_env_working() -> None:
    """An ``action_masks()`` method is looked for without calling it: in an async vector env a
    sub-env that raises AttributeError is shut down for good (every later step failed with
    ``'NoneType' object has no attribute 'send'``, for every algorithm on an unmasked async env)."""
    from agilerl_plugin_gym.masking import MaskSource

    env = gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    masked = gym.vector.AsyncVectorEnv([lambda: MaskedChoiceEnv("method") for _ in range(2)])
    try:
        obs, info = env.reset(seed=0)
        assert MaskSource.of(env, obs, info).kind is None
        env.step(np.zeros(2, dtype=np.int64))  # the sub-envs are still there
        obs, info = masked.reset(seed=0)
        source = MaskSource.of(masked, obs, info)
        assert source.kind == "method"
        assert source.read(masked, obs, info).shape == (2, N_ACTIONS)
    finally:
        env.close()
        masked.close()
