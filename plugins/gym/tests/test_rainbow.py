"""RainbowDQN's parts, one by one, and the whole learning CartPole; DQN with PER and n-step.

Sum tree and prioritized buffer (sampling frequencies proportional to priority, updates, weights,
checkpoint round trip), n-step returns at termination / truncation / auto-reset / the end of a
``learn`` call, the C51 projection against a direct computation, noisy layers, the dueling network
under architecture mutation, and validation of the manifest fields.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.errors import ManifestError
from agilerl.models import validate_manifest
from agilerl_plugin_gym.engine.replay_per import NStepCollector, PrioritizedReplayBuffer, SumTree, annealed_beta
from agilerl_plugin_gym.networks import default_network_spec
from agilerl_plugin_gym.networks.rainbow import NoisyLinear, RainbowNetwork, project_distribution
from agilerl_plugin_gym.sections import NetworkSpec

# --- sum tree ---------------------------------------------------------------------------------------


def test_sum_tree_totals_and_prefix_search() -> None:
    tree = SumTree(5)  # not a power of two
    tree.update(np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 0.5]))
    assert tree.total == pytest.approx(10.5) and tree.leaves.tolist() == [1.0, 2.0, 3.0, 4.0, 0.5]
    # Leaf i covers [sum(p[:i]), sum(p[:i+1])).
    found = tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99, 10.0, 10.49]))
    assert found.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    tree.update(np.array([1, 3]), np.array([0.0, 10.0]))
    assert tree.total == pytest.approx(14.5) and tree.leaves.sum() == pytest.approx(14.5)
    assert tree.find(np.array([1.0, 4.0, 13.9])).tolist() == [2, 3, 3]
    # A repeated index keeps its last value.
    tree.update(np.array([0, 0]), np.array([5.0, 2.0]))
    assert tree[0] == 2.0 and tree.total == pytest.approx(15.5)


def test_prioritized_sampling_frequencies_follow_priorities() -> None:
    buf = PrioritizedReplayBuffer(8, alpha=1.0, seed=0)
    buf.add(x=np.arange(8, dtype=np.float32)[:, None])
    priorities = np.array([1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 6.0, 8.0]) + 1e-9
    buf.update_priorities(np.arange(8), priorities)
    counts = np.zeros(8)
    for _ in range(400):
        counts += np.bincount(buf.sample(64)["idxs"].numpy(), minlength=8)
    freq = counts / counts.sum()
    expected = priorities / priorities.sum()
    assert np.abs(freq - expected).max() < 0.01, (freq, expected)
    # alpha shapes the distribution: alpha 0 is uniform whatever the priorities.
    flat = PrioritizedReplayBuffer(8, alpha=0.0, seed=0)
    flat.add(x=np.arange(8, dtype=np.float32)[:, None])
    flat.update_priorities(np.arange(8), priorities)
    counts = sum(np.bincount(flat.sample(64)["idxs"].numpy(), minlength=8) for _ in range(200))
    assert np.abs(counts / counts.sum() - 1 / 8).max() < 0.01


def test_importance_weights_and_new_transitions_get_the_max_priority() -> None:
    buf = PrioritizedReplayBuffer(4, alpha=1.0, seed=1)
    buf.add(x=np.zeros((2, 1), dtype=np.float32))
    buf.update_priorities([0, 1], [1.0, 4.0])
    buf.add(x=np.ones((1, 1), dtype=np.float32))  # gets max priority (4)
    assert buf.tree[2] == pytest.approx(4.0)
    batch = buf.sample(32, beta=1.0)
    p = np.array([1.0, 4.0, 4.0]) / 9.0
    w = (3 * p) ** -1.0 / ((3 * p.min()) ** -1.0)
    np.testing.assert_allclose(batch["weights"].numpy(), w[batch["idxs"].numpy()], rtol=1e-6)
    assert batch["weights"].max() <= 1.0
    # beta 0: no correction.
    assert torch.all(buf.sample(8, beta=0.0)["weights"] == 1.0)
    # The ring overwrites the oldest slot; its priority is replaced too.
    buf.add(x=np.ones((2, 1), dtype=np.float32))
    assert buf.pos == 1 and buf.tree[0] == pytest.approx(4.0)


def test_importance_weights_follow_the_smallest_stored_priority_through_every_write() -> None:
    # The normaliser is kept by the writes (no scan per sample); check it against a scan after
    # ring overwrites, repeated indices and overwriting the current minimum.
    rng = np.random.default_rng(0)
    buf = PrioritizedReplayBuffer(50, alpha=0.7, seed=0)
    for step in range(300):
        buf.add(x=np.zeros((int(rng.integers(1, 4)), 1), dtype=np.float32))
        batch = buf.sample(16, beta=1.0)
        idx = batch["idxs"].numpy()
        leaves = buf.tree.leaves[: buf.size]
        p = buf.tree[idx]
        np.testing.assert_allclose(batch["weights"].numpy(), (p / leaves.min()) ** -1.0, rtol=1e-6)
        if step % 7 == 0:  # overwrite the current minimum on purpose
            idx = np.append(idx, int(leaves.argmin()))
        if step % 5 == 0:  # a repeated index keeps its last value
            idx = np.append(idx, [idx[0], idx[0]])
        buf.update_priorities(idx, rng.random(len(idx)) * 10 + 1e-3)
    # A restored buffer normalises by the same minimum.
    twin = PrioritizedReplayBuffer(50, alpha=0.7, seed=0)
    twin.load_state_dict(buf.state_dict())
    batch = twin.sample(16, beta=1.0)
    p = twin.tree[batch["idxs"].numpy()]
    np.testing.assert_allclose(batch["weights"].numpy(), (p / twin.tree.leaves.min()) ** -1.0, rtol=1e-6)


def test_several_prioritized_batches_at_once_are_prioritized_and_weighted() -> None:
    buf = PrioritizedReplayBuffer(8, alpha=1.0, seed=0)
    buf.add(x=np.arange(8, dtype=np.float32)[:, None])
    buf.update_priorities(np.arange(8), np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 93.0]))
    batches = buf.sample_many(64, 3, beta=1.0)
    assert len(batches) == 3
    for batch in batches:
        idx = batch["idxs"].numpy()
        assert (idx == 7).mean() > 0.8  # 93% of the mass, not the 1/8 a uniform draw gives
        np.testing.assert_allclose(batch["weights"].numpy(), (buf.tree[idx] / 1.0) ** -1.0, rtol=1e-6)


def test_prioritized_buffer_state_round_trip_samples_the_same() -> None:
    buf = PrioritizedReplayBuffer(16, alpha=0.6, seed=3)
    buf.add(x=np.arange(10, dtype=np.float32)[:, None])
    buf.update_priorities(np.arange(10), np.linspace(0.1, 3.0, 10))
    state = buf.state_dict()
    twin = PrioritizedReplayBuffer(16, alpha=0.1, seed=99)
    twin.load_state_dict(state)
    a, b = buf.sample(8, beta=0.5), twin.sample(8, beta=0.5)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_beta_anneals_linearly_to_one() -> None:
    assert annealed_beta(0.4, 0, 1000) == pytest.approx(0.4)
    assert annealed_beta(0.4, 500, 1000) == pytest.approx(0.7)
    assert annealed_beta(0.4, 5000, 1000) == 1.0


# --- n-step returns ---------------------------------------------------------------------------------


def _step(c: NStepCollector, t: int, term: list[bool], trunc: list[bool], valid: list[bool]) -> dict[str, Any] | None:
    """Env e's observation at step t is 10 * t + e; its reward is t + 1 (per env)."""
    e = len(term)
    obs = np.array([[10.0 * t + i] for i in range(e)], dtype=np.float32)
    nxt = obs + 10.0
    rew = np.full(e, float(t + 1))
    return c.step(obs, np.arange(e), rew, nxt, np.array(term), np.array(trunc), np.array(valid))


