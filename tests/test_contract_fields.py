"""Fields whose meaning is AgileRL's: each test fails if the field were ignored or meant something else."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from gymnasium import spaces

from agilerl.errors import ManifestError
from agilerl.models import AlgorithmSpec, validate_manifest


def _ppo(action_std_init: float) -> object:
    from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder

    manifest = validate_manifest(
        {"algorithm": {"name": "PPO", "action_std_init": action_std_init}, "environment": {"name": "Pendulum-v1"}}
    )
    box = spaces.Box(-1.0, 1.0, (3,))
    return SingleAgentBuilder.build(manifest.algorithm, box, spaces.Box(-2.0, 2.0, (2,)))


@pytest.mark.parametrize("value", [0.0, -1.5, 0.6])
def test_ppo_action_std_init_is_the_initial_log_std_as_in_agilerl(value: float) -> None:
    agent = _ppo(value)
    log_std = agent.extra_params["log_std"]  # type: ignore[attr-defined]
    assert torch.allclose(log_std, torch.full_like(log_std, value))


def test_ippo_action_std_init_is_the_initial_log_std_too() -> None:
    from agilerl_plugin_gym.multi_agent.ippo import _LogStd

    assert torch.allclose(_LogStd(2, 0.0).log_std, torch.zeros(2))
    assert torch.allclose(_LogStd(2, -1.0).log_std, torch.full((2,), -1.0))


def test_encoder_kind_is_inferred_from_its_keys_like_agilerl() -> None:
    from agilerl_plugin_gym.sections import infer_encoder_arch

    assert infer_encoder_arch({"hidden_size": [64]}) == "mlp"
    assert infer_encoder_arch({"channel_size": [8], "kernel_size": [3], "stride_size": [1]}) == "cnn"
    assert infer_encoder_arch({"hidden_state_size": 64, "num_layers": 1}) == "lstm"
    assert infer_encoder_arch({"channel_size": [8], "hidden_state_size": 64}) == "cnn_lstm"
    assert infer_encoder_arch({"hidden_size": 128, "num_blocks": 2}) == "simba"
    assert infer_encoder_arch({"mlp_config": {"hidden_size": [64]}}) == "multiinput"
    net = validate_manifest(
        {
            "algorithm": "PPO",
            "environment": {"name": "CartPole-v1"},
            "network": {"encoder_config": {"hidden_size": [32]}},
        }
    ).network
    assert net is not None and net.encoder_config is not None and net.encoder_config.arch == "mlp"


@pytest.mark.parametrize(
    ("network", "needle"),
    [
        (
            {"encoder_config": {"hidden_state_size": 64}},
            "LSTM encoders (arch: lstm) are for recurrent policies: only PPO with recurrent: true",
        ),
        ({"encoder_config": {"mlp_config": {"hidden_size": [8]}}}, "arch: multiinput needs Dict or Tuple observations"),
        ({"random_seed": 3}, "network.random_seed: not supported yet"),
        ({"encoder_config": {"arch": "transformer"}}, "'transformer' is not an encoder kind"),
    ],
)
def test_network_kinds_we_lack_are_one_named_refusal(network: dict[str, object], needle: str) -> None:
    with pytest.raises(ManifestError) as info:
        validate_manifest({"algorithm": "DQN", "environment": {"name": "CartPole-v1"}, "network": network})
    assert len(info.value.problems) == 1 and needle in str(info.value)


@pytest.mark.parametrize("network", [{"arch": "simba", "encoder_config": {"hidden_size": 64}}, {"simba": True}])
def test_simba_encoders_validate_for_vector_observations(network: dict[str, object]) -> None:
    net = validate_manifest({"algorithm": "DQN", "environment": {"name": "CartPole-v1"}, "network": network}).network
    assert net is not None and (net.simba or net.encoder_config.arch == "simba")  # type: ignore[union-attr]


def test_latent_range_validates_with_architecture_mutation_and_must_hold_latent_dim() -> None:
    base = {"algorithm": "PPO", "environment": {"name": "CartPole-v1"},
            "network": {"latent_dim": 32, "min_latent_dim": 16, "max_latent_dim": 64}}  # fmt: skip
    assert validate_manifest(base).network.max_latent_dim == 64  # type: ignore[union-attr]
    # The latent size mutates within the range (plugins/gym/tests/test_mutations.py shows it).
    mutated = validate_manifest({**base, "mutation": {"probabilities": {"arch_mut": 0.5}}})
    assert mutated.network.min_latent_dim == 16  # type: ignore[union-attr]
    with pytest.raises(ManifestError, match=r"latent_dim \(8\) must lie in"):
        validate_manifest({**base, "network": {"latent_dim": 8, "min_latent_dim": 16}})


class _RefusedSpec(AlgorithmSpec):
    """A name a plugin knows but cannot train: how a plugin refuses an AgileRL algorithm it lacks."""

    paradigm: ClassVar[str] = "gym"
    regime: ClassVar[str] = "online"
    not_supported: ClassVar[str] = "FutureAlgo is not supported yet: use DQN instead"


@pytest.fixture
def refused_name() -> Iterator[str]:
    from agilerl.registry import MANIFEST_REGISTRY

    MANIFEST_REGISTRY.add("FutureAlgo", _RefusedSpec)
    try:
        yield "FutureAlgo"
    finally:
        MANIFEST_REGISTRY.remove("FutureAlgo")


def test_unsupported_agilerl_algorithms_are_one_problem_and_not_listed(refused_name: str) -> None:
    from agilerl.registry import MANIFEST_REGISTRY

    with pytest.raises(ManifestError) as info:
        validate_manifest(
            {"algorithm": {"name": refused_name, "anything": 1}, "environment": {"minari_dataset_id": "x"}}
        )
    assert [str(p) for p in info.value.problems] == [f"algorithm.name: {_RefusedSpec.not_supported}"]
    assert refused_name not in MANIFEST_REGISTRY.names()
    # Every AgileRL algorithm the gym plugin once refused now trains, so is listed.
    assert {"CQN", "RainbowDQN"} <= set(MANIFEST_REGISTRY.names())


def test_an_unknown_algorithm_is_one_problem_not_two() -> None:
    with pytest.raises(ManifestError) as info:
        validate_manifest({"algorithm": "PPOO", "environment": {"name": "CartPole-v1"}})
    assert len(info.value.problems) == 1 and "Did you mean 'PPO'" in str(info.value)


def test_training_fields_are_honoured_where_read_and_refused_elsewhere() -> None:
    dqn = validate_manifest({"algorithm": "DQN", "environment": {"name": "CartPole-v1"},
                             "training": {"learning_delay": 10, "eps_start": 0.5, "eps_decay": 0.99}})  # fmt: skip
    assert dqn.training.eps_start == 0.5
    with pytest.raises(ManifestError, match=r"training.learning_delay: not used by PPO \(not supported yet\)"):
        validate_manifest({"algorithm": "PPO", "environment": {"name": "CartPole-v1"},
                           "training": {"learning_delay": 10}})  # fmt: skip
    with pytest.raises(ManifestError, match=r"training.episode_steps: not used by PPO"):
        validate_manifest({"algorithm": "PPO", "environment": {"name": "CartPole-v1"},
                           "training": {"episode_steps": 500}})  # fmt: skip
    # The bandits read it (AgileRL's meaning: steps per training episode; plugins/bandit/tests/test_episodes.py)
    ts = validate_manifest({"algorithm": "NeuralTS", "environment": {"env_type": "bandit", "name": "iris"},
                            "training": {"episode_steps": 500}})  # fmt: skip
    assert ts.training.episode_steps == 500


def test_bandit_eval_steps_gives_agilerls_fitness_scale(tmp_path: Path) -> None:
    from agilerl import LocalTrainer

    def fitness(training: dict[str, object]) -> float:
        manifest = {
            "algorithm": {"name": "NeuralUCB", "batch_size": 8},
            "environment": {"env_type": "bandit", "name": "iris"},
            "network": {"encoder_config": {"hidden_size": [8]}},
            "training": {"max_steps": 60, "evo_steps": 60, "seed": 0, "progress": False, **training},
        }
        result = LocalTrainer.from_manifest(manifest, run_dir=tmp_path / str(len(training))).train()
        return float(result.fitnesses[0])

    online = fitness({})
    assert 0.0 <= online <= 1.0  # mean reward per step
    summed = fitness({"eval_steps": 40, "eval_loop": 2})
    assert 1.0 < summed <= 40.0  # total reward over 40 greedy steps, as AgileRL scores bandits
    with pytest.raises(ManifestError, match=r"training\.eval_loop: bandit fitness is the online mean reward"):
        validate_manifest({"algorithm": "NeuralUCB", "environment": {"env_type": "bandit", "name": "iris"},
                           "training": {"eval_loop": 3}})  # fmt: skip


@pytest.mark.parametrize("algo", ["DDPG", "MADDPG", "NeuralUCB"])
def test_replay_variants_we_lack_are_refused_at_validation(algo: str) -> None:
    env = {"DDPG": {"name": "Pendulum-v1"}, "MADDPG": {"name": "mpe2.simple_speaker_listener_v4"},
           "NeuralUCB": {"env_type": "bandit", "name": "iris"}}[algo]  # fmt: skip
    with pytest.raises(ManifestError, match=r"replay_buffer.per_buffer: .*not supported yet"):
        validate_manifest({"algorithm": algo, "environment": env, "replay_buffer": {"per_buffer": True}})


@pytest.mark.parametrize(
    ("algo", "env", "fields", "needle"),
    [
        ("PPO", "CartPole-v1", {"max_seq_len": 8}, "algorithm.max_seq_len: a recurrent PPO field"),
        ("PPO", "CartPole-v1", {"rollout_buffer_config": {"x": 1}}, "algorithm.rollout_buffer_config: not supported"),
        ("PPO", "CartPole-v1", {"bptt_sequence_type": "maximum"}, "algorithm.bptt_sequence_type: a recurrent PPO"),
        ("DDPG", "Pendulum-v1", {"vect_noise_dim": 3}, "algorithm.vect_noise_dim: exploration noise has one vector"),
        ("IPPO", "mpe2.simple_speaker_listener_v4", {"action_batch_size": 4}, "algorithm.action_batch_size: not"),
        ("IPPO", "mpe2.simple_speaker_listener_v4", {"torch_compiler": "default"}, "torch.compile"),
    ],
)
def test_agilerl_fields_we_only_accept_at_our_value(
    algo: str, env: str, fields: dict[str, object], needle: str
) -> None:
    with pytest.raises(ManifestError) as info:
        validate_manifest({"algorithm": {"name": algo, **fields}, "environment": {"name": env, "num_envs": 2}})
    assert needle in str(info.value)
    ok = {k: v for k, v in fields.items() if k == "vect_noise_dim"}
    if ok:  # one per env is what runs: accepted
        validate_manifest(
            {"algorithm": {"name": algo, "vect_noise_dim": 2}, "environment": {"name": env, "num_envs": 2}}
        )


def test_bandit_network_is_encoder_latent_head_like_agilerl() -> None:
    from agilerl_plugin_bandit.training import network_config

    m = validate_manifest({"algorithm": "NeuralUCB", "environment": {"env_type": "bandit", "name": "iris"},
                           "network": {"latent_dim": 32, "encoder_config": {"hidden_size": [16]},
                                       "head_config": {"hidden_size": [8]}}})  # fmt: skip
    assert network_config(m.algorithm, m) == ([16, 32, 8], "ReLU")  # type: ignore[arg-type]
    m = validate_manifest({"algorithm": "NeuralUCB", "environment": {"env_type": "bandit", "name": "iris"},
                           "network": {"encoder_config": {"hidden_size": [16]}}})  # fmt: skip
    assert network_config(m.algorithm, m) == ([16], "ReLU")  # type: ignore[arg-type]


def test_refused_names_are_not_listed_as_algorithms(refused_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from agilerl.cli import main

    assert main(["algorithms"]) == 0
    listed = capsys.readouterr().out
    assert "PPO" in listed and "CQN" in listed and "RainbowDQN" in listed and refused_name not in listed


@pytest.mark.parametrize(
    ("network", "env", "needle"),
    [
        ({"encoder_config": {"hidden_size": [8], "layer_norm": True}}, {}, "network.encoder_config.layer_norm: not"),
        ({"head_config": {"hidden_size": [8], "max_mlp_nodes": 512}}, {}, "network.head_config.max_mlp_nodes: not"),
        ({}, {"num_envs": 4}, "num_envs other than 1 is not supported yet"),
    ],
)
def test_bandit_network_and_env_options_it_lacks_are_refused(
    network: dict[str, object], env: dict[str, object], needle: str
) -> None:
    manifest = {"algorithm": "NeuralUCB", "environment": {"env_type": "bandit", "name": "iris", **env}}
    if network:
        manifest["network"] = network
    with pytest.raises(ManifestError, match=re.escape(needle)):
        validate_manifest(manifest)
    ok = {"encoder_config": {"hidden_size": [8], "layer_norm": False, "max_mlp_nodes": 256}}
    validate_manifest({**manifest, "environment": {"env_type": "bandit", "name": "iris"}, "network": ok})
