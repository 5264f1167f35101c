"""The algorithm protocol: exact gradients, checkpoints and resume, clones, evolution."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from agilerl import checkpoint
from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.errors import ManifestError
from agilerl.models import load_manifest, make_env
from agilerl.strategies import select_strategy
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_bandit.networks import RewardNet
from agilerl_plugin_bandit.neural_bandit import NeuralBandit
from agilerl_plugin_bandit.neural_ts import NeuralTS
from agilerl_plugin_bandit.neural_ucb import NeuralUCB
from agilerl_plugin_bandit.training import BanditBuilder, BanditStrategy


def _autograd_net(net: RewardNet) -> tuple[torch.nn.Sequential, list[torch.nn.Parameter]]:
    """The same network as torch modules, to check the hand-written gradients against autograd."""
    layers: list[torch.nn.Module] = []
    from agilerl_plugin_bandit.networks import ACTIVATIONS

    act = ACTIVATIONS[net.activation][0]
    for i, (w, b) in enumerate(net.layers):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        layers.append(lin)
        if i < len(net.layers) - 1:
            layers.append(torch.nn.Module())
            layers[-1].forward = act  # type: ignore[method-assign]
    seq = torch.nn.Sequential(*layers)
    return seq, [p for layer in layers for p in layer.parameters()]


@pytest.mark.parametrize("activation", ["ReLU", "Tanh", "GELU", "ELU", "Sigmoid", "LeakyReLU", "Softplus"])
def test_gradient_factors_equal_per_sample_autograd_gradients(activation: str) -> None:
    gen = torch.Generator().manual_seed(0)
    net = RewardNet(6, [5, 4], activation, generator=gen)
    x = torch.randn(3, 6, generator=gen)
    mu, inputs, deltas = net.gradient_factors(x)
    seq, params = _autograd_net(net)
    for k in range(3):
        out = seq(x[k : k + 1]).sum()
        grads = torch.autograd.grad(out, params)
        assert torch.allclose(out, mu[k], atol=1e-6)
        for layer, (a, d) in enumerate(zip(inputs, deltas, strict=True)):
            assert torch.allclose(grads[2 * layer], torch.outer(d[k], a[k]), atol=1e-5)
            assert torch.allclose(grads[2 * layer + 1], d[k], atol=1e-5)
    # the regression gradient too
    target = torch.randn(3, generator=gen)
    mse = net.mse_gradient(x, target)  # into the flat gradient buffer FlatAdam reads
    loss = torch.nn.functional.mse_loss(seq(x).squeeze(-1), target)
    assert torch.allclose(mse, loss, atol=1e-6)
    expected = torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])
    assert torch.allclose(net.grad, expected, atol=1e-5)
    assert all(torch.equal(p.grad, g) for p, g in zip(net.params.params, net.params.views(net.grad), strict=True))


def _agent(algo: str = "NeuralUCB", seed: int = 0, **fields: Any) -> tuple[NeuralBandit, Any]:
    manifest = load_manifest({"algorithm": {"name": algo, **fields}, "environment": {"name": "iris"}})
    env = make_env(manifest.environment, seed=seed)
    runtime = AlgorithmBuildRuntime(seed=seed, manifest=manifest)
    return select_builder(manifest.algorithm).build_for_run(
        manifest.algorithm, env=env, manifest=manifest, runtime=runtime
    ), env


def test_routing_builds_the_registered_classes() -> None:
    ucb, _ = _agent("NeuralUCB")
    ts, _ = _agent("NeuralTS")
    assert type(ucb) is NeuralUCB and type(ts) is NeuralTS
    assert ts.spec.lr == 3e-3 and ucb.spec.lr == 1e-3
    spec = load_manifest({"algorithm": {"name": "NeuralTS"}, "environment": {"name": "iris"}}).algorithm
    assert select_builder(spec) is BanditBuilder
    assert isinstance(select_strategy(spec), BanditStrategy)


def test_exploration_bonus_shrinks_where_the_agent_has_pulled() -> None:
    agent, env = _agent()
    context = env.reset()
    before = agent.uncertainty(context)
    for _ in range(50):
        agent.get_action(context)
    after = agent.uncertainty(context)
    assert torch.all(after < before)


def test_clone_is_independent_and_continues_identically() -> None:
    agent, env = _agent("NeuralTS")
    strategy = BanditStrategy()

    class _Run:
        pass

    run = _Run()
    run.env = env  # type: ignore[attr-defined]
    from agilerl.models import training_spec_class

    # the training section as validation composes it (core's fields and the plugins')
    run.manifest = SimpleNamespace(training=training_spec_class()())  # type: ignore[attr-defined]
    strategy.learn(agent, run, 300)  # type: ignore[arg-type]
    twin = agent.clone(index=7)
    assert twin.index == 7 and twin.steps == agent.steps
    assert twin.net.flat.data_ptr() != agent.net.flat.data_ptr()
    # the clone's layer views point into its own parameters
    twin.net.layers[0][0].add_(1.0)
    assert not torch.equal(twin.net.flat, agent.net.flat)


def test_checkpoint_is_weights_only_and_resume_continues(tmp_path: Path) -> None:
    data = {
        "algorithm": {"name": "NeuralTS"},
        "environment": {"name": "iris"},
        "training": {"max_steps": 1000, "evo_steps": 500, "seed": 3, "progress": False, "run_dir": str(tmp_path / "a"),
                     "checkpoint_steps": 500, "checkpoint_path": str(tmp_path / "ckpt")},
    }  # fmt: skip
    first = LocalTrainer.from_manifest(data).train()
    saved = sorted(tmp_path.glob("ckpt_*.pt"))
    assert [p.name for p in saved] == ["ckpt_1000.pt", "ckpt_500.pt"]
    payload = torch.load(saved[0], weights_only=True)  # what resume does
    state = payload["agents"][0]
    assert state["steps"] == 1000 and len(state["recent_rewards"]) == 500
    # resume from the mid-run checkpoint and continue to 1000: same state as the uninterrupted run
    resumed = LocalTrainer.from_checkpoint(saved[1], run_dir=tmp_path / "b").train()
    agent, reference = resumed.population[0], first.population[0]
    assert agent.steps == 1000
    assert agent.cumulative_regret == reference.cumulative_regret
    assert torch.equal(agent.net.flat, reference.net.flat)
    assert torch.equal(agent.grad_sq, reference.grad_sq)
    # the elite file loads into a fresh agent
    fresh, _ = _agent("NeuralTS", seed=99)
    fresh.load_state_dict(checkpoint.load(first.elite_path)["agents"][0])
    assert torch.equal(fresh.net.flat, reference.net.flat)


def test_learning_steps_the_network_with_gyms_flat_adam() -> None:
    """The bandit's Adam is the gym plugin's FlatAdam over the network's FlatParameters: one step
    equals torch.optim.Adam's on the same loss (MSE + the pull towards theta0)."""
    from agilerl_plugin_gym.optim import FlatAdam

    agent, env = _agent(reg=0.01)
    assert isinstance(agent.optimizer, FlatAdam) and agent.optimizer.flat is agent.net.params
    context = env.reset()
    for arm in range(agent.arms):
        agent.observe(context[arm], float(arm == 0))
    seq, params = _autograd_net(agent.net)
    reference = torch.optim.Adam(params, lr=agent.spec.lr)
    theta0 = agent.theta0.clone()
    rng_state = agent.rng.bit_generator.state
    agent.learn()
    agent.rng.bit_generator.state = rng_state
    x, r = agent.memory.sample(agent.spec.batch_size, agent.rng)
    flat = torch.cat([p.flatten() for p in params])
    loss = torch.nn.functional.mse_loss(seq(x).squeeze(-1), r) + agent.spec.reg * ((flat - theta0) ** 2).sum()
    loss.backward()
    reference.step()
    assert torch.allclose(agent.net.flat, torch.cat([p.detach().flatten() for p in params]), atol=1e-6)


