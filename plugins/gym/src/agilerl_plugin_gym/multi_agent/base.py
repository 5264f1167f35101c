"""What every multi-agent algorithm here shares: agents and groups, spaces, evaluation, checkpoints.

An algorithm holds one set of networks per *network key*: the agent id, or the agent's group
(``speaker_0`` -> ``speaker``) when the spec shares networks within groups. Evaluation follows
AgileRL's ``sum_scores``: an episode's score is the sum of the agents' returns (``True``, the
default) or their mean (``False``). An env's action masks and the algorithm's ``action_masking``
must agree (:meth:`MultiAgentAlgorithm.check_masks`); IPPO alone masks actions.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.algorithm import AlgorithmBase
from agilerl.models.base import AlgorithmSpec
from agilerl_plugin_gym.engine.evaluation import EvalTicker
from agilerl_plugin_gym.fast.optim import Adam
from agilerl_plugin_gym.inference import MultiAgentInference
from agilerl_plugin_gym.masking import MaskSource, check_masking
from agilerl_plugin_gym.networks import EvolvableNetwork, add_parameter_noise, pick_activation
from agilerl_plugin_gym.sections import NetworkSpec


def network_space(space: spaces.Space) -> spaces.Space:
    """The space networks see: the vec env one-hot encodes Discrete and flattens other non-Box spaces."""
    if isinstance(space, spaces.Box):
        return space
    return spaces.Box(-np.inf, np.inf, (int(spaces.flatdim(space)),), np.float32)


def action_dim(space: spaces.Space) -> int:
    """Width of an action as the networks produce it (one-hot for Discrete)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    return int(np.prod(space.shape))


