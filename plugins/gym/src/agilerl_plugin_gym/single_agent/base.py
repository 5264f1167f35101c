"""What every single-agent algorithm here shares: networks, optimizers, checkpoints, evolution, test.

An algorithm declares its networks by name (``self.nets``), which of them are trained ("eval"
networks, mutated by architecture mutation) and which are targets (``target_of``: target -> online),
and how to build its optimizers. This base class then provides the algorithm protocol's
``state_dict``/``load_state_dict`` (architectures included, so a mutated agent resumes), ``clone``,
``mutate_architecture``, ``mutate_parameters`` and a vectorised ``test``.
"""

from __future__ import annotations

import copy
import random
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.algorithm import AlgorithmBase
from agilerl.errors import AgileRLError
from agilerl.models import AlgorithmSpec, NetworkSpec
from agilerl_plugin_gym.networks import EvolvableNetwork, add_parameter_noise, is_image_space


class UnsupportedSpaceError(AgileRLError):
    """The env's observation or action space is not one the algorithm handles."""


def check_observation_space(algo: str, space: spaces.Space[Any], *, images: bool = True) -> None:
    ok = isinstance(space, (spaces.Discrete, spaces.MultiBinary)) or (
        isinstance(space, spaces.Box) and (len(space.shape) <= 1 or (images and is_image_space(space)))
    )
    if not ok:
        what = "image (H x W x C Box) observations" if is_image_space(space) else f"observation space {space}"
        raise UnsupportedSpaceError(
            f"environment: {algo} does not support {what}. Supported: Box vectors, Discrete"
            + (", H x W x C images" if images else "")
            + ". Wrap the env (environment.env_wrappers) to flatten or convert it."
        )