def test_checkpoints_with_the_former_optimizer_state_load() -> None:
    """Checkpoints written before the bandit used FlatAdam hold its own Adam's flat
    ``{lr, betas, eps, m, v, t}``: they load and continue as the same state in FlatAdam's format."""
    agent, env = _agent()
    context = env.reset()
    for step in range(40):
        arm = agent.get_action(context)
        agent.observe(context[arm], float(step % 3 == 0))
        agent.learn()
    state = agent.state_dict()
    opt = agent.optimizer
    state_old = {**state, "optimizer": {"lr": agent.spec.lr, "betas": [0.9, 0.999], "eps": 1e-8, "m": opt.exp_avg.clone(),
                                        "v": opt.exp_avg_sq.clone(), "t": int(opt.step_count)}}  # fmt: skip
    new, old = _agent(seed=5)[0], _agent(seed=6)[0]
    new.load_state_dict(state)
    old.load_state_dict(state_old)
    assert float(old.optimizer.step_count) == 40 and torch.equal(old.optimizer.exp_avg_sq, opt.exp_avg_sq)
    new.learn()
    old.learn()
    assert torch.equal(new.net.flat, old.net.flat)


def test_architecture_mutation_preserves_the_function_and_keeps_learning() -> None:
    agent, env = _agent()
    context = torch.as_tensor(env.reset())
    before = agent.net(context)
    rng = random.Random(0)
    labels = [agent.mutate_architecture(rng, new_layer_prob=p) for p in (0.0, 1.0, 0.0)]
    assert labels[0].startswith("arch:add_node") and labels[1] == "arch:add_layer"
    assert len(agent.net.hidden_size) == 2 and agent.net.hidden_size[0] > 128
    assert torch.allclose(agent.net(context), before, atol=1e-5)
    # statistics carried over and sized to the new network
    assert agent.grad_sq.shape == agent.theta0.shape == agent.net.flat.shape
    agent.get_action(context.numpy())
    agent.observe(context[0].numpy(), 1.0)
    agent.learn()
    assert agent.mutate_parameters(rng, sd=0.1) == "params"
    assert not torch.allclose(agent.net(context), before, atol=1e-5)
    # the grown network survives a checkpoint round trip into an agent built with the old shape
    fresh, _ = _agent()
    fresh.load_state_dict(agent.state_dict())
    assert fresh.net.hidden_size == agent.net.hidden_size
    assert torch.equal(fresh.net(context), agent.net(context))


