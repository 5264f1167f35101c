"""Recurrent PPO (AgileRL's ``recurrent: true``): :class:`RecurrentPPO`, PPO with an LSTM policy.

With ``recurrent: true`` PPO's encoder is an :class:`~agilerl_plugin_gym.networks.lstm.EvolvableLSTM`
(``network.encoder_config`` with AgileRL's LSTM keys, or a 64-unit one-layer LSTM when the manifest
gives none). Actor and critic share it by default (``share_encoders``); otherwise each has its own
LSTM and the state holds both.

* Rollouts (:class:`~agilerl_plugin_gym.engine.on_policy.OnPolicyEngine`) carry a hidden
  state per env through every step (:meth:`RecurrentPPO.act_recurrent`), store it with the
  step, and zero an env's state when its next observation starts a new episode.
* The update is truncated BPTT: the rollout is cut into sequences
  (:mod:`agilerl_plugin_gym.engine.recurrent`; ``max_seq_len``, ``bptt_sequence_type``), each run
  through the LSTM from its stored initial state (:meth:`RecurrentPPO.evaluate_sequences`),
  and the shared :func:`~agilerl_plugin_gym.ppo_update.ppo_update` minimises the clipped loss
  over the real (unpadded) steps, ``batch_size`` sequences per minibatch.
* Evaluation, ``predict`` and ``run_episodes`` carry the state step by step (``predict`` takes and
  returns it, SB3-style, resetting the rows ``episode_start`` marks); checkpoints store the state
  the last rollout ended with.

The manifest names it ``PPO`` with ``recurrent: true``: :class:`~agilerl_plugin_gym.single_agent.builder.SingleAgentBuilder`
builds this class for such a spec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from agilerl.errors import AgileRLError
from agilerl_plugin_gym.engine.recurrent import RecurrentRolloutBuffer, reset_rows
from agilerl_plugin_gym.inference import _as_obs_array, _is_batch
from agilerl_plugin_gym.ppo_update import ppo_update
from agilerl_plugin_gym.sections import LstmSpec, MlpSpec, NetworkSpec
from agilerl_plugin_gym.single_agent.ppo import PPO
from agilerl_plugin_gym.single_agent.spaces import check_recurrent_observation_space
from agilerl_plugin_gym.single_agent.specs import PPOSpec
from agilerl_plugin_gym.spec_base import ANY_ACTIONS

if TYPE_CHECKING:
    from agilerl_plugin_gym.buffers import RolloutBuffer
    from agilerl_plugin_gym.networks.lstm import EvolvableLSTM


def lstm_network_spec(net: NetworkSpec | None) -> NetworkSpec:
    """The manifest's network with an LSTM encoder (a 64-unit one-layer LSTM if it named none)."""
    if net is None:
        net = NetworkSpec(latent_dim=64, head_config=MlpSpec(hidden_size=[], layer_norm=False))
    if not isinstance(net.encoder_config, LstmSpec):  # validation refused any other explicit kind
        net = net.model_copy(update={"encoder_config": LstmSpec()})
    return net