class GymAlgorithm(AlgorithmBase):
    """Base of PPO, DQN, DDPG and TD3 (see module docstring)."""

    #: The network whose architecture drives mutation (others follow with the same method).
    policy_name: ClassVar[str] = "actor"
    #: Networks trained by gradient descent (mutated together).
    eval_names: ClassVar[tuple[str, ...]] = ("actor",)
    #: target network name -> the online network it tracks.
    target_of: ClassVar[dict[str, str]] = {}
    #: Learning-rate hyperparameter -> optimizer names it applies to.
    lr_optimizers: ClassVar[dict[str, tuple[str, ...]]] = {"lr": ("optimizer",)}

    def __init__(
        self,
        spec: AlgorithmSpec,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        *,
        index: int = 0,
        device: str | torch.device = "cpu",
        net_spec: NetworkSpec | None = None,
    ) -> None:
        super().__init__(spec, index=index)
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = torch.device(device)
        self.net_spec = net_spec
        self.nets: dict[str, EvolvableNetwork] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.extra_params: dict[str, nn.Parameter] = {}

    # --- helpers for subclasses ------------------------------------------------------------------
    def _net(self, out_dim: int, *, space: spaces.Space[Any] | None = None, **kwargs: Any) -> EvolvableNetwork:
        net = EvolvableNetwork.from_spec(
            self.net_spec,
            space or self.observation_space,
            out_dim,
            normalize_images=bool(getattr(self.spec, "normalize_images", True)),
            **kwargs,
        )
        return net.to(self.device)

    def _sync_targets(self) -> None:
        for target, source in self.target_of.items():
            self.nets[target] = copy.deepcopy(self.nets[source])
            self.nets[target].requires_grad_(False)

    def _adam(self, params: Any, lr: float) -> torch.optim.Optimizer:
        # Fused Adam is one kernel per step instead of several per parameter: a large share of the
        # update time for small nets.
        params = list(params)
        try:
            return torch.optim.Adam(params, lr=lr, fused=True)
        except (RuntimeError, TypeError):
            return torch.optim.Adam(params, lr=lr)

    @staticmethod
    def _adam_step(opt: torch.optim.Optimizer) -> None:
        """``opt.zero_grad``-free ``opt.step()`` for a fused Adam, without the Python wrapper.

        ``Optimizer.step`` spends about 0.1 ms per call in hooks, profiling scopes and per-parameter
        bookkeeping: as much as three fused kernels cost for a small net. Once the state exists
        (after the first ordinary step) this calls the very kernels ``torch.optim.Adam(fused=True)``
        calls, on the optimizer's own state tensors, so the result and ``state_dict`` are the same.
        Anything unusual (no fused kernel, amsgrad, weight decay, a missing grad, a reloaded state)
        takes the ordinary path.
        """
        cache = getattr(opt, "_agilerl_fast", None)
        if cache is None or cache[0] is not opt.state:
            cache = _fused_adam_cache(opt)
            if cache is None:  # no state yet: the first step creates it, the next call caches it
                opt.step()
                return
            opt._agilerl_fast = cache  # type: ignore[attr-defined]
        if cache[1] is None:
            opt.step()
            return
        _, params, exp_avgs, exp_avg_sqs, steps, group = cache
        grads = [p.grad for p in params]
        if any(g is None for g in grads) or not isinstance(group["lr"], float):
            opt.step()
            return
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            [],
            steps,
            lr=group["lr"],
            beta1=group["betas"][0],
            beta2=group["betas"][1],
            weight_decay=0.0,
            eps=group["eps"],
            amsgrad=False,
            maximize=False,
        )

    def build_optimizers(self) -> None:
        """Create ``self.optimizers`` for the current networks (called after any rebuild)."""
        raise NotImplementedError

    def obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """A batch of observations as a tensor, without copying on CPU."""
        return torch.as_tensor(obs, device=self.device)

    # --- hyperparameters --------------------------------------------------------------------------
    def _on_hyperparameter_change(self, name: str, old: Any, new: Any) -> None:
        for opt_name in self.lr_optimizers.get(name, ()):
            opt = self.optimizers.get(opt_name)
            if opt is not None:
                for group in opt.param_groups:
                    group["lr"] = float(new)

    # --- evolution --------------------------------------------------------------------------------
    def mutate_architecture(self, rng: random.Random, *, new_layer_prob: float) -> str | None:
        """Apply one sampled architecture change to every trained network (once per shared module)."""
        method = self.nets[self.policy_name].sample_mutation(rng, new_layer_prob)
        part = method.split(".")[0]
        seed = rng.getrandbits(32)
        seen: set[int] = set()
        changed = False
        for name in self.eval_names:
            net = self.nets[name]
            module = net.encoder if part == "encoder" else net.head
            if id(module) in seen:
                continue
            seen.add(id(module))
            # The same sub-seed makes every network pick the same layer / node count where it can.
            changed |= net.apply_mutation(method, random.Random(seed))
        if not changed:
            return None
        self._sync_targets()
        self.build_optimizers()
        return f"arch:{method}"

    def mutate_parameters(self, rng: random.Random, *, sd: float) -> str | None:
        """Gaussian parameter noise on the policy network (then fresh optimizers, as AgileRL does)."""
        add_parameter_noise(self.nets[self.policy_name], sd, rng)
        self._sync_targets()
        self.build_optimizers()
        return "param"

    def clone(self, index: int | None = None) -> GymAlgorithm:
        caches = {k: self.__dict__.pop(k) for k in [k for k in self.__dict__ if k.startswith("_cache")]}
        try:
            twin = copy.deepcopy(self)
        finally:
            self.__dict__.update(caches)
        if index is not None:
            twin.index = int(index)
        return twin

    # --- checkpoints ------------------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        """Algorithm-specific state (override)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`extra_state` (override)."""

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "arch": {name: net.arch() for name, net in self.nets.items() if name not in self.target_of},
            "nets": {name: net.state_dict() for name, net in self.nets.items()},
            "params": {name: p.detach().clone() for name, p in self.extra_params.items()},
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rebuilt = False
        for name, arch in state.get("arch", {}).items():
            if self.nets[name].arch() != arch:
                self.nets[name].set_arch(arch)
                rebuilt = True
        if rebuilt:
            self._sync_targets()
        for name, sd in state["nets"].items():
            self.nets[name].load_state_dict(sd)
        with torch.no_grad():
            for name, p in state.get("params", {}).items():
                self.extra_params[name].copy_(p)
        self.build_optimizers()
        for name, sd in state.get("optimizers", {}).items():
            if name in self.optimizers:
                self.optimizers[name].load_state_dict(sd)
        super().load_state_dict(state)  # hyperparameters last: a changed lr updates the optimizers
        for opt_name_lr, names in self.lr_optimizers.items():
            for opt_name in names:
                if opt_name in self.optimizers and hasattr(self, opt_name_lr):
                    for group in self.optimizers[opt_name].param_groups:
                        group["lr"] = float(getattr(self, opt_name_lr))
        self.load_extra_state(state.get("extra", {}))

    # --- evaluation -------------------------------------------------------------------------------
    def greedy_action(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic action for a batch of observations, ready for ``env.step``."""
        raise NotImplementedError

    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float:
        """Mean return of the greedy policy over ``loop`` rounds of one episode per sub-env.

        ``env`` is a vector env; each round resets it (``seed + round`` when ``seed`` is given) and
        runs until every sub-env has finished its first episode (or ``max_steps`` vector steps).
        """
        means = []
        for i in range(loop):
            obs, _ = env.reset(seed=None if seed is None else seed + i)
            n = env.num_envs
            total = np.zeros(n)
            finished = np.zeros(n, dtype=bool)
            steps = 0
            while not finished.all():
                obs, reward, terminated, truncated, _ = env.step(self.greedy_action(obs))
                total += np.where(finished, 0.0, reward)
                finished |= terminated | truncated
                steps += 1
                if max_steps is not None and steps >= max_steps:
                    break
            means.append(float(total.mean()))
        return float(np.mean(means))


def _fused_adam_cache(opt: torch.optim.Optimizer) -> tuple[Any, ...] | None:
    """(state, params, exp_avgs, exp_avg_sqs, steps, group) for the fast path; params None: never
    fast for this optimizer; None: its state does not exist yet."""
    groups = opt.param_groups
    off = (opt.state, None, None, None, None, None)
    if not isinstance(opt, torch.optim.Adam) or len(groups) != 1:
        return off
    g = groups[0]
    plain = not (g["amsgrad"] or g["maximize"] or g["weight_decay"] or g.get("capturable") or g.get("differentiable"))
    if not (g.get("fused") and plain) or opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks:
        return off
    params = list(g["params"])
    states = [opt.state.get(p) for p in params]
    if any(not st or "exp_avg" not in st for st in states):
        return None
    exp_avgs = [st["exp_avg"] for st in states]
    exp_avg_sqs = [st["exp_avg_sq"] for st in states]
    steps = [st["step"] for st in states]
    return (opt.state, params, exp_avgs, exp_avg_sqs, steps, g)
