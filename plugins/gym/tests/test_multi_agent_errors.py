"""Bad multi-agent input is a clear error before training: wrong paradigm for the env, unknown
PettingZoo module, network configs that do not fit the agents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gym_test_helpers import EnvsMade
from gymnasium import spaces

from agilerl.errors import AgileRLError, ManifestError
from agilerl.models import load_manifest
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.multi_agent.builder import MultiAgentBuilder, MultiAgentConfigError

HERE = Path(__file__).resolve().parent
SSL = {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 2, "sync": True}
RELAY = {"name": "relay", "entrypoint": "test_multi_agent_envs:RelayEnv", "path": str(HERE), "num_envs": 2,
         "sync": True}  # fmt: skip


def _problems(manifest: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest)
    return [str(p) for p in info.value.problems]


def test_single_agent_algorithm_on_pettingzoo_env_is_rejected_at_validation() -> None:
    problems = _problems({"algorithm": {"name": "PPO"}, "environment": SSL})
    assert any(p.startswith("environment.name") for p in problems), problems


def test_multi_agent_algorithm_on_gym_env_is_rejected_at_validation() -> None:
    problems = _problems({"algorithm": {"name": "MADDPG"}, "environment": {"name": "CartPole-v1"}})
    assert len(problems) == 1 and problems[0].startswith("environment.name"), problems
    assert "multi-agent" in problems[0] and "single-agent" in problems[0]


def test_multi_agent_algorithm_on_gym_entrypoint_is_rejected_before_training(tmp_path: Path) -> None:
    # A custom entrypoint is only known when built: the builder refuses a non-PettingZoo env.
    manifest = {
        "algorithm": {"name": "IPPO"},
        "environment": {"name": "cp", "entrypoint": "gymnasium.envs.classic_control:CartPoleEnv", "num_envs": 2,
                        "sync": True},
        "training": {"max_steps": 100, "run_dir": str(tmp_path / "run"), "progress": False},
    }  # fmt: skip
    with pytest.raises(AgileRLError, match="PettingZoo"):
        LocalTrainer.from_manifest(manifest).train()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_unknown_pettingzoo_module_suggests_the_closest() -> None:
    env = {**SSL, "name": "mpe2.simple_speaker_listner_v4"}
    problems = _problems({"algorithm": {"name": "MATD3"}, "environment": env})
    assert problems[0].startswith("environment.name")
    assert "did you mean 'mpe2.simple_speaker_listener_v4'" in problems[0]


def test_invalid_net_config_field_is_a_validation_error() -> None:
    algo = {"name": "IPPO", "net_config": {"speaker": {"latent_dim": "big"}, "listener": {"latent_dim": 32}}}
    problems = _problems({"algorithm": algo, "environment": SSL})
    assert problems == [
        "algorithm.net_config.speaker.latent_dim: Input should be a valid integer, unable to parse string as an integer"
    ]


def _train_error(tmp_path: Path, algorithm: dict[str, Any], env: dict[str, Any], **extra: Any) -> str:
    manifest = {
        "algorithm": algorithm,
        "environment": env,
        "training": {"max_steps": 100, "run_dir": str(tmp_path / "run"), "progress": False},
        **extra,
    }
    with pytest.raises(MultiAgentConfigError) as info:
        LocalTrainer.from_manifest(manifest).train()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing trained
    return str(info.value)


def _validation_error(tmp_path: Path, algorithm: dict[str, Any], env: dict[str, Any]) -> str:
    """A per-agent net_config is checked against the env's agents at validation, before any run exists."""
    manifest = {"algorithm": algorithm, "environment": env,
                "training": {"max_steps": 100, "run_dir": str(tmp_path / "run"), "progress": False}}  # fmt: skip
    with pytest.raises(ManifestError) as info:
        LocalTrainer.from_manifest(manifest)
    assert not (tmp_path / "run").exists()
    return str(info.value)


def test_net_config_for_an_unknown_agent(tmp_path: Path) -> None:
    cfg = {"speaker": {"latent_dim": 32}, "listner": {"latent_dim": 32}}
    msg = _validation_error(tmp_path, {"name": "MADDPG", "net_config": cfg}, SSL)
    assert "algorithm.net_config.listner: no agent or group" in msg and "did you mean 'listener'" in msg


def test_net_config_missing_an_agent(tmp_path: Path) -> None:
    msg = _validation_error(tmp_path, {"name": "MADDPG", "net_config": {"speaker_0": {"latent_dim": 32}}}, SSL)
    assert "algorithm.net_config: has no entry for agent 'listener_0'" in msg


