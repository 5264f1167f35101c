"""MADDPG and MATD3: decentralised actors, centralised critics (Lowe et al. 2017; Ackermann et al. 2019).

Each agent's actor sees only its own observation; each agent's critic ``Q_i(o_1..o_n, a_1..a_n)``
sees every observation and action, which keeps the learning problem stationary while the other
agents' policies change. Discrete actions are one-hot vectors drawn with the straight-through
Gumbel-softmax (so the critic's gradient reaches the actor's logits); continuous actions come from a
tanh-bounded deterministic actor plus Ornstein-Uhlenbeck or Gaussian exploration noise.

MATD3 adds TD3's fixes: twin critics with the minimum as target, actor updates every
``policy_freq`` critic updates, and clipped noise on target actions (continuous actions).

Hyperparameters (see :class:`~agilerl_plugin_gym.multi_agent.specs.MADDPGSpec` for their docs):
``lr_actor``, ``lr_critic``, ``gamma``, ``tau``, ``batch_size``, ``learn_step``, ``O_U_noise``,
``expl_noise``, ``mean_noise``, ``theta``, ``dt``; MATD3 ``policy_freq``, ``policy_noise``, ``noise_clip``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from agilerl.errors import AgileRLError
from agilerl_plugin_gym.engine.off_policy import ExplorationNoise, NoiseSettings
from agilerl_plugin_gym.fast.optim import Adam
from agilerl_plugin_gym.multi_agent.base import MultiAgentAlgorithm, action_dim, network_space
from agilerl_plugin_gym.multi_agent.specs import MADDPGSpec, MATD3Spec
from agilerl_plugin_gym.networks import EvolvableNetwork
from agilerl_plugin_gym.networks.targets import TargetSync


class MADDPG(MultiAgentAlgorithm):
    """Multi-agent DDPG. ``act`` explores when ``deterministic=False``; ``learn`` takes one batch."""

    spec: MADDPGSpec

    module_attrs = ("actors", "actor_targets", "critics", "critic_targets")
    optimizer_attrs = ("actor_optimizers", "critic_optimizers")
    mutable_module_attrs = ("actors",)
    #: Critics per agent (MATD3: 2).
    n_critics = 1

    def __init__(self, spec: Any, observation_spaces: Any, action_spaces: Any, **kwargs: Any) -> None:
        super().__init__(spec, observation_spaces, action_spaces, **kwargs)
        for a, space in self.action_spaces.items():
            if not isinstance(space, (spaces.Discrete, spaces.Box)):
                raise TypeError(f"{type(self).__name__} supports Discrete or Box actions; agent {a!r} has {space}")
        self.act_dims = {a: action_dim(s) for a, s in self.action_spaces.items()}
        self.actors: dict[str, EvolvableNetwork] = {}
        for key in self.net_keys:
            a = self.agents_of(key)[0]
            self.actors[key] = EvolvableNetwork.from_spec(
                self.net_spec(key),
                network_space(self.observation_spaces[a]),
                self.act_dims[a],
                output_activation=None if self.discrete[a] else "Tanh",
                normalize_images=spec.normalize_images,
            ).to(self.device)
        joint_dim = sum(int(np.prod(network_space(s).shape)) for s in self.observation_spaces.values())
        joint_dim += sum(self.act_dims.values())
        joint_space = spaces.Box(-np.inf, np.inf, (joint_dim,), np.float32)
        # Critics per agent (never shared: each values its own reward), twin for MATD3 as key "agent#k".
        self.critics: dict[str, EvolvableNetwork] = {}
        for a in self.agent_ids:
            for k in range(self.n_critics):
                self.critics[self._ck(a, k)] = EvolvableNetwork.from_spec(
                    self.net_spec(self.keys[a]), joint_space, 1, output_vanish=False
                ).to(self.device)
        self.actor_targets = {k: copy.deepcopy(m) for k, m in self.actors.items()}
        self.critic_targets = {k: copy.deepcopy(m) for k, m in self.critics.items()}
        self._build_optimizers()
        self.learn_counter = 0
        self.noise: dict[str, ExplorationNoise] = {}

    @staticmethod
    def _ck(agent: str, k: int) -> str:
        return agent if k == 0 else f"{agent}#{k}"

    def _build_optimizers(self) -> None:
        # One optimizer per role over every agent's networks: the per-agent losses are independent,
        # so summing them and stepping once gives each network its own gradient at a fraction of the
        # Python overhead of one backward/step per agent.
        self._actor_params = [p for m in self.actors.values() for p in m.parameters()]
        self._critic_params = [p for m in self.critics.values() for p in m.parameters()]
        # optim.Adam: one fused kernel for the whole update (on CPU the per-tensor loop was a fifth of
        # MADDPG's learning step), and no torch._dynamo import.
        self.actor_optimizers = {"all": Adam(self._actor_params, lr=self.spec.lr_actor)}
        self.critic_optimizers = {"all": Adam(self._critic_params, lr=self.spec.lr_critic)}
        # Every target network tracks its online one through one fused Polyak update (the engine's).
        self.targets = TargetSync(
            {**{f"a:{k}": m for k, m in self.actors.items()}, **{f"c:{k}": m for k, m in self.critics.items()},
             **{f"a:{k}:t": m for k, m in self.actor_targets.items()},
             **{f"c:{k}:t": m for k, m in self.critic_targets.items()}},
            {**{f"a:{k}:t": f"a:{k}" for k in self.actors}, **{f"c:{k}:t": f"c:{k}" for k in self.critics}},
        )  # fmt: skip

    def on_spec_change(self, old: Any, changed: frozenset[str]) -> None:
        if "lr_actor" in changed:
            self._set_lr(self.actor_optimizers, float(self.spec.lr_actor))
        if "lr_critic" in changed:
            self._set_lr(self.critic_optimizers, float(self.spec.lr_critic))

    def _after_architecture_change(self) -> None:
        self.actor_targets = {k: copy.deepcopy(m) for k, m in self.actors.items()}
        self.critic_targets = {k: copy.deepcopy(m) for k, m in self.critics.items()}
        self._build_optimizers()

    def _after_parameter_mutation(self) -> None:
        for k, m in self.actors.items():
            self.actor_targets[k].load_state_dict(m.state_dict())

    # --- acting ----------------------------------------------------------------------------------
    def reset_noise(self, num_envs: int) -> None:
        """Fresh exploration-noise state for ``num_envs`` sub-envs (every continuous-action agent)."""
        self.noise = {a: ExplorationNoise(d) for a, d in self.act_dims.items() if not self.discrete[a]}

    def _noise(self, agent: str, n: int, rng: np.random.Generator) -> np.ndarray:
        settings = NoiseSettings(
            bool(self.spec.O_U_noise), self.spec.expl_noise, self.spec.mean_noise, self.spec.theta, self.spec.dt
        )
        if agent not in self.noise:
            self.noise[agent] = ExplorationNoise(self.act_dims[agent])
        return self.noise[agent].sample(n, rng, settings)

    def get_actions(
        self, obs: Mapping[str, np.ndarray], *, explore: bool, rng: np.random.Generator | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(env_actions, stored_actions)``: ints / scaled floats for the env; one-hot / [-1, 1] to store.

        Exploration noise of continuous actions is drawn from ``rng`` (the strategy's seeded,
        checkpointed generator; a fresh unseeded one when None). Discrete exploration samples the
        Gumbel-softmax with torch's generator.
        """
        if explore and rng is None:
            rng = np.random.default_rng()
        env_actions: dict[str, np.ndarray] = {}
        stored: dict[str, np.ndarray] = {}
        with torch.inference_mode():
            for a in self.agent_ids:
                out = self.actors[self.keys[a]](self._tensor(obs[a]))
                if self.discrete[a]:
                    if explore:
                        onehot = F.gumbel_softmax(out, hard=True)
                        idx = onehot.argmax(-1)
                    else:
                        idx = out.argmax(-1)
                        onehot = F.one_hot(idx, self.act_dims[a]).float()
                    env_actions[a] = idx.cpu().numpy()
                    stored[a] = onehot.cpu().numpy()
                else:
                    act = out.cpu().numpy()
                    if explore:
                        assert rng is not None
                        act = np.clip(act + self._noise(a, act.shape[0], rng), -1.0, 1.0)
                    stored[a] = act.astype(np.float32)
                    env_actions[a] = self.scale_action(a, stored[a])
        return env_actions, stored

    def act(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        deterministic: bool = True,
        action_masks: Mapping[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        if action_masks is not None:  # masked envs are refused before training and evaluation (check_masks)
            raise AgileRLError(f"{type(self).__name__} does not mask actions; IPPO does (action_masking: true)")
        return self.get_actions(obs, explore=not deterministic)[0]

    # --- learning --------------------------------------------------------------------------------
    def _joint(self, obs: Mapping[str, torch.Tensor], actions: Mapping[str, torch.Tensor]) -> torch.Tensor:
        parts = [obs[a].flatten(1) for a in self.agent_ids] + [actions[a].flatten(1) for a in self.agent_ids]
        return torch.cat(parts, dim=1)

    def _policy_action(self, net: EvolvableNetwork, agent: str, obs: torch.Tensor) -> torch.Tensor:
        """A differentiable action: straight-through Gumbel-softmax one-hot, or the tanh output."""
        out = net(obs)
        return F.gumbel_softmax(out, hard=True) if self.discrete[agent] else out

    def _target_actions(self, next_obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {a: self._policy_action(self.actor_targets[self.keys[a]], a, next_obs[a]) for a in self.agent_ids}

    def _target_q(self, agent: str, joint_next: torch.Tensor) -> torch.Tensor:
        return self.critic_targets[agent](joint_next)

    def _update_actor_now(self) -> bool:
        return True

    def learn(self, batch: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, float]:
        """One gradient step of every critic (and, when due, every actor) on a sampled joint batch."""
        obs, actions, rewards = batch["obs"], batch["action"], batch["reward"]
        next_obs, dones = batch["next_obs"], batch["done"]
        with torch.no_grad():
            joint_next = self._joint(next_obs, self._target_actions(next_obs))
        joint = self._joint(obs, actions)
        critic_loss = torch.zeros((), device=self.device)
        for a in self.agent_ids:
            with torch.no_grad():
                y = rewards[a] + self.spec.gamma * (1.0 - dones[a]) * self._target_q(a, joint_next).squeeze(-1)
            for k in range(self.n_critics):
                critic_loss = critic_loss + F.mse_loss(self.critics[self._ck(a, k)](joint).squeeze(-1), y)
        opt = self.critic_optimizers["all"]
        opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self._clip(self._critic_params)
        opt.step()
        self.learn_counter += 1
        stats = {"critic_loss": critic_loss.item() / (len(self.agent_ids) * self.n_critics)}
        if not self._update_actor_now():
            return stats
        # The actor loss differentiates through the critics; their weight gradients are not needed.
        for p in self._critic_params:
            p.requires_grad_(False)
        actor_loss = torch.zeros((), device=self.device)
        for a in self.agent_ids:
            out = self.actors[self.keys[a]](obs[a])
            joint_actions = dict(actions)
            joint_actions[a] = F.gumbel_softmax(out, hard=True) if self.discrete[a] else out
            q = self.critics[a](self._joint(obs, joint_actions)).squeeze(-1)
            # Small penalty on the raw outputs keeps logits / pre-tanh values from drifting.
            actor_loss = actor_loss - q.mean() + 1e-3 * (out**2).mean()
        opt = self.actor_optimizers["all"]
        opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        for p in self._critic_params:
            p.requires_grad_(True)
        self._clip(self._actor_params)
        opt.step()
        stats["actor_loss"] = actor_loss.item() / len(self.agent_ids)
        self.targets.soft(self.spec.tau)
        return stats

    def _clip(self, params: list[torch.nn.Parameter]) -> None:
        if self.spec.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, self.spec.max_grad_norm, foreach=True)

    def extra_state(self) -> dict[str, Any]:
        return {"learn_counter": self.learn_counter}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.learn_counter = int(state.get("learn_counter", 0))


class MATD3(MADDPG):
    """Multi-agent TD3: twin critics (min target), delayed actor updates, target policy smoothing."""

    spec: MATD3Spec
    n_critics = 2

    def _target_actions(self, next_obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = super()._target_actions(next_obs)
        for a in self.agent_ids:
            if not self.discrete[a] and self.spec.policy_noise > 0:
                # Smoothing: a target action's value should hold for its neighbours too.
                noise = (torch.randn_like(out[a]) * self.spec.policy_noise).clamp(
                    -self.spec.noise_clip, self.spec.noise_clip
                )
                out[a] = (out[a] + noise).clamp(-1.0, 1.0)
        return out

    def _target_q(self, agent: str, joint_next: torch.Tensor) -> torch.Tensor:
        return torch.min(
            self.critic_targets[self._ck(agent, 0)](joint_next), self.critic_targets[self._ck(agent, 1)](joint_next)
        )

    def _update_actor_now(self) -> bool:
        return self.learn_counter % max(1, int(self.spec.policy_freq)) == 0


__all__ = ["MADDPG", "MATD3"]