def test_n_step_returns_inside_an_episode() -> None:
    g = 0.5
    c = NStepCollector(3, g)
    assert _step(c, 0, [False], [False], [True]) is None
    assert _step(c, 1, [False], [False], [True]) is None
    out = _step(c, 2, [False], [False], [True])
    assert out is not None
    assert out["obs"].tolist() == [[0.0]] and out["next_obs"].tolist() == [[30.0]]
    assert out["reward"].tolist() == [1 + g * 2 + g * g * 3] and out["nsteps"].tolist() == [3.0]
    assert out["done"].tolist() == [0.0]
    out = _step(c, 3, [False], [False], [True])
    assert out["obs"].tolist() == [[10.0]] and out["reward"].tolist() == [2 + g * 3 + g * g * 4]


def test_n_step_termination_flushes_shorter_returns_without_bootstrap() -> None:
    g = 0.9
    c = NStepCollector(3, g)
    _step(c, 0, [False, False], [False, False], [True, True])
    out = _step(c, 1, [True, False], [False, False], [True, True])  # env 0 terminates at its 2nd step
    assert out is not None
    rows = sorted(zip(out["obs"][:, 0].tolist(), out["reward"].tolist(), out["nsteps"].tolist(),
                      out["done"].tolist(), out["next_obs"][:, 0].tolist(), strict=True))  # fmt: skip
    # Both pending steps of env 0: 2-step and 1-step returns, terminal, ending at the final obs (20).
    assert rows == [(0.0, pytest.approx(1 + g * 2), 2.0, 1.0, 20.0), (10.0, 2.0, 1.0, 1.0, 20.0)]
    # Env 0 auto-resets on the next step (invalid: skipped), env 1 completes its first 3-step return.
    out = _step(c, 2, [False, False], [False, False], [False, True])
    assert out["obs"][:, 0].tolist() == [1.0] and out["nsteps"].tolist() == [3.0]