def test_shared_group_with_different_configs(tmp_path: Path) -> None:
    cfg = {"runner_0": {"latent_dim": 32}, "runner_1": {"latent_dim": 64}, "coach": {"latent_dim": 32}}
    msg = _train_error(tmp_path, {"name": "IPPO", "share_groups": True, "net_config": cfg}, RELAY)
    assert "group 'runner'" in msg and "different configs" in msg


def test_cnn_encoder_on_vector_observations(tmp_path: Path) -> None:
    network = {"encoder_config": {"arch": "cnn"}}
    msg = _train_error(tmp_path, {"name": "MATD3"}, SSL, network=network)
    assert "cnn" in msg and "speaker_0" in msg


def test_shared_group_with_different_spaces() -> None:
    spec = load_manifest({"algorithm": {"name": "IPPO", "share_groups": True}, "environment": SSL}).algorithm
    obs = {"scout_0": spaces.Box(-1, 1, (2,)), "scout_1": spaces.Box(-1, 1, (3,))}
    act = {"scout_0": spaces.Discrete(2), "scout_1": spaces.Discrete(2)}
    with pytest.raises(MultiAgentConfigError, match="different observation spaces"):
        MultiAgentBuilder.build(spec, obs, act)


def test_cli_reports_errors_without_traceback(train) -> None:  # type: ignore[no-untyped-def]
    code, _, out = train({"algorithm": {"name": "MADDPG"}, "environment": {"name": "CartPole-v1"}}, name="bad")
    assert code != 0
    assert "environment.name" in out and "Traceback" not in out


# --- environment.env_config of a PettingZoo env, refused at validation (a worker's traceback at train) --------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"max_cycle": 25}, "environment.env_config: mpe2.simple_speaker_listener_v4 does not take these options: "
                            "TypeError: raw_env.__init__() got an unexpected keyword argument 'max_cycle'; did you "
                            "mean 'max_cycles'?"),
        ({"max_cycles": "twenty"}, "environment.env_config.max_cycles: mpe2.simple_speaker_listener_v4 takes an "
                                   "integer here (its default is 25); got str 'twenty'"),
        ({"continuous_actions": "yes"}, "environment.env_config.continuous_actions: mpe2.simple_speaker_listener_v4 "
                                        "takes true or false here (its default is False); got str 'yes'"),
    ],
)  # fmt: skip
def test_pettingzoo_env_config_is_checked_at_validation(config: dict[str, Any], expected: str) -> None:
    problems = _problems({"algorithm": {"name": "IPPO"}, "environment": {**SSL, "env_config": config}})
    assert problems == [expected]


def test_pettingzoo_env_config_that_breaks_the_first_steps_is_refused() -> None:
    # N: 0 is an int the constructor takes; the env then has no agents to step
    (problem,) = _problems({"algorithm": {"name": "MADDPG"},
                            "environment": {"name": "mpe2.simple_spread_v3", "env_config": {"N": 0}}})  # fmt: skip
    assert problem.startswith("environment.env_config: mpe2.simple_spread_v3 ")


def test_a_good_env_config_validates() -> None:
    load_manifest({"algorithm": {"name": "IPPO"}, "environment": {**SSL, "env_config": {"max_cycles": 30}}})


def test_validation_builds_the_pettingzoo_env_once_for_all_its_checks(envs_made: EnvsMade) -> None:
    """A custom env with action masking and a per-agent net_config: the API check, the mask check and
    the agent-list check share one env, built once and closed once."""
    from masked_pz_env import MaskedChoiceParallelEnv

    env = {"name": "masked_choice", "entrypoint": "masked_pz_env:MaskedChoiceParallelEnv", "path": str(HERE),
           "num_envs": 1, "sync": True}  # fmt: skip
    algo = {"name": "IPPO", "action_masking": True, "net_config": {"player": {"latent_dim": 16}}}
    load_manifest({"algorithm": algo, "environment": env})
    assert len(envs_made.made) == 1 and envs_made.closed == envs_made.made
    assert isinstance(getattr(envs_made.made[0], "unwrapped", envs_made.made[0]), MaskedChoiceParallelEnv)
    algo["net_config"] = {"playr": {"latent_dim": 16}}
    envs_made.clear()
    (problem,) = _problems({"algorithm": algo, "environment": env})
    assert problem.startswith("algorithm.net_config.playr: no agent or group") and "did you mean 'player'" in problem
    assert len(envs_made.made) == 1
