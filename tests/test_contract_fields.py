"""Fields whose meaning is AgileRL's: each test fails if the field were ignored or meant something else."""

from __future__ import annotations

import pytest
import torch
from gymnasium import spaces

from agilerl.errors import ManifestError
from agilerl.models import validate_manifest


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
    from agilerl.models.sections import infer_encoder_arch

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
            "LSTM encoders (arch: lstm, recurrent policies) are not supported yet",
        ),
        ({"arch": "simba", "encoder_config": {"hidden_size": 64}}, "SimBa encoders"),
        ({"simba": True}, "SimBa encoders"),
        ({"encoder_config": {"mlp_config": {"hidden_size": [8]}}}, "multi-input encoders"),
        ({"random_seed": 3}, "network.random_seed: not supported yet"),
        ({"encoder_config": {"arch": "transformer"}}, "'transformer' is not an encoder kind"),
    ],
)
def test_network_kinds_we_lack_are_one_named_refusal(network: dict[str, object], needle: str) -> None:
    with pytest.raises(ManifestError) as info:
        validate_manifest({"algorithm": "DQN", "environment": {"name": "CartPole-v1"}, "network": network})
    assert len(info.value.problems) == 1 and needle in str(info.value)


def test_latent_range_is_refused_only_where_the_latent_size_would_mutate() -> None:
    base = {"algorithm": "PPO", "environment": {"name": "CartPole-v1"},
            "network": {"latent_dim": 32, "min_latent_dim": 16, "max_latent_dim": 64}}  # fmt: skip
    assert validate_manifest(base).network.max_latent_dim == 64  # type: ignore[union-attr]
    with pytest.raises(ManifestError, match="latent_dim mutation is not supported yet"):
        validate_manifest({**base, "mutation": {"probabilities": {"arch_mut": 0.5}}})
    with pytest.raises(ManifestError, match=r"latent_dim \(8\) must lie in"):
        validate_manifest({**base, "network": {"latent_dim": 8, "min_latent_dim": 16}})


def test_unsupported_agilerl_algorithms_are_one_problem_and_not_listed() -> None:
    from agilerl.registry import MANIFEST_REGISTRY

    for name in ("RainbowDQN", "CQN"):
        with pytest.raises(ManifestError) as info:
            validate_manifest({"algorithm": {"name": name, "anything": 1}, "environment": {"minari_dataset_id": "x"}})
        assert [str(p) for p in info.value.problems] == [f"algorithm.name: {MANIFEST_REGISTRY.get(name).not_supported}"]
        assert str(info.value.problems[0]).startswith(f"algorithm.name: {name} is not supported yet")
        assert name not in MANIFEST_REGISTRY.names()


def test_an_unknown_algorithm_is_one_problem_not_two() -> None:
    with pytest.raises(ManifestError) as info:
        validate_manifest({"algorithm": "PPOO", "environment": {"name": "CartPole-v1"}})
    assert len(info.value.problems) == 1 and "Did you mean 'PPO'" in str(info.value)