def test_activation_mutation_swaps_the_activation_keeps_weights_and_statistics() -> None:
    agent, env = _agent()
    context = torch.as_tensor(env.reset())
    agent.get_action(context.numpy())
    agent.observe(context[0].numpy(), 1.0)
    agent.learn()
    flat, theta0, grad_sq = agent.net.flat.clone(), agent.theta0.clone(), agent.grad_sq.clone()
    before = agent.net(context)
    rng = random.Random(0)
    label = agent.mutate_activation(rng, choices=["ReLU", "ELU", "GELU"])
    assert label in ("act:ELU", "act:GELU") and agent.net.activation == label[4:]
    assert (
        torch.equal(agent.net.flat, flat) and torch.equal(agent.theta0, theta0) and torch.equal(agent.grad_sq, grad_sq)
    )
    after = agent.net(context)
    assert after.shape == before.shape and not torch.allclose(after, before)
    assert not agent.optimizer.started  # Adam starts afresh, as AgileRL reinitialises its optimizers
    assert agent.optimizer.flat is agent.net.params
    assert agent.mutate_activation(rng, choices=[agent.net.activation]) is None
    agent.get_action(context.numpy())  # gradients of the new activation drive the bonus
    agent.learn()
    fresh, _ = _agent()  # the checkpoint carries the activation
    fresh.load_state_dict(agent.state_dict())
    assert fresh.net.activation == agent.net.activation and torch.equal(fresh.net(context), agent.net(context))


