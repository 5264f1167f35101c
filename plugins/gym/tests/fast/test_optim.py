"""``agilerl_plugin_gym.fast.optim.Adam`` (also ``agilerl_plugin_gym.optim.Adam``) is ``torch.optim.Adam``'s maths and
checkpoint format, without dynamo; ``RMSprop`` likewise ``torch.optim.RMSprop``'s."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from agilerl_plugin_gym.fast.optim import Adam, FlatAdam, FlatParameters, RMSprop


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))


def _train(net: nn.Module, opt: Adam | RMSprop | torch.optim.Optimizer, steps: int = 15, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(32, 4, generator=gen)
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def _same_steps_as_torch(ref: nn.Module, opt_ref: torch.optim.Optimizer, ours: nn.Module, opt: Adam | RMSprop) -> None:
    """Both optimizers train their copy of one net to the same bits, also after a learning-rate
    mutation edits the group between steps (both must pick it up)."""
    _train(ref, opt_ref)
    _train(ours, opt)
    assert _same(ref, ours)
    for o in (opt_ref, opt):
        o.param_groups[0]["lr"] = 3e-3
    _train(ref, opt_ref, seed=1)
    _train(ours, opt, seed=1)
    assert _same(ref, ours)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_fused_update_is_bitwise_torch_adam_and_follows_lr_changes(weight_decay: float) -> None:
    ref, ours = _net(), _net()
    opt = Adam(ours.parameters(), lr=1e-2, weight_decay=weight_decay)
    assert opt.param_groups[0]["fused"]
    _same_steps_as_torch(ref, torch.optim.Adam(ref.parameters(), lr=1e-2, weight_decay=weight_decay, fused=True),
                         ours, opt)  # fmt: skip


def test_unfused_path_is_torch_adams_single_tensor_maths() -> None:
    ref, ours = _net().double(), _net().double()
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2, foreach=False)
    opt = Adam(ours.parameters(), lr=1e-2)
    opt.param_groups[0]["fused"] = False  # as on a device without the fused kernel
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):
        x = torch.randn(8, 4, generator=gen, dtype=torch.float64)
        for net, o in ((ref, opt_ref), (ours, opt)):
            o.zero_grad()
            net(x).pow(2).mean().backward()
            o.step()
    for a, b in zip(ref.parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_parameters_without_a_gradient_are_left_alone() -> None:
    net = _net()
    frozen = net[2].weight.detach().clone()
    opt = Adam(net.parameters(), lr=0.1)
    net[2].weight.requires_grad_(False)
    _train(net, opt, steps=3)
    assert torch.equal(net[2].weight, frozen)
    assert net[2].weight not in opt.state
    assert opt.state[net[0].weight]["step"].item() == 3


def test_state_dict_round_trips_with_torch_adam_both_ways() -> None:
    ref, ours = _net(), _net()
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2, fused=True)
    opt = Adam(ours.parameters(), lr=1e-2)
    _train(ref, opt_ref)
    _train(ours, opt)
    ours_sd, ref_sd = opt.state_dict(), opt_ref.state_dict()
    assert ours_sd["param_groups"] == ref_sd["param_groups"]
    assert ours_sd["state"].keys() == ref_sd["state"].keys()
    for i, st in ref_sd["state"].items():
        assert list(st) == list(ours_sd["state"][i])
        assert all(torch.equal(v, ours_sd["state"][i][k]) for k, v in st.items())
    # A checkpoint written by torch.optim.Adam resumes in ours, and ours in torch's, bit for bit.
    ref2, ours2 = copy.deepcopy(ref), copy.deepcopy(ours)
    opt_from_torch = Adam(ours2.parameters(), lr=1.0)
    opt_from_torch.load_state_dict(copy.deepcopy(ref_sd))
    assert opt_from_torch.param_groups[0]["lr"] == 1e-2
    opt_from_ours = torch.optim.Adam(ref2.parameters(), lr=1.0, fused=True)
    opt_from_ours.load_state_dict(copy.deepcopy(ours_sd))
    for net, o in ((ref, opt_ref), (ours, opt), (ref2, opt_from_ours), (ours2, opt_from_torch)):
        _train(net, o, seed=2)
    assert _same(ref, ours) and _same(ref, ref2) and _same(ref, ours2)


@pytest.mark.parametrize("optimizer", [Adam, RMSprop])
def test_deepcopied_optimizer_updates_the_copied_parameters(optimizer: type[Adam] | type[RMSprop]) -> None:
    class Agent:
        def __init__(self) -> None:
            self.net = _net()
            self.opt = optimizer(self.net.parameters(), lr=1e-2)

    a = Agent()
    _train(a.net, a.opt, steps=2)
    b = copy.deepcopy(a)  # population cloning copies agent, networks and optimizer together
    before = copy.deepcopy(a.net)
    _train(b.net, b.opt, steps=2)
    assert _same(a.net, before)
    assert not _same(b.net, before)


def test_bad_arguments_and_mismatched_state_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="empty parameter list"):
        Adam([])
    with pytest.raises(ValueError, match="learning rate"):
        Adam(_net().parameters(), lr=-1.0)
    opt = Adam(_net().parameters())
    with pytest.raises(ValueError, match="does not match"):
        opt.load_state_dict(Adam(nn.Linear(2, 2).parameters()).state_dict())


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_rmsprop_is_bitwise_torch_rmsprop_and_follows_lr_changes(weight_decay: float) -> None:
    ref, ours = _net(), _net()
    kwargs = {"lr": 7e-4, "alpha": 0.99, "eps": 1e-5, "weight_decay": weight_decay}
    _same_steps_as_torch(
        ref, torch.optim.RMSprop(ref.parameters(), **kwargs), ours, RMSprop(ours.parameters(), **kwargs)
    )


def test_rmsprop_state_dict_round_trips_with_torch_rmsprop_both_ways() -> None:
    ref, ours = _net(), _net()
    opt_ref = torch.optim.RMSprop(ref.parameters(), lr=7e-4, alpha=0.99, eps=1e-5)
    opt = RMSprop(ours.parameters(), lr=7e-4, alpha=0.99, eps=1e-5)
    _train(ref, opt_ref)
    _train(ours, opt)
    ours_sd, ref_sd = opt.state_dict(), opt_ref.state_dict()
    assert ours_sd["param_groups"] == ref_sd["param_groups"]
    for i, st in ref_sd["state"].items():
        assert list(st) == list(ours_sd["state"][i])
        assert all(torch.equal(v, ours_sd["state"][i][k]) for k, v in st.items())
    # Each loads the other's state and both go on to the same weights.
    opt_ref.load_state_dict(copy.deepcopy(ours_sd))
    opt.load_state_dict(copy.deepcopy(ref_sd))
    _train(ref, opt_ref, seed=2)
    _train(ours, opt, seed=2)
    assert _same(ref, ours)
    with pytest.raises(ValueError, match="momentum"):
        opt.load_state_dict(torch.optim.RMSprop(ours.parameters(), momentum=0.9).state_dict())
    with pytest.raises(ValueError, match="alpha"):
        RMSprop(ours.parameters(), alpha=1.5)


def _flat_agent() -> tuple[nn.Module, FlatAdam]:
    net = _net()
    return net, FlatAdam(FlatParameters(net.parameters()), lr=1e-2)


def test_flat_adam_is_torch_adam_on_views_of_one_buffer() -> None:
    ref = _net()
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2, fused=True)
    ours, opt = _flat_agent()
    for p, view in zip(ours.parameters(), opt.flat.views(opt.flat.data), strict=True):
        assert p.data_ptr() == view.data_ptr()  # the modules' own parameters, re-seated
    _train(ref, opt_ref)
    _train(ours, opt)
    # One kernel over the whole buffer computes what torch's per-tensor one does (same elementwise maths).
    for a, b in zip(ref.parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
    assert opt.flat.intact()
    opt.param_groups[0]["lr"] = 3e-3  # learning-rate mutation
    opt_ref.param_groups[0]["lr"] = 3e-3
    _train(ref, opt_ref, seed=1)
    _train(ours, opt, seed=1)
    for a, b in zip(ref.parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_flat_adam_checkpoints_in_torch_adams_per_parameter_format() -> None:
    ref = _net()
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2, fused=True)
    ours, opt = _flat_agent()
    assert opt.state_dict()["state"] == {} == opt_ref.state_dict()["state"]  # nothing before a step
    _train(ref, opt_ref)
    _train(ours, opt)
    sd = opt.state_dict()
    assert sd["param_groups"] == opt_ref.state_dict()["param_groups"]
    assert [v["exp_avg"].shape for v in sd["state"].values()] == [p.shape for p in ours.parameters()]
    # ours -> torch.optim.Adam, and torch's (or the plain Adam's) -> a fresh FlatAdam, continue alike.
    twin, torch_twin = copy.deepcopy(ours), copy.deepcopy(ours)
    opt_twin = FlatAdam(FlatParameters(twin.parameters()), lr=1.0)
    opt_twin.load_state_dict(copy.deepcopy(sd))
    opt_torch = torch.optim.Adam(torch_twin.parameters(), lr=1.0, fused=True)
    opt_torch.load_state_dict(copy.deepcopy(sd))
    for net, o in ((ours, opt), (twin, opt_twin), (torch_twin, opt_torch)):
        _train(net, o, seed=2)
    assert _same(ours, twin)
    for a, b in zip(ours.parameters(), torch_twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # A state where parameters took different step counts has no flat form: a clear error.
    uneven = copy.deepcopy(sd)
    uneven["state"][0]["step"] = torch.tensor(1.0)
    with pytest.raises(ValueError, match="same number of steps"):
        FlatAdam(FlatParameters(_net().parameters())).load_state_dict(uneven)


def test_flat_parameters_heal_after_deepcopy_and_replaced_gradients() -> None:
    net, opt = _flat_agent()
    _train(net, opt, steps=2)
    twin, twin_opt = copy.deepcopy((net, opt))  # population cloning copies both together
    assert not twin_opt.flat.intact()  # deepcopy gives each parameter its own storage
    before, twin_before = copy.deepcopy(net), copy.deepcopy(twin)
    _train(twin, twin_opt, steps=2)
    assert twin_opt.flat.intact() and _same(net, before) and not _same(twin, twin_before)
    # The twin carries on exactly as the original does.
    _train(net, opt, steps=2)
    assert _same(net, twin)
    # Something sets the gradients to None: the next zero_grad re-seats them.
    for p in net.parameters():
        p.grad = None
    _train(net, opt, steps=1)
    assert opt.flat.intact()


def test_flat_clip_and_lerp_match_the_per_tensor_operations() -> None:
    a, b = _net(), _net()
    fa = FlatParameters(a.parameters())
    for p in b.parameters():
        p.data.mul_(3.0)
    fb = FlatParameters(b.parameters(), grads=False)
    a(torch.randn(8, 4)).pow(2).sum().mul(100.0).backward()
    ref = [p.grad.clone() for p in a.parameters()]
    ref_net = copy.deepcopy(a)
    for p, g in zip(ref_net.parameters(), ref, strict=True):
        p.grad = g.clone()
    norm = nn.utils.clip_grad_norm_(ref_net.parameters(), 1.0)
    assert float(fa.clip_grad_norm_(1.0)) == pytest.approx(float(norm), rel=1e-6)
    for p, q in zip(a.parameters(), ref_net.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    target = [p.detach().clone() for p in b.parameters()]
    torch._foreach_lerp_(target, [p.detach() for p in a.parameters()], 0.01)
    fb.lerp_(fa, 0.01)
    assert all(torch.allclose(x, y) for x, y in zip(b.parameters(), target, strict=True))
    with pytest.raises(ValueError, match="same layout"):
        fb.lerp_(FlatParameters(nn.Linear(2, 2).parameters()), 0.5)


def test_training_the_gym_algorithms_never_imports_torch_dynamo() -> None:
    # torch.optim imports torch._dynamo on first use: ~70 MB of RSS this optimizer exists to avoid.
    script = textwrap.dedent(
        """
        import sys
        from agilerl.training.trainer import LocalTrainer
        for name, env in (("PPO", "CartPole-v1"), ("DQN", "CartPole-v1"), ("TD3", "Pendulum-v1"),
                          ("A2C", "CartPole-v1")):
            algo = {"name": name} if name == "A2C" else {"name": name, "learn_step": 64, "batch_size": 32}
            m = {"algorithm": algo,
                 "environment": {"name": env, "num_envs": 2, "sync": True},
                 "training": {"max_steps": 400, "evo_steps": 200, "progress": False,
                              **({} if name in ("PPO", "A2C") else {"learning_delay": 50})}}
            LocalTrainer.from_manifest(m, run_dir=sys.argv[1] + "/" + name).train()
        print("torch._dynamo" in sys.modules)
        """
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", script, tmp], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