class RecurrentPPO(PPO):
    """PPO whose policy carries an LSTM state; see the module docstring."""

    lstm_policy = True
    #: The per-env hidden state the last training rollout ended with (checkpointed).
    hidden_state: torch.Tensor | None = None

    def __init__(self, spec: PPOSpec, observation_space: Any, action_space: Any, **kwargs: Any) -> None:
        ANY_ACTIONS.check("PPO", observation_space, action_space)
        check_recurrent_observation_space(observation_space)
        kwargs["net_spec"] = lstm_network_spec(kwargs.get("net_spec"))
        super().__init__(spec, observation_space, action_space, **kwargs)

    # --- state -----------------------------------------------------------------------------------
    def _lstms(self) -> list[EvolvableLSTM]:
        actor, critic = self.nets["actor"], self.nets["critic"]
        encoders = [actor.encoder] if critic.encoder is actor.encoder else [actor.encoder, critic.encoder]
        return encoders  # type: ignore[return-value]

    @property
    def state_size(self) -> int:
        """Width of one env's flat hidden state (both LSTMs' when actor and critic have their own)."""
        return sum(e.state_size for e in self._lstms())

    def initial_hidden_state(self, n: int) -> torch.Tensor:
        """The zero hidden state of ``n`` envs (episode start), as AgileRL initialises it."""
        return torch.zeros(n, self.state_size, device=self.device)

    def _step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step for a batch: (policy output, value, next state)."""
        actor, critic = self.nets["actor"], self.nets["critic"]
        lstms = self._lstms()
        x = actor.preprocess(obs)
        if len(lstms) == 1:
            z, new = lstms[0].step(x, state)
            return actor.head(z), critic.head(z).squeeze(-1), new
        k = lstms[0].state_size
        za, sa = lstms[0].step(x, state[:, :k])
        zc, sc = lstms[1].step(x, state[:, k:])
        return actor.head(za), critic.head(zc).squeeze(-1), torch.cat([sa, sc], dim=1)

    @torch.inference_mode()
    def act_recurrent(
        self, obs: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions for a batch: (action, log-prob, value, next hidden state)."""
        out, value, new = self._step(obs, state)
        return (*self._act_from(out, value), new)

    @torch.inference_mode()
    def value_recurrent(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self._step(obs, state)[1]

    @torch.inference_mode()
    def greedy_recurrent(self, obs: np.ndarray, state: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
        """The greedy env action for a batch and the next hidden state."""
        out, _, new = self._step(self.obs_tensor(obs), state)
        return self._greedy_from(out), new

    # --- evaluation hooks (GymAlgorithm.test, predict) --------------------------------------------
    def initial_policy_state(self, n: int) -> torch.Tensor | None:
        return self.initial_hidden_state(n)

    def policy_step(self, obs: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        if state is None:
            return self.greedy_action(obs), None
        return self.greedy_recurrent(obs, state)

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = True
    ) -> tuple[Any, Any]:
        """As :meth:`SingleAgentInference.predict`; a recurrent policy takes and returns its state.

        ``state`` is what the previous call returned (``None``: episode start); ``episode_start``
        (bool per row) zeroes the rows whose episode just began, as Stable-Baselines3's does.
        """
        obs = _as_obs_array(self.observation_space, observation)
        batch = _is_batch(self.observation_space, obs)
        x = obs if batch else obs[None]
        normalizer = getattr(self, "normalizer", None)
        if normalizer is not None:  # frozen statistics: raw observations in (environment.normalize)
            x = normalizer.normalize_obs(x)
        if state is None:
            state = self.initial_hidden_state(x.shape[0])
        state = torch.as_tensor(state, dtype=torch.float32, device=self.device)
        if state.shape != (x.shape[0], self.state_size):
            raise AgileRLError(
                f"predict: state of shape {tuple(state.shape)} does not fit this policy: pass what the "
                f"previous predict returned, shape ({x.shape[0]}, {self.state_size}), or None"
            )
        if episode_start is not None:
            state = reset_rows(state, np.asarray(episode_start, dtype=bool).reshape(-1))
        if deterministic:
            actions, state = self.greedy_recurrent(x, state)
        else:
            with torch.inference_mode():
                out, value, state = self._step(self.obs_tensor(x), state)
                actions = self.env_action(self._act_from(out, value)[0])
        return (actions if batch else actions[0]), state

    def policy_module(self) -> torch.nn.Module:
        raise AgileRLError(
            "export-policy: recurrent PPO policies (LSTM encoder, recurrent: true) cannot be exported yet: "
            "the exported module takes one observation and no hidden state; use the checkpoint with "
            "agilerl eval or predict(obs, state)"
        )

    # --- update ----------------------------------------------------------------------------------
    def evaluate_sequences(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_prob, entropy, value)`` of ``(S, T)`` padded sequences from their initial states."""
        actor, critic = self.nets["actor"], self.nets["critic"]
        obs, state = mb["obs"], mb["state"]
        S, T = obs.shape[:2]
        x = actor.preprocess(obs.reshape(S * T, *obs.shape[2:])).view(S, T, -1)
        lstms = self._lstms()
        if len(lstms) == 1:
            za = zc = lstms[0].sequence(x, state)[0]
        else:
            k = lstms[0].state_size
            za = lstms[0].sequence(x, state[:, :k])[0]
            zc = lstms[1].sequence(x, state[:, k:])[0]
        out = actor.head(za.reshape(S * T, -1))
        value = critic.head(zc.reshape(S * T, -1)).view(S, T)
        actions = mb["actions"].reshape(S * T, *mb["actions"].shape[2:])
        log_prob, entropy = self._log_prob_entropy(out, actions)
        return log_prob.view(S, T), entropy.view(S, T), value

    def learn(self, buffer: RolloutBuffer) -> dict[str, float]:
        """Truncated BPTT: ``update_epochs`` passes of minibatch PPO over the rollout's sequences."""
        if not isinstance(buffer, RecurrentRolloutBuffer):
            raise TypeError("recurrent PPO learns from a RecurrentRolloutBuffer (hidden states per step)")
        data = buffer.sequences(self.spec.max_seq_len, self.spec.bptt_sequence_type)
        if not data:
            return {}
        opt = self.optimizers["optimizer"]
        return ppo_update(data, None, opt, self.flat, self.spec, seq_forward=self.evaluate_sequences)

    # --- checkpoints -----------------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        if self.hidden_state is None:
            return {}
        return {"hidden_state": self.hidden_state.detach().cpu().clone()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        saved = state.get("hidden_state")
        self.hidden_state = None if saved is None else saved.to(self.device)