class MultiAgentAlgorithm(MultiAgentInference, AlgorithmBase):
    """Base class: subclasses build their networks and implement :meth:`act` and ``learn``.

    :param spec: the validated algorithm spec.
    :param observation_spaces: agent id -> observation space.
    :param action_spaces: agent id -> action space.
    :param net_specs: network key -> ``NetworkSpec`` (``None``: the shared default).
    :param keys: agent id -> network key (itself, or its group when networks are shared).
    :param sum_scores: score episodes by the sum (True) or the mean (False) of the agents' returns.
    """

    #: Attributes holding ``{name: nn.Module}`` dicts, saved in checkpoints (subclasses extend).
    module_attrs: tuple[str, ...] = ()
    #: Attributes holding ``{name: agilerl_plugin_gym.fast.optim.Adam}`` dicts.
    optimizer_attrs: tuple[str, ...] = ()
    #: Attributes holding the modules ``params_mut`` perturbs.
    mutable_module_attrs: tuple[str, ...] = ()
    #: Attributes holding the ``EvolvableNetwork`` s that ``arch_mut`` and ``act_mut`` change together
    #: (actors first: the mutation is drawn from one of them); their shapes are checkpointed.
    evolvable_attrs: tuple[str, ...] = ("actors", "critics")

    def __init__(
        self,
        spec: AlgorithmSpec,
        observation_spaces: Mapping[str, spaces.Space],
        action_spaces: Mapping[str, spaces.Space],
        *,
        index: int = 0,
        device: str = "cpu",
        net_specs: Mapping[str, NetworkSpec | None] | None = None,
        keys: Mapping[str, str] | None = None,
        sum_scores: bool = True,
    ) -> None:
        super().__init__(spec, index=index)
        self.agent_ids = list(observation_spaces)
        self.observation_spaces = dict(observation_spaces)
        self.action_spaces = dict(action_spaces)
        self.device = torch.device(device)
        self.keys = dict(keys or {a: a for a in self.agent_ids})
        self.net_keys = list(dict.fromkeys(self.keys[a] for a in self.agent_ids))
        self.net_specs = dict(net_specs or {})
        self.sum_scores = bool(sum_scores)
        self.discrete = {a: isinstance(s, spaces.Discrete) for a, s in self.action_spaces.items()}
        #: Vector-env steps taken (the off-policy update schedule counts on it; checkpointed).
        self.vec_steps = 0

    def agents_of(self, key: str) -> list[str]:
        return [a for a in self.agent_ids if self.keys[a] == key]

    def net_spec(self, key: str) -> NetworkSpec | None:
        return self.net_specs.get(key)

    # --- acting ----------------------------------------------------------------------------------
    def act(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        deterministic: bool = True,
        action_masks: Mapping[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """Env actions for a batch of observations (agent id -> array with a leading env axis);
        only allowed ones under ``action_masks`` (agent id -> bool array, IPPO with ``action_masking``)."""
        raise NotImplementedError

    @property
    def masks_actions(self) -> bool:
        """Whether this agent acts from action masks (``algorithm.action_masking: true``)."""
        return bool(getattr(self.spec, "action_masking", False))

    def check_masks(self, kind: str | None) -> None:
        """An error naming ``algorithm.action_masking`` unless the env's masks (``kind``: ``"obs"``,
        ``"info"`` or None, e.g. a vector env's ``mask_kind`` after a reset) and this algorithm's
        ``action_masking`` agree."""
        check_masking(
            MaskSource(kind, vector=True),
            self.masks_actions,
            type(self).__name__,
            supported=getattr(type(self.spec), "masks_actions", False),
            masking_sibling="IPPO",
        )

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float32, device=self.device)

    def scale_action(self, agent: str, a: np.ndarray) -> np.ndarray:
        """Map a tanh output in [-1, 1] to the agent's Box bounds."""
        space = self.action_spaces[agent]
        low, high = space.low, space.high
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            return a
        return (low + (a.reshape(-1, *space.shape) + 1.0) * 0.5 * (high - low)).astype(np.float32)

    # --- evaluation ------------------------------------------------------------------------------
    def episode_score(self, returns: np.ndarray) -> np.ndarray:
        """Per-episode score from per-agent returns ``(episodes, agents)``."""
        return returns.sum(axis=1) if self.sum_scores else returns.mean(axis=1)

    def test(self, env: Any, *, max_steps: int | None = None, loop: int = 1, seed: int | None = None) -> float:
        """Mean score over ``loop`` rounds; a round runs every env copy to the end of one episode.

        Each round resets ``env`` with ``seed + round`` when ``seed`` is given (else unseeded).
        """
        scores: list[float] = []
        n_agents = len(self.agent_ids)
        ticker = EvalTicker(env.num_envs * max(1, loop))  # progress lines while a long evaluation runs
        for i in range(max(1, loop)):
            obs, infos = env.reset(seed=None if seed is None else seed + i)
            self.check_masks(env.mask_kind)
            returns = np.zeros((env.num_envs, n_agents), dtype=np.float64)
            finished = np.zeros(env.num_envs, dtype=bool)
            steps = 0
            while not finished.all():
                masks = infos.get("action_mask") if self.masks_actions else None
                obs, rewards, _, _, infos = env.step(self.act(obs, deterministic=True, action_masks=masks))
                live = ~finished
                returns[live] += np.stack([rewards[a] for a in self.agent_ids], axis=1)[live]
                finished |= infos["episode_done"]
                steps += 1
                ticker.tick(int(finished.sum()))
                if max_steps is not None and steps >= max_steps:
                    break
            ticker.end_round(int(finished.sum()))
            scores.extend(self.episode_score(returns).tolist())
        return float(np.mean(scores))

    # --- evolution -------------------------------------------------------------------------------
    def mutate_parameters(self, rng: random.Random, *, sd: float) -> str | None:
        """Gaussian noise on the actors' weights (targets follow, so the next update starts from them)."""
        for attr in self.mutable_module_attrs:
            for module in getattr(self, attr).values():
                add_parameter_noise(module, sd, rng)
        self._after_parameter_mutation()
        return "params"

    def _after_parameter_mutation(self) -> None:
        """Subclasses re-sync target networks here."""

    def evolvable_networks(self) -> list[EvolvableNetwork]:
        """Every network of :attr:`evolvable_attrs`, actors first."""
        return [net for attr in self.evolvable_attrs for net in getattr(self, attr).values()]

    def mutate_architecture(self, rng: random.Random, *, new_layer_prob: float) -> str | None:
        """One change drawn from one agent's actor, applied to every actor and (centralised or not)
        critic that offers the same method, with one sub-seed so each picks the same layer, node
        count or latent step where its shape allows: AgileRL's rule of applying a policy's mutation
        to the other agents and the analogous one to the critics. Targets and optimizers are rebuilt
        (fresh optimizer state, as the single-agent algorithms do)."""
        actors = getattr(self, self.evolvable_attrs[0])
        method = actors[rng.choice(sorted(actors))].sample_mutation(rng, new_layer_prob)
        seed = rng.getrandbits(32)
        changed = False
        for net in self.evolvable_networks():
            if method in net.mutation_methods():
                changed |= net.apply_mutation(method, random.Random(seed))
        if not changed:
            return None
        self._after_architecture_change()
        return f"arch:{method}"

    def mutate_activation(self, rng: random.Random, *, choices: list[str]) -> str | None:
        """Activation mutation: one new activation (not the current one) for the hidden layers of
        every actor and critic; weights are kept, targets and optimizers rebuilt."""
        nets = self.evolvable_networks()
        name = pick_activation(nets[0].activation, choices, rng)
        changed = [net.set_activation(name) for net in nets]
        if not any(changed):
            return None
        self._after_architecture_change()
        return f"act:{name}"

    def _after_architecture_change(self) -> None:
        """Rebuild what holds the evolvable networks' parameters (targets, optimizers); subclasses."""
        raise NotImplementedError

    def _set_lr(self, optimizers: Mapping[str, Adam], lr: float) -> None:
        for opt in optimizers.values():
            for group in opt.param_groups:
                group["lr"] = lr

    # --- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["arch"] = {attr: {k: m.arch() for k, m in getattr(self, attr).items()} for attr in self.evolvable_attrs}
        state["modules"] = {
            attr: {k: m.state_dict() for k, m in getattr(self, attr).items()} for attr in self.module_attrs
        }
        state["optimizers"] = {
            attr: {k: o.state_dict() for k, o in getattr(self, attr).items()} for attr in self.optimizer_attrs
        }
        state["extra"] = self.extra_state()
        state["vec_steps"] = self.vec_steps
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        rebuilt = False
        for attr, archs in state.get("arch", {}).items():
            for k, arch in archs.items():
                net = getattr(self, attr)[k]
                if net.arch() != arch:
                    net.set_arch(arch)
                    rebuilt = True
        if rebuilt:  # a mutated agent: its targets and optimizers take the checkpointed shapes first
            self._after_architecture_change()
        for attr, modules in state.get("modules", {}).items():
            for k, sd in modules.items():
                getattr(self, attr)[k].load_state_dict(sd)
        for attr, opts in state.get("optimizers", {}).items():
            for k, sd in opts.items():
                getattr(self, attr)[k].load_state_dict(sd)
        self.load_extra_state(state.get("extra", {}))
        self.vec_steps = int(state.get("vec_steps", 0))

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass


__all__ = ["MultiAgentAlgorithm", "action_dim", "network_space"]