def test_n_step_truncation_bootstraps_and_flush_ends_every_window() -> None:
    c = NStepCollector(4, 1.0, one_step=True)
    _step(c, 0, [False], [False], [True])
    out = _step(c, 1, [False], [True], [True])  # truncated: done 0 (bootstrapped from the final obs)
    assert out is not None and out["done"].tolist() == [0.0, 0.0]
    assert sorted(out["reward"].tolist()) == [2.0, 3.0] and out["next_obs"][:, 0].tolist() == [20.0, 20.0]
    # one-step fields for combined_reward: the successor of step 0 is step 1's observation.
    first = int(np.argmax(out["nsteps"]))
    assert out["reward_1"][first] == 1.0 and out["next_obs_1"][first, 0] == 10.0 and out["done_1"][first] == 0.0
    _step(c, 2, [False], [False], [False])
    _step(c, 3, [False], [False], [True])
    _step(c, 4, [False], [False], [True])
    out = c.flush(np.array([[50.0]]))  # end of a learn call: both pending, cut off, bootstrapped
    assert out is not None and sorted(out["nsteps"].tolist()) == [1.0, 2.0] and out["done"].tolist() == [0.0, 0.0]
    assert out["next_obs"][:, 0].tolist() == [50.0, 50.0] and sorted(out["reward"].tolist()) == [5.0, 9.0]
    assert c.flush(np.array([[50.0]])) is None


def test_n_step_windows_of_dict_observations_match_the_array_ones() -> None:
    """A Dict observation is windowed part by part: each part's transitions are the array ones."""
    plain, parts = NStepCollector(3, 0.9, one_step=True), NStepCollector(3, 0.9, one_step=True)
    rng = np.random.default_rng(0)
    for t in range(12):
        obs, nxt = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
        args = (np.arange(2), rng.normal(size=2), None, rng.random(2) < 0.2, rng.random(2) < 0.1, np.ones(2, bool))
        a = plain.step(obs, *args[:2], nxt, *args[3:])
        b = parts.step({"x": obs, "y": obs[:, :1] * 2}, *args[:2], {"x": nxt, "y": nxt[:, :1] * 2}, *args[3:])
        assert (a is None) == (b is None), t
        if a is None or b is None:
            continue
        for key in ("obs", "next_obs", "next_obs_1"):
            assert np.array_equal(b[key]["x"], a[key]) and np.array_equal(b[key]["y"], a[key][:, :1] * 2)
        for key in ("action", "reward", "done", "nsteps", "reward_1", "done_1"):
            assert np.array_equal(b[key], a[key])


# --- C51 projection ---------------------------------------------------------------------------------


def _project_direct(p: np.ndarray, r: float, d: float, z: np.ndarray) -> np.ndarray:
    out = np.zeros_like(p)
    dz = z[1] - z[0]
    for j, zj in enumerate(z):
        tz = min(max(r + d * zj, z[0]), z[-1])
        b = (tz - z[0]) / dz
        lo, hi = int(np.floor(b)), int(np.ceil(b))
        if lo == hi:
            out[lo] += p[j]
        else:
            out[lo] += p[j] * (hi - b)
            out[hi] += p[j] * (b - lo)
    return out


