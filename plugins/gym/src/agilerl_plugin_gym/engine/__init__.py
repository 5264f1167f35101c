"""The gym plugin's two training engines (see ``docs/gym.md``, "Engines").

:mod:`agilerl_plugin_gym.engine.on_policy` (PPO, IPPO, A2C-style algorithms) owns rollout
collection and the learn loop, as Stable-Baselines3's ``OnPolicyAlgorithm`` does: its engines
(``OnPolicyEngine`` for gymnasium vector envs, ``MultiAgentOnPolicyEngine`` for PettingZoo ones)
step the env, fill rollout buffers, compute GAE (:func:`agilerl_plugin_gym.buffers.gae`) and call the algorithm's
``learn``; the PPO loss itself is PPO's (:mod:`agilerl_plugin_gym.ppo_update`, shared with IPPO).
:mod:`agilerl_plugin_gym.engine.off_policy` (DQN, RainbowDQN, DDPG, TD3, MADDPG, MATD3) owns collection
and the learn loop likewise, as SB3's ``OffPolicyAlgorithm``: its engines (``OffPolicyEngine``,
``MultiAgentOffPolicyEngine``) act, step the env, store transitions in the population's replay
buffer and run gradient steps on the update schedule; target updates and action noise are there too.
:mod:`.replay_per` prioritized replay and n-step returns; :mod:`.recurrent` recurrent
rollouts; :mod:`.common` the per-call env seeding and episode statistics.
"""
