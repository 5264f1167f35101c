"""What every single-agent algorithm here shares: networks, optimizers, checkpoints, evolution, test.

An algorithm declares its networks by name (``self.nets``), which of them are trained ("eval"
networks, mutated by architecture mutation) and which are targets (``target_of``: target -> online),
and how to build its optimizers. This base class then provides the algorithm protocol's
``state_dict``/``load_state_dict`` (architectures included, so a mutated agent resumes), ``clone``,
``mutate_architecture``, ``mutate_activation``, ``mutate_parameters`` and a vectorised ``test``.
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
from agilerl.models.base import AlgorithmSpec
from agilerl_plugin_gym.engine.evaluation import EvalTicker
from agilerl_plugin_gym.fast.optim import Adam
from agilerl_plugin_gym.inference import SingleAgentInference
from agilerl_plugin_gym.masking import MaskSource, check_masking, strip_mask_key
from agilerl_plugin_gym.networks import EvolvableNetwork, add_parameter_noise, pick_activation
from agilerl_plugin_gym.networks.targets import TargetSync
from agilerl_plugin_gym.normalization import Normalizer
from agilerl_plugin_gym.observations import as_tensors, is_structured
from agilerl_plugin_gym.sections import NetworkSpec
from agilerl_plugin_gym.single_agent.spaces import (  # noqa: F401  (re-exported)
    UnsupportedSpaceError,
    check_observation_space,
    check_spaces,
)


class GymAlgorithm(SingleAgentInference, AlgorithmBase):
    """Base of PPO, DQN, DDPG and TD3 (see module docstring)."""

    #: The network whose architecture drives mutation (others follow with the same method).
    policy_name: ClassVar[str] = "actor"
    #: Networks trained by gradient descent (mutated together).
    eval_names: ClassVar[tuple[str, ...]] = ("actor",)
    #: target network name -> the online network it tracks.
    target_of: ClassVar[dict[str, str]] = {}
    #: Learning-rate hyperparameter -> optimizer names it applies to.
    lr_optimizers: ClassVar[dict[str, tuple[str, ...]]] = {"lr": ("optimizer",)}

    # Hyperparameters are read from ``self.spec`` (the algorithm's spec class; never copied here).

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
        self.optimizers: dict[str, Adam] = {}
        self.extra_params: dict[str, nn.Parameter] = {}
        #: Vector-env steps taken (the off-policy update schedule counts on it; checkpointed).
        self.vec_steps = 0
        self.targets = TargetSync(self.nets, {})

    # --- helpers for subclasses ------------------------------------------------------------------
    def build_network(self, out_dim: int, *, space: spaces.Space[Any] | None = None, **kwargs: Any) -> EvolvableNetwork:
        """An evolvable network from the manifest's ``network`` section, ``space`` (default: the
        observation space) -> ``out_dim`` outputs, on this algorithm's device. ``kwargs`` go to
        :meth:`EvolvableNetwork.from_spec` (``output_activation``, ``output_vanish``, ``encoder``)."""
        net = EvolvableNetwork.from_spec(
            self.net_spec,
            space or self.observation_space,
            out_dim,
            normalize_images=bool(getattr(self.spec, "normalize_images", True)),
            **kwargs,
        )
        return net.to(self.device)

    def sync_targets(self) -> None:
        """(Re)make every target network a frozen copy of its online network."""
        self.targets = TargetSync(self.nets, self.target_of)
        self.targets.copy_online()

    def soft_update(self, tau: float | None = None) -> None:
        """Polyak-average every target network towards its online one (``tau`` default: ``self.spec.tau``)."""
        self.targets.soft(float(getattr(self.spec, "tau", 1.0) if tau is None else tau))

    def make_optimizer(self, params: Any, lr: float, eps: float = 1e-8) -> Adam:
        """Adam over ``params`` (call it from :meth:`build_optimizers`)."""
        # Our Adam: torch's fused kernel without Optimizer.step's per-call overhead, and no
        # torch._dynamo import (~70 MB of RSS) -- see agilerl_plugin_gym.fast.optim.
        return Adam(params, lr=lr, eps=eps)

    def build_optimizers(self) -> None:
        """Create ``self.optimizers`` for the current networks (called after any rebuild)."""
        raise NotImplementedError

    def obs_tensor(self, obs: Any) -> Any:
        """A batch of observations as a tensor (a dict of them for Dict/Tuple spaces), without
        copying on CPU."""
        if is_structured(obs):
            return as_tensors(obs, self.device)
        return torch.as_tensor(obs, device=self.device)

    # --- hyperparameters --------------------------------------------------------------------------
    def on_spec_change(self, old: Any, changed: frozenset[str]) -> None:
        """A new learning rate goes into its optimizers' parameter groups (Adam's moments are kept);
        every other hyperparameter is read from ``self.spec`` where it is used."""
        for name in changed:
            for opt_name in self.lr_optimizers.get(name, ()):
                opt = self.optimizers.get(opt_name)
                if opt is not None:
                    for group in opt.param_groups:
                        group["lr"] = float(getattr(self.spec, name))

    # --- evolution --------------------------------------------------------------------------------
    def mutate_architecture(self, rng: random.Random, *, new_layer_prob: float) -> str | None:
        """Apply one sampled architecture change to every trained network (once per shared module)."""
        policy = self.nets[self.policy_name]
        method = policy.sample_mutation(rng, new_layer_prob)
        part = method.split(".")[0]
        seed = rng.getrandbits(32)
        seen: set[int] = set()
        changed = False
        # A latent step: the policy draws the new size and every other network follows it (a shared
        # encoder is resized once, each head reading it after).
        follow_latent = part == "latent" and policy.apply_mutation(method, random.Random(seed))
        for name in self.eval_names if follow_latent else ():
            changed |= self.nets[name].set_latent_dim(policy.latent_dim)
        changed |= follow_latent
        for name in self.eval_names if part != "latent" else ():
            net = self.nets[name]
            module = net.encoder if part == "encoder" else net.head
            if id(module) in seen:
                continue
            seen.add(id(module))
            # The same sub-seed makes every network pick the same layer / node count where it can.
            changed |= net.apply_mutation(method, random.Random(seed))
        if not changed:
            return None
        self.sync_targets()
        self.build_optimizers()
        return f"arch:{method}"

    def mutate_activation(self, rng: random.Random, *, choices: list[str]) -> str | None:
        """Activation mutation: one activation from ``choices`` other than the current one, for the
        hidden layers of every trained network; weights are kept, optimizers start afresh (AgileRL's)."""
        name = pick_activation(self.nets[self.policy_name].activation, choices, rng)
        changed = False
        for net in dict.fromkeys(self.nets[n] for n in self.eval_names):
            changed |= net.set_activation(name)
        if not changed:
            return None
        self.sync_targets()
        self.build_optimizers()
        return f"act:{name}"

    def mutate_parameters(self, rng: random.Random, *, sd: float) -> str | None:
        """Gaussian parameter noise on the policy network (then fresh optimizers, as AgileRL does)."""
        add_parameter_noise(self.nets[self.policy_name], sd, rng)
        self.sync_targets()
        self.build_optimizers()
        return "param"

    def clone(self, index: int | None = None) -> GymAlgorithm:
        twin = copy.deepcopy(self)
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
            "vec_steps": self.vec_steps,
            **({"normalizer": self.normalizer.state_dict()} if self.normalizer is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rebuilt = False
        for name, arch in state.get("arch", {}).items():
            if self.nets[name].arch() != arch:
                self.nets[name].set_arch(arch)
                rebuilt = True
        if rebuilt:
            self.sync_targets()
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
        self.vec_steps = int(state.get("vec_steps", 0))
        if "normalizer" in state:  # the statistics (and settings) travel with the agent
            self.normalizer = Normalizer.from_state(state["normalizer"], self.observation_space)

    # --- evaluation -------------------------------------------------------------------------------
    def greedy_action(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic action for a batch of observations, ready for ``env.step``."""
        raise NotImplementedError

    def initial_policy_state(self, n: int) -> Any:
        """The state a policy starts ``n`` episodes from (``None``: a stateless policy; recurrent PPO's LSTM state)."""
        return None

    def policy_step(self, obs: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        """The greedy action for a batch, and the policy state after it."""
        return self.greedy_action(obs), state

    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float:
        """Mean return of the greedy policy over ``loop`` rounds of one episode per sub-env.

        ``env`` is a vector env; each round resets it (``seed + round`` when ``seed`` is given) and
        runs until every sub-env has finished its first episode (or ``max_steps`` vector steps).
        """
        means = []
        ticker = EvalTicker(env.num_envs * loop)  # progress lines while a long evaluation runs
        masking = bool(getattr(self.spec, "action_masking", False))
        for i in range(loop):
            obs, info = env.reset(seed=None if seed is None else seed + i)
            source = MaskSource.of(env, obs, info)
            check_masking(
                source, masking, type(self).__name__, supported="action_masking" in type(self.spec).model_fields
            )
            n = env.num_envs
            total = np.zeros(n)
            finished = np.zeros(n, dtype=bool)
            steps = 0
            state = self.initial_policy_state(n)
            while not finished.all():
                net_obs = strip_mask_key(obs) if masking else obs
                if self.normalizer is not None:  # the normaliser's statistics are frozen here: read, never updated
                    net_obs = self.normalizer.normalize_obs(net_obs)
                if masking:  # the allowed actions only (masking.py)
                    action = self.greedy_action(net_obs, source.read(env, obs, info))  # type: ignore[call-arg]
                else:
                    action, state = self.policy_step(net_obs, state)
                obs, reward, terminated, truncated, info = env.step(action)
                total += np.where(finished, 0.0, reward)
                finished |= terminated | truncated
                steps += 1
                ticker.tick(int(finished.sum()))
                if max_steps is not None and steps >= max_steps:
                    break
            ticker.end_round(int(finished.sum()))
            means.append(float(total.mean()))
        return float(np.mean(means))