def test_c51_projection_matches_a_direct_computation() -> None:
    z = torch.linspace(-10, 10, 11)
    gen = torch.Generator().manual_seed(0)
    p = torch.rand(6, 11, generator=gen).softmax(-1)
    r = torch.tensor([0.0, 1.0, -3.3, 25.0, 0.7, 2.0])
    d = torch.tensor([1.0, 1.0, 0.9, 0.99, 0.0, 0.5])
    got = project_distribution(p, r, d, z)
    for i in range(6):
        want = _project_direct(p[i].double().numpy(), float(r[i]), float(d[i]), z.double().numpy())
        np.testing.assert_allclose(got[i].numpy(), want, atol=1e-6)
    assert torch.allclose(got.sum(1), torch.ones(6))
    assert torch.allclose(got[0], p[0])  # r = 0, discount 1: unchanged
    assert got[3, -1] == pytest.approx(1.0)  # everything beyond v_max lands on the last atom
    assert got[4].argmax() == 5 and got[4].max() > 0.6  # terminal: all mass around r


# --- noisy layers and the network ---------------------------------------------------------------


def test_noisy_linear_is_noisy_in_training_and_the_mean_in_eval() -> None:
    torch.manual_seed(0)
    layer = NoisyLinear(4, 3, noise_std=0.5)
    x = torch.ones(2, 4)
    a = layer(x)
    layer.reset_noise()
    assert not torch.allclose(a, layer(x))
    layer.eval()
    assert torch.allclose(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert torch.allclose(layer.weight_sigma, torch.full((3, 4), 0.25))


def test_rainbow_network_mutates_both_streams_and_keeps_q_shape() -> None:
    torch.manual_seed(0)
    space = spaces.Box(-1, 1, (4,))
    net = RainbowNetwork.build(default_network_spec(16, (16,), (16,)), space, 3, support=torch.linspace(0, 10, 11),
                               noise_std=0.5)  # fmt: skip
    obs = torch.randn(5, 4)
    assert net(obs).shape == (5, 3) and net.dist(obs).shape == (5, 3, 11)
    assert torch.allclose(net.dist(obs).sum(-1), torch.ones(5, 3))
    q = net(obs)
    assert torch.all(q >= 0) and torch.all(q <= 10)
    net.eval()
    before = net(obs)
    assert net.apply_mutation("head.add_layer", random.Random(0))
    assert net.head.hidden_size == net.value_head.hidden_size == [16, 16]
    net.eval()  # rebuilt layers start in training mode (RainbowDQN sets the mode before every use)
    assert torch.allclose(net(obs), before, atol=1e-5)  # identity layer: the function is kept
    assert net.apply_mutation("head.add_node", random.Random(1))
    assert net.head.hidden_size == net.value_head.hidden_size
    twin = RainbowNetwork.build(default_network_spec(16, (16,), (16,)), space, 3, support=torch.linspace(0, 10, 11),
                                noise_std=0.5)  # fmt: skip
    twin.set_arch(net.arch())
    twin.load_state_dict(net.state_dict())
    twin.eval()
    net.eval()
    assert torch.equal(twin(obs), net(obs))


def test_rainbow_activation_and_latent_mutations_change_both_streams() -> None:
    torch.manual_seed(0)
    space = spaces.Box(-1, 1, (4,))
    spec = NetworkSpec.model_validate({"latent_dim": 16, "min_latent_dim": 8, "max_latent_dim": 64,
                                       "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}})  # fmt: skip
    net = RainbowNetwork.build(spec, space, 3, support=torch.linspace(0, 10, 11), noise_std=0.5)
    obs = torch.randn(5, 4)
    net.eval()
    before = net(obs)
    assert net.set_activation("Tanh")
    assert net.head.activation == net.value_head.activation == net.encoder.activation == "Tanh"  # type: ignore[union-attr]
    assert not torch.allclose(net(obs), before)  # a new function, same weights
    assert "latent.add_node" in net.mutation_methods()
    net.eval()
    before = net(obs)
    assert net.apply_mutation("latent.add_node", random.Random(0))
    assert net.head.in_dim == net.value_head.in_dim == net.latent_dim > 16
    net.eval()
    assert torch.allclose(net(obs), before, atol=1e-5)  # new latent units start with zero weight
    assert net.set_latent_dim(8) and net.value_head.in_dim == 8 and net(obs).shape == (5, 3)


def test_rainbow_noise_resets_every_layer_through_mutation_copy_and_reload() -> None:
    torch.manual_seed(0)
    space = spaces.Box(-1, 1, (4,))
    net = RainbowNetwork.build(default_network_spec(16, (16,), (16,)), space, 3, support=torch.linspace(0, 10, 11),
                               noise_std=0.5)  # fmt: skip

    def factorised(n: RainbowNetwork) -> None:
        # Every layer's weight noise is the outer product of its output and input noise, and the
        # bias noise is the output noise (factorised Gaussian noise).
        for lin in n.noisy_layers():
            w, b = lin.weight_eps, lin.bias_eps
            assert w.shape == (lin.out_features, lin.in_features) and b.shape == (lin.out_features,)
            rank1 = torch.linalg.matrix_rank(w)
            assert rank1 == 1 and torch.allclose(w[:, 0] / w[0, 0], b / b[0], atol=1e-4)

    def snapshot(n: RainbowNetwork) -> list[torch.Tensor]:
        return [t.clone() for lin in n.noisy_layers() for t in (lin.weight_eps, lin.bias_eps)]

    for step in range(4):
        before = snapshot(net)
        net.reset_noise()
        factorised(net)
        assert all(not torch.equal(a, b) for a, b in zip(before, snapshot(net), strict=True)), step
        if step == 1:  # new layers (architecture mutation) get noise on the next reset too
            assert net.apply_mutation("head.add_layer", random.Random(0))
            assert len(net.noisy_layers()) == 6
    twin = copy.deepcopy(net)  # a population clone: its resets leave the original alone
    mine = snapshot(net)
    twin.reset_noise()
    assert all(torch.equal(a, b) for a, b in zip(mine, snapshot(net), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(mine, snapshot(twin), strict=True))
    # A checkpoint round trip carries the current noise, and resets keep working afterwards.
    again = RainbowNetwork.build(default_network_spec(16, (16,), (16,)), space, 3, support=torch.linspace(0, 10, 11),
                                 noise_std=0.5)  # fmt: skip
    again.set_arch(twin.arch())
    again.load_state_dict(twin.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(snapshot(twin), snapshot(again), strict=True))
    loaded = snapshot(again)
    again.reset_noise()
    factorised(again)
    assert all(not torch.equal(a, b) for a, b in zip(loaded, snapshot(again), strict=True))


# --- validation ---------------------------------------------------------------------------------------


def _manifest(**algo: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "RainbowDQN", **algo},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
        "training": {"max_steps": 1000, "evo_steps": 500},
    }


def _problems(m: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate_manifest(m)
    return [str(p) for p in info.value.problems]


def test_rainbow_fields_validate_and_bad_ones_fail_with_path_and_hint() -> None:
    m = validate_manifest(_manifest(num_atoms=21, v_min=0, v_max=100, n_step=4, beta=0.5, prior_eps=1e-5))
    assert m.algorithm.num_atoms == 21 and m.algorithm.n_step == 4  # type: ignore[attr-defined]
    (p,) = _problems(_manifest(num_atom=21))
    assert p.startswith("algorithm.num_atom") and "num_atoms" in p
    (p,) = _problems(_manifest(v_min=5, v_max=5))
    assert "v_min" in p and "v_max" in p
    (p,) = _problems(_manifest(n_step=0))
    assert p.startswith("algorithm.n_step")
    eps = _problems({**_manifest(), "training": {**_manifest()["training"], "eps_start": 1.0}})
    assert any("training.eps_start" in e for e in eps)


def test_replay_switches_the_algorithm_cannot_honour_are_refused() -> None:
    m = _manifest(n_step=3)
    (p,) = _problems({**m, "replay_buffer": {"per_buffer": False}})
    assert p.startswith("replay_buffer.per_buffer") and "per_buffer_args.alpha: 0" in p
    (p,) = _problems({**m, "replay_buffer": {"n_step_buffer": True, "n_step_buffer_args": {"n_step": 5}}})
    assert p.startswith("replay_buffer.n_step_buffer_args.n_step") and "algorithm.n_step (3)" in p
    ok = {**m, "replay_buffer": {"per_buffer": True, "n_step_buffer": True, "per_buffer_args": {"alpha": 0.6}}}
    validate_manifest(ok)
    ddpg = {"algorithm": {"name": "DDPG"}, "environment": {"name": "Pendulum-v1", "num_envs": 2},
            "replay_buffer": {"per_buffer": True}, "training": {"max_steps": 1000}}  # fmt: skip
    (p,) = _problems(ddpg)
    assert p.startswith("replay_buffer.per_buffer") and "not supported yet by DDPG" in p
    dqn = {**ddpg, "algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1", "num_envs": 2},
           "replay_buffer": {"per_buffer": True, "n_step_buffer": True}}  # fmt: skip
    validate_manifest(dqn)


# --- learning -----------------------------------------------------------------------------------------


def _rainbow_cartpole(example: Any) -> dict[str, Any]:
    return example("rainbow_cartpole.yaml")  # type: ignore[no-any-return]


@pytest.mark.slow
def test_rainbow_dqn_solves_cartpole(train, example, read_metrics) -> None:  # type: ignore[no-untyped-def]
    m = _rainbow_cartpole(example)
    code, run_dir, out = train(m)
    assert code == 0, out
    rows = read_metrics(run_dir)
    best = max(r["fitness"] for r in rows)
    assert best >= 475, f"best evaluation return {best:.1f} after {rows[-1]['steps']} steps"
    assert rows[-1]["beta"] > m["algorithm"]["beta"]  # annealed towards 1


@pytest.mark.slow
def test_dqn_with_prioritized_n_step_replay_solves_cartpole(train, example, read_metrics) -> None:  # type: ignore[no-untyped-def]
    m = example("dqn_cartpole.yaml")
    m["replay_buffer"].update(per_buffer=True, per_buffer_args={"alpha": 0.6}, n_step_buffer=True,
                              n_step_buffer_args={"n_step": 3})  # fmt: skip
    m["training"]["max_steps"] = 150_000
    code, run_dir, out = train(m)
    assert code == 0, out
    rows = read_metrics(run_dir)
    assert max(r["fitness"] for r in rows) >= 475, rows[-1]
    assert "beta" in rows[-1]  # prioritized replay was on


def test_rainbow_trains_briefly_with_every_option(train, read_metrics, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """combined_reward, n_step 2, architecture (latent range too) and activation mutation: a tiny
    population completes two generations."""
    m = {
        "algorithm": {"name": "RainbowDQN", "batch_size": 16, "learn_step": 2, "n_step": 2, "combined_reward": True,
                      "num_atoms": 11, "v_min": 0, "v_max": 20},
        "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
        "network": {"latent_dim": 16, "min_latent_dim": 8, "max_latent_dim": 64,
                    "encoder_config": {"hidden_size": [16]}, "head_config": {"hidden_size": [16]}},
        "mutation": {"probabilities": {"no_mut": 0.0, "arch_mut": 0.5, "new_layer": 0.5, "params_mut": 0.0,
                                       "rl_hp_mut": 0.0, "act_mut": 0.5}, "rand_seed": 1},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
        "training": {"pop_size": 2, "max_steps": 400, "evo_steps": 200, "learning_delay": 50, "seed": 0,
                     "eval_steps": 50},
    }  # fmt: skip
    code, run_dir, out = train(m)
    assert code == 0, out
    rows = read_metrics(run_dir)
    assert {r["generation"] for r in rows} == {0, 1} and all(np.isfinite(r["loss"]) for r in rows)


@pytest.mark.parametrize("env", ["encoder_envs:PixelChase", "encoder_envs:DictReach"], ids=["cnn", "multi-input"])
def test_rainbow_takes_the_cnn_and_multi_input_encoders(train, read_metrics, env: str) -> None:  # type: ignore[no-untyped-def]
    """The encoders DQN takes, Rainbow takes (its streams read their latent); a short run trains."""
    encoder = ({"arch": "cnn", "channel_size": [8], "kernel_size": [3], "stride_size": [1]} if "Pixel" in env
               else {"latent_dim": 16})  # fmt: skip
    m = {
        "algorithm": {"name": "RainbowDQN", "batch_size": 32, "learn_step": 4, "num_atoms": 11, "v_min": -2, "v_max": 2},
        "environment": {"name": "Toy", "custom": True, "entrypoint": env, "path": str(Path(__file__).parent),
                        "num_envs": 4, "sync": True, "env_config": {} if "Pixel" in env else {"discrete": True}},
        "network": {"latent_dim": 16, "encoder_config": encoder, "head_config": {"hidden_size": [16]}},
        "training": {"max_steps": 800, "evo_steps": 400, "learning_delay": 100, "seed": 0, "eval_steps": 20},
    }  # fmt: skip
    code, run_dir, out = train(m)
    assert code == 0, out
    rows = read_metrics(run_dir)
    assert len(rows) == 2 and all(np.isfinite(r["loss"]) for r in rows)
