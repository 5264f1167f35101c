"""Activation mutation, latent-size mutation and multi-agent architecture mutation of the gym plugin.

Unit level: the activation swap keeps every weight and the output shape; the latent size moves
within ``[min_latent_dim, max_latent_dim]`` keeping the overlapping weights (and the function, when
it grows); MADDPG/MATD3/IPPO mutate actors and centralised critics alike and a fresh agent loaded
from the mutated one's checkpoint is the same agent. Run level: a MADDPG population with act_mut
and arch_mut on an mpe2 env completes its generations and resumes exactly; a DQN population with
act_mut on still solves CartPole.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gym_test_helpers import TINY_EVO, flat_state, tiny_manifest

from agilerl.errors import ManifestError
from agilerl.models import validate_manifest
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.multi_agent.ippo import IPPO
from agilerl_plugin_gym.multi_agent.maddpg import MADDPG, MATD3
from agilerl_plugin_gym.multi_agent.specs import IPPOSpec, MADDPGSpec, MATD3Spec
from agilerl_plugin_gym.networks import EvolvableCNN, EvolvableNetwork
from agilerl_plugin_gym.networks.layers import ACTIVATIONS
from agilerl_plugin_gym.sections import MlpSpec, NetworkSpec
from agilerl_plugin_gym.single_agent.dqn import DQN
from agilerl_plugin_gym.single_agent.ppo import PPO
from agilerl_plugin_gym.single_agent.specs import DQNSpec, PPOSpec
from agilerl_plugin_gym.spec_checks import ACTIVATION_NAMES

VEC = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)


def _net_spec(**latent: int) -> NetworkSpec:
    return NetworkSpec(latent_dim=24, encoder_config=MlpSpec(hidden_size=[16], layer_norm=False),
                       head_config=MlpSpec(hidden_size=[8], layer_norm=False), **latent)  # fmt: skip


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_activation_names_are_the_networks_own() -> None:
    assert set(ACTIVATIONS) == ACTIVATION_NAMES


def test_set_activation_swaps_hidden_activations_and_keeps_weights_and_shape() -> None:
    net = EvolvableNetwork.from_spec(_net_spec(), VEC, 3, output_activation="Tanh")
    x = torch.randn(32, 6)
    before, weights = net(x), _weights(net)
    assert net.activation == "ReLU"
    assert net.set_activation("GELU")
    assert net.activation == "GELU" and net.encoder.output_activation == "GELU"  # the latent is a hidden layer
    assert net.head.output_activation == "Tanh"  # the output keeps its own
    assert all(isinstance(a, torch.nn.GELU) for a in [*net.encoder.acts, *net.head.acts])
    after = net(x)
    assert after.shape == before.shape and not torch.allclose(after, before)
    assert all(torch.equal(weights[k], v) for k, v in net.state_dict().items())
    assert not net.set_activation("GELU")  # already GELU: nothing to change
    twin = EvolvableNetwork.from_spec(_net_spec(), VEC, 3, output_activation="Tanh")
    twin.set_arch(net.arch())  # a checkpoint records the activation: resume rebuilds it
    twin.load_state_dict(net.state_dict())
    assert torch.equal(twin(x), after)


def test_cnn_encoder_takes_the_activation_swap() -> None:
    cnn = EvolvableCNN((3, 16, 16), 8, [4], [3], [1])
    x = torch.rand(2, 3, 16, 16)
    shape = cnn(x).shape
    assert cnn.set_activation("ELU", output=True)
    assert all(isinstance(a, torch.nn.ELU) for a in cnn.acts) and isinstance(cnn.output_act, torch.nn.ELU)
    assert cnn(x).shape == shape


@pytest.mark.parametrize("encoder", ["mlp", "cnn"])
def test_latent_mutation_stays_in_bounds_and_keeps_the_overlapping_weights(encoder: str) -> None:
    if encoder == "mlp":
        space: gym.spaces.Box = VEC
        spec = _net_spec(min_latent_dim=16, max_latent_dim=40)
        x = torch.randn(16, 6)
    else:
        space = gym.spaces.Box(0, 255, (12, 12, 3), np.uint8)
        spec = NetworkSpec(latent_dim=24, min_latent_dim=16, max_latent_dim=40,
                           encoder_config={"arch": "cnn", "channel_size": [4], "kernel_size": [3], "stride_size": [1]},
                           head_config=MlpSpec(hidden_size=[8], layer_norm=False))  # fmt: skip
        x = torch.randint(0, 255, (16, 12, 12, 3), dtype=torch.uint8)
    net = EvolvableNetwork.from_spec(spec, space, 2)
    assert {"latent.add_node", "latent.remove_node"} <= set(net.mutation_methods())
    rng = random.Random(0)
    seen = {net.latent_dim}
    for i in range(40):
        old_dim, old = net.latent_dim, _weights(net)
        before = net(x)
        grow = i % 3 != 2
        changed = net.apply_mutation("latent.add_node" if grow else "latent.remove_node", rng)
        dim = net.latent_dim
        assert 16 <= dim <= 40 and net.head.in_dim == dim and net(x).shape == (16, 2)
        seen.add(dim)
        assert changed == (dim != old_dim)
        keep = min(dim, old_dim)
        new = net.state_dict()
        assert torch.equal(new["encoder.output.weight"][:keep], old["encoder.output.weight"][:keep])
        assert torch.equal(new["head.linears.0.weight"][:, :keep], old["head.linears.0.weight"][:, :keep])
        if dim > old_dim:  # new latent units reach the head through zero weights: same function
            assert torch.allclose(net(x), before, atol=1e-6)
    assert min(seen) == 16 and max(seen) == 40
    twin = EvolvableNetwork.from_spec(spec, space, 2)  # the arch carries the latent size: resume rebuilds it
    twin.set_arch(net.arch())
    twin.load_state_dict(net.state_dict())
    assert torch.equal(twin(x), net(x))


def test_no_latent_range_means_a_fixed_latent_size() -> None:
    net = EvolvableNetwork.from_spec(_net_spec(), VEC, 2)
    assert not any(m.startswith("latent.") for m in net.mutation_methods())
    one_bound = EvolvableNetwork.from_spec(_net_spec(max_latent_dim=64), VEC, 2)
    assert one_bound.latent_range == (8, 64)  # the missing bound is AgileRL's default


def test_new_layer_probability_picks_layer_or_node_methods() -> None:
    net = EvolvableNetwork.from_spec(_net_spec(min_latent_dim=8, max_latent_dim=64), VEC, 2)
    rng = random.Random(0)
    layer = {net.sample_mutation(rng, 1.0).split(".")[1] for _ in range(50)}
    node = {net.sample_mutation(rng, 0.0) for _ in range(200)}
    assert layer == {"add_layer", "remove_layer"}
    assert all(m.endswith("_node") or m.endswith("_channel") for m in node) and "latent.add_node" in node


def test_dqn_activation_mutation_changes_every_trained_net_and_rebuilds_targets_and_optimizer() -> None:
    torch.manual_seed(0)
    agent = DQN(DQNSpec(), VEC, gym.spaces.Discrete(3), net_spec=_net_spec())
    weights = _weights(agent.nets["actor"])
    optimizer = agent.optimizers["optimizer"]
    rng = random.Random(1)
    seen = set()
    for _ in range(6):
        before = agent.nets["actor"].activation
        label = agent.mutate_activation(rng, choices=["ReLU", "ELU", "GELU"])
        after = agent.nets["actor"].activation
        assert label == f"act:{after}" and after != before and after in {"ReLU", "ELU", "GELU"}
        seen.add(after)
    assert seen == {"ReLU", "ELU", "GELU"}
    assert agent.nets["actor_target"].activation == agent.nets["actor"].activation
    assert all(torch.equal(weights[k], v) for k, v in agent.nets["actor"].state_dict().items())
    assert agent.optimizers["optimizer"] is not optimizer  # fresh Adam, as AgileRL reinitialises
    assert agent.mutate_activation(rng, choices=[agent.nets["actor"].activation]) is None  # only the current one
    assert agent.greedy_action(np.zeros((4, 6), np.float32)).shape == (4,)


def test_ppo_shared_encoder_follows_latent_and_activation_mutation() -> None:
    agent = PPO(PPOSpec(share_encoders=True), VEC, gym.spaces.Discrete(2), net_spec=_net_spec(min_latent_dim=8))
    actor, critic = agent.nets["actor"], agent.nets["critic"]
    rng = random.Random(3)
    grown = False
    for _ in range(30):
        label = agent.mutate_architecture(rng, new_layer_prob=0.0)
        grown |= bool(label and label.startswith("arch:latent"))
        assert actor.encoder is critic.encoder and critic.head.in_dim == actor.head.in_dim == actor.latent_dim
    assert grown
    assert agent.mutate_activation(rng, choices=["Tanh"]) == "act:Tanh"
    assert actor.head.activation == critic.head.activation == actor.encoder.activation == "Tanh"
    out, value = agent._heads(torch.zeros(5, 6))
    assert out.shape == (5, 2) and value.shape[0] == 5


def _multi_agent(cls: type, spec: Any, obs: int = 6) -> Any:
    spaces_ = {"a_0": gym.spaces.Box(-1, 1, (obs,), np.float32), "b_0": gym.spaces.Box(-1, 1, (obs + 2,), np.float32)}
    actions = {"a_0": gym.spaces.Discrete(3), "b_0": gym.spaces.Box(-1, 1, (2,), np.float32)}
    net = _net_spec(min_latent_dim=8, max_latent_dim=64)
    return cls(spec, spaces_, actions, net_specs={"a_0": net, "b_0": net})


@pytest.mark.parametrize(("cls", "spec"), [(MADDPG, MADDPGSpec()), (MATD3, MATD3Spec()), (IPPO, IPPOSpec())])
def test_multi_agent_arch_and_act_mutation_reach_every_network_and_resume(cls: type, spec: Any) -> None:
    torch.manual_seed(0)
    agent = _multi_agent(cls, spec)
    rng = random.Random(0)
    labels = [agent.mutate_architecture(rng, new_layer_prob=float(i % 2)) for i in range(24)]
    labels.append(agent.mutate_activation(rng, choices=["ELU", "GELU"]))
    assert any(label and label.startswith("arch:latent") for label in labels), labels
    assert any(label and label.startswith("arch:") and "latent" not in label for label in labels), labels
    assert labels[-1] in ("act:ELU", "act:GELU")
    nets = agent.evolvable_networks()
    assert len({net.activation for net in nets}) == 1
    # Every actor and critic took the same change (they started alike), the critics too.
    assert len({tuple(net.encoder.hidden_size) for net in nets}) == 1
    assert len({(net.latent_dim, tuple(net.head.hidden_size)) for net in nets}) == 1
    if cls is not IPPO:  # targets are copies of the mutated networks; optimizers cover the new parameters
        assert all(agent.actor_targets[k].arch() == m.arch() for k, m in agent.actors.items())
        assert {id(p) for p in agent.actor_optimizers["all"].param_groups[0]["params"]} == {
            id(p) for m in agent.actors.values() for p in m.parameters()
        }
    obs = {"a_0": np.zeros((4, 6), np.float32), "b_0": np.zeros((4, 8), np.float32)}
    acts = agent.act(obs)
    assert acts["a_0"].shape == (4,) and acts["b_0"].shape == (4, 2)
    # A fresh agent loaded from the mutated one's checkpoint is the same agent.
    twin = _multi_agent(cls, spec)
    twin.load_state_dict(agent.state_dict())
    a, b = flat_state(agent.state_dict()), flat_state(twin.state_dict())
    assert a.keys() == b.keys()
    for k, v in a.items():
        assert torch.equal(v, b[k]) if isinstance(v, torch.Tensor) else v == b[k], k


def test_maddpg_critic_learns_after_architecture_mutation() -> None:
    torch.manual_seed(0)
    agent = _multi_agent(MADDPG, MADDPGSpec())
    rng = random.Random(5)
    for _ in range(6):
        agent.mutate_architecture(rng, new_layer_prob=0.5)
    agent.mutate_activation(rng, choices=["GELU"])
    n = 8
    batch = {
        "obs": {"a_0": torch.randn(n, 6), "b_0": torch.randn(n, 8)},
        "next_obs": {"a_0": torch.randn(n, 6), "b_0": torch.randn(n, 8)},
        "action": {"a_0": torch.nn.functional.one_hot(torch.randint(0, 3, (n,)), 3).float(), "b_0": torch.rand(n, 2)},
        "reward": {"a_0": torch.randn(n), "b_0": torch.randn(n)},
        "done": {"a_0": torch.zeros(n), "b_0": torch.zeros(n)},
    }
    before = _weights(agent.critics["a_0"])
    stats = agent.learn(batch)
    assert np.isfinite(stats["critic_loss"]) and np.isfinite(stats["actor_loss"])
    assert any(not torch.equal(before[k], v) for k, v in agent.critics["a_0"].state_dict().items())


def test_activation_selection_must_name_the_networks_activations() -> None:
    base = {"algorithm": "DQN", "environment": {"name": "CartPole-v1"}, "training": {"pop_size": 2}}
    ok = {**base, "mutation": {"probabilities": {"act_mut": 0.5}, "activation_selection": ["Tanh", "PReLU"]}}
    assert validate_manifest(ok).mutation.activation_selection == ["Tanh", "PReLU"]  # type: ignore[union-attr]
    bad = {**base, "mutation": {"probabilities": {"act_mut": 0.5}, "activation_selection": ["ReLU", "Swish"]}}
    with pytest.raises(
        ManifestError, match=r"mutation\.activation_selection: DQN's networks have no activation 'Swish'"
    ):
        validate_manifest(bad)
    with pytest.raises(ManifestError, match=r"mutation\.activation_selection"):
        validate_manifest({**base, "mutation": {"probabilities": {"act_mut": 0.5}, "activation_selection": []}})


def _mutation_labels(history: list[dict[str, Any]]) -> list[str]:
    return [str(r["mutation"]) for r in history]


def test_maddpg_population_with_act_and_arch_mutation_resumes_exactly(tmp_path: Path) -> None:
    """Three generations of a MADDPG population on mpe2's speaker-listener, every mutation an
    activation swap or an architecture change (latent size included); resumed from the first
    generation's checkpoint it ends with the very same networks, optimizer states and fitnesses."""
    torch.set_num_threads(1)
    m = tiny_manifest("MADDPG", tmp_path, max_steps=3 * TINY_EVO)
    m["network"] = {**m["network"], "min_latent_dim": 8, "max_latent_dim": 48}
    m["mutation"]["probabilities"] = {"no_mut": 0, "params_mut": 0, "rl_hp_mut": 0, "arch_mut": 0.5,
                                      "new_layer": 0.3, "act_mut": 0.5}  # fmt: skip
    full = LocalTrainer.from_manifest(m, run_dir=tmp_path / "full").train()
    assert full.generations == 3 and all(a.steps == 3 * TINY_EVO for a in full.population)
    labels = _mutation_labels(full.history)
    assert any(x.startswith("act:") for x in labels) and any(x.startswith("arch:") for x in labels), labels
    resumed = LocalTrainer.from_manifest(m, run_dir=tmp_path / "resumed", resume_from=tmp_path / f"ckpt_{TINY_EVO}.pt")
    result = resumed.train()
    assert result.fitnesses == full.fitnesses
    ours = [flat_state(a.state_dict()) for a in sorted(result.population, key=lambda a: a.index)]
    theirs = [flat_state(a.state_dict()) for a in sorted(full.population, key=lambda a: a.index)]
    for x, y in zip(ours, theirs, strict=True):
        assert x.keys() == y.keys()
        for k, v in x.items():
            assert torch.equal(v, y[k]) if isinstance(v, torch.Tensor) else v == y[k], k
    assert _mutation_labels(result.history) == _mutation_labels([r for r in full.history if r["generation"] >= 1])


@pytest.mark.slow
def test_dqn_population_with_activation_mutation_solves_cartpole(train, example, read_metrics) -> None:  # type: ignore[no-untyped-def]
    m = example("dqn_cartpole.yaml")
    m["training"].update(max_steps=150_000, pop_size=2)
    m["tournament_selection"] = {"tournament_size": 2, "elitism": True}
    m["mutation"] = {"probabilities": {"no_mut": 0.3, "act_mut": 0.7, "arch_mut": 0, "params_mut": 0, "rl_hp_mut": 0},
                     "activation_selection": ["ReLU", "ELU", "GELU"], "rand_seed": 1}  # fmt: skip
    code, run_dir, out = train(m)
    assert code == 0, out
    rows = read_metrics(run_dir)
    assert any(str(r["mutation"]).startswith("act:") for r in rows)
    best = max(r["fitness"] for r in rows)
    assert best >= 475, f"best evaluation return {best:.1f} < 475 after {rows[-1]['steps']} steps"