def test_latent_layer_grows_only_up_to_max_latent_dim() -> None:
    network = {"latent_dim": 32, "max_latent_dim": 48, "encoder_config": {"hidden_size": [16]}}
    manifest = load_manifest({"algorithm": "NeuralUCB", "environment": {"name": "iris"}, "network": network})
    env = make_env(manifest.environment, seed=0)
    runtime = AlgorithmBuildRuntime(seed=0, manifest=manifest)
    agent = select_builder(manifest.algorithm).build_for_run(
        manifest.algorithm, env=env, manifest=manifest, runtime=runtime
    )
    assert agent.net.hidden_size == [16, 32]  # encoder layer, then the latent layer
    rng = random.Random(0)
    for _ in range(20):
        agent.mutate_architecture(rng, new_layer_prob=0.0)
        assert agent.net.hidden_size[1] <= 48
    assert agent.net.hidden_size[1] == 48 and agent.net.hidden_size[0] > 48  # the encoder layer is not capped
    with pytest.raises(ManifestError, match=r"network\.min_latent_dim: NeuralUCB's network has a latent layer only"):
        load_manifest({"algorithm": "NeuralUCB", "environment": {"name": "iris"}, "network": {"min_latent_dim": 8}})


def test_lr_mutation_updates_the_optimizer() -> None:
    agent, _ = _agent()
    agent.set_hyperparameter("lr", 5e-4)
    assert agent.optimizer.param_groups[0]["lr"] == 5e-4
    agent.set_hyperparameter("batch_size", 20.6)
    assert agent.spec.batch_size == 21


@pytest.mark.slow
def test_evolutionary_hpo_population_from_manifest(tmp_path: Path) -> None:
    data = {
        "algorithm": {"name": "NeuralUCB"},
        "environment": {"name": "iris"},
        "training": {"max_steps": 1500, "evo_steps": 500, "pop_size": 3, "seed": 1, "progress": False,
                     "run_dir": str(tmp_path)},
        "mutation": {"probabilities": {"no_mut": 0.2, "arch_mut": 0.3, "new_layer": 0.5, "params_mut": 0.2,
                                       "act_mut": 0.2, "rl_hp_mut": 0.3}},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
    }  # fmt: skip
    result = LocalTrainer.from_manifest(data).train()
    assert len(result.population) == 3
    assert result.generations == 3
    muts = {row["mutation"] for row in result.history}
    assert any(m.startswith("arch:") for m in muts) or any(m in {"lr", "batch_size", "learn_step"} for m in muts)
    # fitness is the recent mean reward, and the best agent learned
    best = result.population[0]
    assert best.fitness[-1] == pytest.approx(float(np.mean(best.recent_rewards)))
    assert best.fitness[-1] > 0.8


