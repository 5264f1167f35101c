"""Environment construction: vector envs, wrappers, custom entrypoints, autoreset, and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agilerl.errors import ManifestError
from agilerl.models import GymEnvSpec, load_manifest, validate_manifest
from agilerl.models.env import make_env, make_gym_env, make_single_env
from agilerl_plugin_gym.buffers import ReplayBuffer
from agilerl_plugin_gym.envs import GymEnvError

HERE = Path(__file__).resolve().parent


def test_sync_and_async_vector_envs() -> None:
    sync = make_gym_env(GymEnvSpec(name="CartPole-v1", num_envs=3, sync=True))
    asyn = make_env(GymEnvSpec(name="CartPole", version=1, num_envs=2), seed=0)
    try:
        assert isinstance(sync, gym.vector.SyncVectorEnv) and sync.num_envs == 3
        assert isinstance(asyn, gym.vector.AsyncVectorEnv) and asyn.num_envs == 2
        obs, _ = asyn.reset(seed=0)
        assert obs.shape == (2, 4) and obs.dtype == np.float32
    finally:
        sync.close()
        asyn.close()


def test_wrappers_with_kwargs_and_single_env(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("max_episode_steps: 7\n")
    spec = GymEnvSpec(
        name="CartPole-v1",
        num_envs=2,
        sync=True,
        path=str(HERE),
        env_config=str(cfg),
        env_wrappers=[("gym_test_wrappers:ScaleReward", {"factor": 3.0})],
    )
    env = make_gym_env(spec)
    env.reset(seed=0)
    _, reward, *_ = env.step(np.zeros(2, dtype=np.int64))
    assert np.allclose(reward, 3.0)
    single = make_single_env(spec)
    single.reset(seed=0)
    steps = 0
    while True:  # env_config reached gym.make: episodes are cut at 7 steps
        *_, term, trunc, _ = single.step(0)
        steps += 1
        if term or trunc:
            break
    assert steps <= 7


def test_yaml_wrapper_forms_validate() -> None:
    spec = GymEnvSpec.model_validate(
        {"name": "CartPole-v1", "wrappers": ["a.B", ["c.D", {"x": 1}], {"e.F": {"y": 2}}], "config": {"k": 1}}
    )
    assert spec.env_wrappers == ["a.B", ("c.D", {"x": 1}), ("e.F", {"y": 2})]
    assert spec.env_config == {"k": 1}


def test_next_step_autoreset_transitions_are_not_stored() -> None:
    """Off-policy collection drops the auto-reset step: no stored transition jumps to a reset state."""
    env = make_gym_env(GymEnvSpec(name="CartPole-v1", num_envs=4, sync=True))
    buf = ReplayBuffer(5000, seed=0)
    obs, _ = env.reset(seed=0)
    fresh = np.zeros(4, dtype=bool)
    rng = np.random.default_rng(0)
    episodes = 0
    for _ in range(600):
        action = rng.integers(0, 2, 4)
        nxt, reward, term, trunc, _ = env.step(action)
        buf.add(mask=~fresh, obs=obs, action=action, reward=reward, next_obs=nxt, done=term)
        fresh = term | trunc
        episodes += int(fresh.sum())
        obs = nxt
    assert episodes > 20
    data = {k: v[: len(buf)] for k, v in buf.data.items()}
    # CartPole moves a little per step; a reset would jump (and the dropped step has reward 0).
    jump = np.abs(data["next_obs"] - data["obs"]).max(1)
    assert jump.max() < 0.5
    assert (data["reward"] == 1.0).all()
    assert data["done"].sum() > 20


# --- bad input -------------------------------------------------------------------------------------


def test_unknown_gym_id_did_you_mean_at_validation(write_manifest, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = write_manifest({"algorithm": {"name": "PPO"}, "environment": {"name": "CartPol-v1"}})
    code, _, err = run_cli("validate", path)
    assert code == 1
    assert "environment.name" in err and "did you mean 'CartPole-v1'" in err


def test_single_agent_algorithm_on_pettingzoo_env(write_manifest, run_cli) -> None:  # type: ignore[no-untyped-def]
    """A PettingZoo module given to a single-agent algorithm points to the multi-agent algorithms."""
    path = write_manifest({"algorithm": {"name": "DQN"}, "environment": {"name": "mpe2.simple_speaker_listener_v4"}})
    code, _, err = run_cli("validate", path)
    assert code == 1
    assert "environment.name" in err and "PettingZoo" in err
    assert "IPPO, MADDPG, MATD3" in err
    # A misspelt module is not recognised as PettingZoo: the gymnasium-id message stays.
    with pytest.raises(ManifestError, match="not a registered gymnasium environment") as info:
        validate_manifest({"algorithm": {"name": "PPO"}, "environment": {"name": "mpe2.simple_speaker_listner_v4"}})
    assert "PettingZoo" not in str(info.value)


def test_pettingzoo_check_at_validation_imports_no_torch() -> None:
    code = (
        "import sys; from agilerl.errors import ManifestError; from agilerl.models import validate_manifest\n"
        "try:\n"
        "    validate_manifest({'algorithm': {'name': 'PPO'}, 'environment': {'name': 'mpe2.simple_speaker_listener_v4'}})\n"
        "except ManifestError as exc:\n"
        "    assert 'MADDPG' in str(exc), exc\n"
        "else:\n"
        "    raise SystemExit('no ManifestError')\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_gym_id_at_env_creation() -> None:
    with pytest.raises(GymEnvError, match="did you mean 'Pendulum-v1'"):
        make_gym_env(GymEnvSpec(name="Pendulumm-v1"))


def test_entrypoint_that_fails_to_import(write_manifest, run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "broken_env.py").write_text("import not_a_real_package_xyz\n")
    env = {"name": "Broken", "custom": True, "entrypoint": "broken_env:Env", "path": str(tmp_path), "sync": True}
    path = write_manifest({"algorithm": {"name": "PPO"}, "environment": env})
    code, _, err = run_cli("train", path, "--no-progress", "--run-dir", str(tmp_path / "run"))
    assert code == 1
    assert "environment.entrypoint" in err and "not_a_real_package_xyz" in err
    assert "Traceback" not in err


def test_entrypoint_missing_class_suggests(tmp_path: Path) -> None:
    (tmp_path / "my_envs.py").write_text("class CartEnv: pass\n")
    spec = GymEnvSpec(name="X", custom=True, entrypoint="my_envs:CartEnvv", path=str(tmp_path), sync=True)
    with pytest.raises(GymEnvError, match="did you mean 'CartEnv'"):
        make_gym_env(spec)


def test_wrong_wrapper_path(write_manifest, run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {"name": "CartPole-v1", "sync": True, "env_wrappers": ["gymnasium.wrappers.TimeLimitt"]}
    path = write_manifest({"algorithm": {"name": "PPO"}, "environment": env})
    code, _, err = run_cli("train", path, "--no-progress", "--run-dir", str(tmp_path / "run"))
    assert code == 1
    assert "environment.env_wrappers[0]" in err and "did you mean 'TimeLimit'" in err


def test_continuous_actions_given_to_dqn(write_manifest, run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_manifest({"algorithm": {"name": "DQN"}, "environment": {"name": "Pendulum-v1", "sync": True}})
    code, _, err = run_cli("train", path, "--no-progress", "--run-dir", str(tmp_path / "run"))
    assert code == 1
    assert "DQN needs a Discrete action space" in err and "DDPG or TD3" in err


def test_discrete_actions_given_to_td3(write_manifest, run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_manifest({"algorithm": {"name": "TD3"}, "environment": {"name": "CartPole-v1", "sync": True}})
    code, _, err = run_cli("train", path, "--no-progress", "--run-dir", str(tmp_path / "run"))
    assert code == 1 and "TD3 needs continuous actions" in err


def test_unsupported_spaces_fail_validation_without_torch() -> None:
    # The spec makes one env (wrappers included) at validation: no training, no torch.
    code = (
        "import sys\n"
        "from agilerl.errors import ManifestError\n"
        "from agilerl.models import load_manifest\n"
        "cases = [('DQN', 'Pendulum-v1', 'DQN needs a Discrete action space'),\n"
        "         ('TD3', 'CartPole-v1', 'TD3 needs continuous actions'),\n"
        "         ('DDPG', 'CartPole-v1', 'DDPG needs continuous actions')]\n"
        "for algo, env, message in cases:\n"
        "    try:\n"
        "        load_manifest({'algorithm': {'name': algo}, 'environment': {'name': env}})\n"
        "    except ManifestError as exc:\n"
        "        assert [p.path for p in exc.problems] == ['environment'], exc\n"
        "        assert message in str(exc), exc\n"
        "    else:\n"
        "        raise AssertionError(algo + ' on ' + env + ' validated')\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_wrapper_that_changes_the_action_space_is_taken_into_account() -> None:
    env = {"name": "Pendulum-v1", "sync": True, "path": str(HERE),
           "env_wrappers": [("gym_test_wrappers:DiscretizeActions", {"bins": 5})]}  # fmt: skip
    m = load_manifest({"algorithm": {"name": "DQN"}, "environment": env})
    vec = make_gym_env(m.environment)
    assert vec.single_action_space == gym.spaces.Discrete(5)
    vec.close()


def test_seed_api_names_resolve() -> None:
    from agilerl.builders import select_builder
    from agilerl.models import DQNSpec, PPOSpec, TD3Spec
    from agilerl.strategies import select_strategy

    assert PPOSpec.paradigm == "single_agent" and TD3Spec().tau == 5e-3
    spec = DQNSpec()
    builder = select_builder(spec)
    agent = builder.build(spec, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(4))
    assert agent.greedy_action(np.zeros((2, 3), np.float32)).shape == (2,)
    assert type(select_strategy(spec)).__name__ == "OffPolicyStrategy"
    assert type(select_strategy(PPOSpec())).__name__ == "OnPolicyStrategy"


def test_mutation_and_sharing_settings_the_plugin_cannot_honour_are_refused() -> None:
    from agilerl.errors import ManifestError
    from agilerl.models import validate_manifest

    base = {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1", "num_envs": 1}}
    # act_mut is supported (test_mutations.py); an activation the networks lack is not.
    assert validate_manifest({**base, "mutation": {"probabilities": {"act_mut": 0.2}}}).mutation is not None
    with pytest.raises(ManifestError, match=r"mutation\.activation_selection: DQN's networks have no activation"):
        validate_manifest({**base, "mutation": {"probabilities": {"act_mut": 0.2}, "activation_selection": ["Mish"]}})
    with pytest.raises(ManifestError, match=r"training.experience_sharing: false is not supported yet"):
        validate_manifest({**base, "training": {"experience_sharing": False}})
    assert validate_manifest({**base, "training": {"experience_sharing": True}}).training.experience_sharing


@pytest.mark.parametrize(
    ("name", "version", "env_id"),
    [("merge-env", "v1", "merge-env-v1"), ("merge-env", 1, "merge-env-v1"), ("merge-env", "V0", "merge-env-v0"),
     ("CartPole-v1", 1, "CartPole-v1"), ("my-video-env", 2, "my-video-env-v2"), ("CartPole", None, "CartPole")],
)  # fmt: skip
def test_version_is_appended_once_with_or_without_its_v(name: str, version: object, env_id: str) -> None:
    assert GymEnvSpec(name=name, version=version).env_id == env_id


class _ScaledEnv(gym.Env):  # type: ignore[type-arg]
    """A registered env whose ``scale`` option is used only by ``step`` (sqrt of it)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, scale: float = 1.0, render_mode: str | None = None) -> None:
        self.scale = scale

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:  # type: ignore[type-arg]
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple:  # type: ignore[type-arg]
        import math

        return np.full(1, math.sqrt(self.scale) / 10, np.float32), 1.0, False, False, {}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"scale": "big"}, "environment.env_config.scale: AgileRLScaled-v0 takes a number here (its default is 1.0); "
                           "got str 'big'"),
        ({"scael": 2.0}, "environment.env_config: AgileRLScaled-v0 does not take these options: TypeError: "),
        ({"scale": -1.0}, "environment.env_config: AgileRLScaled-v0 fails with these options: its step() 1 raised "
                          "ValueError: math domain error"),
    ],
)  # fmt: skip
def test_a_registered_envs_options_are_checked_at_validation(config: dict, expected: str) -> None:  # type: ignore[type-arg]
    if "AgileRLScaled-v0" not in gym.registry:
        gym.register("AgileRLScaled-v0", entry_point=_ScaledEnv, max_episode_steps=20)
    manifest = {"algorithm": {"name": "DQN"}, "environment": {"name": "AgileRLScaled-v0", "env_config": config}}
    with pytest.raises(ManifestError) as info:
        validate_manifest(manifest)
    (problem,) = info.value.problems
    assert str(problem).startswith(expected), problem
    if "scael" in config:
        assert str(problem).endswith("did you mean 'scale'?")
    validate_manifest({**manifest, "environment": {"name": "AgileRLScaled-v0", "env_config": {"scale": 4}}})


def test_an_int_default_without_an_int_annotation_takes_any_number() -> None:
    # MountainCarContinuous's goal_velocity=0 is a float option written with an int default
    validate_manifest({"algorithm": {"name": "TD3"},
                       "environment": {"name": "MountainCarContinuous-v0", "env_config": {"goal_velocity": 0.1}}})  # fmt: skip
    with pytest.raises(ManifestError, match=r"environment\.env_config\.goal_velocity: .* takes a number here"):
        validate_manifest({"algorithm": {"name": "TD3"},
                           "environment": {"name": "MountainCarContinuous-v0", "env_config": {"goal_velocity": "fast"}}})  # fmt: skip
