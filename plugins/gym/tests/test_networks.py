"""Evolvable networks: function-preserving growth, shrinking, parameter noise, arch round trips."""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np
import pytest
import torch

from agilerl_plugin_gym.networks import EvolvableCNN, EvolvableMLP, EvolvableNetwork, add_parameter_noise
from agilerl_plugin_gym.sections import CnnSpec, MlpSpec, NetworkSpec

VEC = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
IMG = gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)


def _trained_like(module: torch.nn.Module) -> None:
    """Move weights away from the init so identity tricks are tested on generic weights."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.3)


@pytest.mark.parametrize("method", ["add_layer", "add_node"])
def test_mlp_growth_preserves_function(method: str) -> None:
    mlp = EvolvableMLP(6, 3, [32, 16], activation="ReLU")
    _trained_like(mlp)
    x = torch.randn(64, 6)
    before = mlp(x)
    assert getattr(mlp, method)() if method == "add_layer" else mlp.add_node(1, 8)
    assert torch.allclose(mlp(x), before, atol=1e-5)
    assert mlp.hidden_size == ([32, 16, 16] if method == "add_layer" else [32, 24])


def test_mlp_shrink_keeps_shapes_and_stays_close() -> None:
    mlp = EvolvableMLP(6, 3, [32, 32], activation="ReLU")
    x = torch.randn(64, 6)
    mlp.add_node(0, 8)
    before = mlp(x)
    assert mlp.remove_node(0, 8)  # the zero-output units added above are the ones dropped
    assert torch.allclose(mlp(x), before, atol=1e-5)
    mlp.add_layer()
    before = mlp(x)
    assert mlp.remove_layer()  # an identity layer folds back exactly
    assert torch.allclose(mlp(x), before, atol=1e-5)
    assert mlp.hidden_size == [32, 32]
    assert mlp(x).shape == (64, 3)


def test_mlp_respects_bounds() -> None:
    mlp = EvolvableMLP(4, 2, [8], min_hidden_layers=1, max_hidden_layers=1, min_mlp_nodes=8, max_mlp_nodes=8)
    assert not mlp.add_layer() and not mlp.remove_layer()
    assert not mlp.add_node(0, 4) and not mlp.remove_node(0, 4)


@pytest.mark.parametrize("method", ["add_layer", "add_channel"])
def test_cnn_growth_preserves_function(method: str) -> None:
    cnn = EvolvableCNN((3, 32, 32), 16, [8, 16], [5, 3], [2, 2])
    _trained_like(cnn)
    x = torch.rand(4, 3, 32, 32)
    before = cnn(x)
    changed = cnn.add_layer() if method == "add_layer" else cnn.add_channel(1, 8)
    assert changed
    assert torch.allclose(cnn(x), before, atol=1e-4)
    assert cnn.remove_channel(1, 4) and cnn(x).shape == (4, 16)


def test_network_from_spec_vector_and_image() -> None:
    spec = NetworkSpec(
        latent_dim=32, encoder_config=MlpSpec(hidden_size=[64, 64]), head_config=MlpSpec(hidden_size=[32])
    )
    net = EvolvableNetwork.from_spec(spec, VEC, 4)
    assert net(torch.zeros(5, 6)).shape == (5, 4)
    cnn_spec = NetworkSpec(latent_dim=32, encoder_config=CnnSpec(channel_size=[8], kernel_size=[4], stride_size=[2]))
    img = EvolvableNetwork.from_spec(cnn_spec, IMG, 3)
    assert img(torch.zeros(2, 32, 32, 3, dtype=torch.uint8)).shape == (2, 3)
    onehot = EvolvableNetwork.from_spec(None, gym.spaces.Discrete(5), 2)
    assert onehot(torch.tensor([0, 4])).shape == (2, 2)


def test_every_network_mutation_keeps_it_working_and_arch_round_trips() -> None:
    rng = random.Random(0)
    for space in (VEC, IMG):
        net = EvolvableNetwork.from_spec(None, space, 3)
        obs = torch.as_tensor(space.sample()[None].repeat(2, 0))
        for method in net.mutation_methods():
            net.apply_mutation(method, rng)
            assert net(obs).shape == (2, 3), method
        twin = EvolvableNetwork.from_spec(None, space, 3)
        twin.set_arch(net.arch())
        twin.load_state_dict(net.state_dict())
        assert torch.allclose(twin(obs), net(obs))


def test_parameter_noise_changes_some_weights_only() -> None:
    net = EvolvableNetwork.from_spec(None, VEC, 3)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    changed = add_parameter_noise(net, 0.1, random.Random(1))
    after = net.state_dict()
    assert changed > 0
    diff = sum(int((before[k] != after[k]).sum()) for k in before)
    total = sum(v.numel() for k, v in before.items() if v.dim() >= 2)
    assert 0 < diff <= total * 0.11
    assert all(torch.equal(before[k], after[k]) for k in before if before[k].dim() < 2)  # biases untouched


def test_algorithm_architecture_mutation_and_checkpoint_round_trip() -> None:
    """PPO with a shared encoder: mutate, save, rebuild a fresh agent, load: identical outputs."""
    from agilerl.models import PPOSpec, TD3Spec
    from agilerl_plugin_gym.single_agent.builder import SingleAgentBuilder

    rng = random.Random(3)
    cases = [
        (PPOSpec(share_encoders=True), gym.spaces.Discrete(2)),
        (TD3Spec(), gym.spaces.Box(-2.0, 2.0, (1,), np.float32)),
    ]
    for spec, act_space in cases:
        agent = SingleAgentBuilder.build(spec, VEC, act_space)
        obs = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
        for _ in range(6):
            agent.mutate_architecture(rng, new_layer_prob=0.5)
            assert agent.greedy_action(obs).shape[0] == 4
        agent.mutate_parameters(rng, sd=0.1)
        if isinstance(spec, PPOSpec):
            assert agent.nets["actor"].encoder is agent.nets["critic"].encoder
        fresh = SingleAgentBuilder.build(spec, VEC, act_space)
        state = agent.state_dict()
        fresh.load_state_dict(state)
        assert np.allclose(fresh.greedy_action(obs), agent.greedy_action(obs))
        clone = agent.clone(index=9)
        assert clone.index == 9 and np.allclose(clone.greedy_action(obs), agent.greedy_action(obs))


@pytest.mark.parametrize("shape", [(64, 4), (4, 64), (64, 64), (8, 3, 2, 2)])
def test_orthogonal_init_is_torchs_up_to_rounding_and_draws_the_same_numbers(shape: tuple[int, ...]) -> None:
    """``layers.orthogonal_`` factorises with numpy (torch's LAPACK costs ~8 MB of RSS on first use):
    the same generator draws, the same sign convention, so the weights equal torch's to float32
    rounding, the result is orthogonal, and the generator is left where torch's leaves it."""
    from agilerl_plugin_gym.networks.layers import orthogonal_

    torch.manual_seed(3)
    theirs = torch.nn.init.orthogonal_(torch.empty(*shape), gain=2.0)
    after_theirs = torch.rand(4)
    torch.manual_seed(3)
    ours = orthogonal_(torch.empty(*shape), gain=2.0)
    after_ours = torch.rand(4)
    assert torch.equal(after_theirs, after_ours)
    assert torch.allclose(ours, theirs, atol=1e-5)
    flat = ours.reshape(shape[0], -1) / 2.0
    gram = flat @ flat.T if flat.shape[0] <= flat.shape[1] else flat.T @ flat
    assert torch.allclose(gram, torch.eye(gram.shape[0]), atol=1e-5)