def test_registration_imports_no_torch() -> None:
    code = (
        "import sys; from agilerl.models import load_manifest;"
        "load_manifest({'algorithm': {'name': 'NeuralTS'}, 'environment': {'name': 'iris'}});"
        "assert 'torch' not in sys.modules and 'pandas' not in sys.modules, sorted(m for m in sys.modules if m in ('torch','pandas'))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_network_from_net_config_or_network_section() -> None:
    agent, _ = _agent(net_config={"hidden_size": [32, 16], "activation": "Tanh"})
    assert agent.net.hidden_size == [32, 16] and agent.net.activation == "Tanh"
    manifest = load_manifest(
        {
            "algorithm": {"name": "NeuralTS"},
            "environment": {"name": "iris"},
            "network": {"encoder_config": {"arch": "mlp", "hidden_size": [48]}, "head_config": {"hidden_size": [24]}},
            "replay_buffer": {"max_size": 321},
        }
    )
    env = make_env(manifest.environment, seed=0)
    built = BanditBuilder.build_for_run(
        manifest.algorithm, env=env, manifest=manifest, runtime=AlgorithmBuildRuntime(manifest=manifest)
    )
    assert built.net.hidden_size == [48, 24] and built.memory.capacity == 321


def test_unsupported_network_is_rejected_at_validation() -> None:
    from agilerl.errors import ManifestError

    with pytest.raises(ManifestError, match=r"network\.encoder_config\.activation: 'Softmax' is not supported"):
        load_manifest(
            {
                "algorithm": {"name": "NeuralUCB"},
                "environment": {"name": "iris"},
                "network": {"encoder_config": {"arch": "mlp", "activation": "Softmax"}},
            }
        )
    with pytest.raises(ManifestError, match=r"network\.encoder_config\.arch: NeuralUCB needs an mlp"):
        load_manifest({"algorithm": {"name": "NeuralUCB"}, "environment": {"name": "iris"}, "network": {"arch": "cnn"}})


def _bandit_problems(network: dict[str, Any], **algorithm: Any) -> list[str]:
    from agilerl.errors import ManifestError

    with pytest.raises(ManifestError) as info:
        load_manifest({"algorithm": {"name": "NeuralUCB", **algorithm}, "environment": {"name": "iris"},
                       "network": network})  # fmt: skip
    return [str(p) for p in info.value.problems]


@pytest.mark.parametrize(
    ("network", "algorithm", "needle"),
    [
        ({"encoder_config": {"hidden_size": [32], "init_layers": True}}, {}, "network.encoder_config.init_layers: "
         "not supported yet by NeuralUCB: weights are LeCun-uniform"),
        ({"head_config": {"hidden_size": [32], "init_layers": False}}, {}, "network.head_config.init_layers: "),
        ({"head_config": {"hidden_size": [32], "output_vanish": True}}, {}, "network.head_config.output_vanish: "
         "not supported yet by NeuralUCB: the output layer is initialised like the others"),
        ({"min_latent_dim": 8}, {}, "network.min_latent_dim: NeuralUCB's network has a latent layer only when"),
        ({"max_latent_dim": 64}, {}, "network.max_latent_dim: NeuralUCB's network has a latent layer only when"),
        ({"random_seed": 3}, {}, "network.random_seed: not supported yet by NeuralUCB (seed the run with training.seed)"),
        ({}, {"normalize_images": True}, "algorithm.normalize_images: not supported yet: NeuralUCB's contexts are "
         "table rows"),
        ({"encoder_config": {"hidden_size": [32], "min_mlp_nodes": 64}}, {},
         "network.encoder_config.hidden_size: layer widths [32] are below min_mlp_nodes (64)"),
        ({"head_config": {"hidden_size": [32], "min_hidden_layers": 2}}, {},
         "network.head_config.hidden_size: 1 layers, fewer than min_hidden_layers (2)"),
        ({"encoder_config": {"hidden_size": [32], "activation": "Tanh"},
          "head_config": {"hidden_size": [16], "activation": "ReLU"}}, {},
         "network.head_config.activation: 'ReLU' differs from encoder_config.activation 'Tanh'"),
        ({"head_config": {"hidden_size": [16], "activation": "Softmax"}}, {},
         "network.head_config.activation: 'Softmax' is not supported by NeuralUCB"),
    ],
)  # fmt: skip
def test_network_fields_the_bandit_cannot_honour_are_refused_by_name(
    network: dict[str, Any], algorithm: dict[str, Any], needle: str
) -> None:
    problems = _bandit_problems(network, **algorithm)
    assert len(problems) == 1 and problems[0].startswith(needle), problems


def test_network_fields_the_bandit_honours_change_the_network() -> None:
    def built(network: dict[str, Any]) -> NeuralBandit:
        manifest = load_manifest({"algorithm": {"name": "NeuralUCB"}, "environment": {"name": "iris"},
                                  "network": network})  # fmt: skip
        env = make_env(manifest.environment, seed=0)
        return BanditBuilder.build_for_run(
            manifest.algorithm, env=env, manifest=manifest, runtime=AlgorithmBuildRuntime(manifest=manifest)
        )

    # The encoder's activation is the network's even when a head (with its default activation) follows.
    tanh = built({"encoder_config": {"hidden_size": [32], "activation": "Tanh"}, "head_config": {"hidden_size": [16]}})
    assert tanh.net.activation == "Tanh" and tanh.net.hidden_size == [32, 16]
    assert built({"head_config": {"hidden_size": [16], "activation": "ELU"}}).net.activation == "ELU"
    # latent_dim, when written, is a hidden layer between encoder and head; minimums that hold are accepted.
    mid = built({"latent_dim": 24, "encoder_config": {"hidden_size": [32], "min_mlp_nodes": 32, "min_hidden_layers": 1},
                 "head_config": {"hidden_size": [16]}})  # fmt: skip
    assert mid.net.hidden_size == [32, 24, 16]
