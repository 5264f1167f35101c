"""The gym plugin's two training engines (see ``docs/gym.md``, "Engines").

:mod:`agilerl_plugin_gym.engine.on_policy` (PPO, IPPO, A2C-style algorithms) owns rollout
collection and the learn loop, as Stable-Baselines3's ``OnPolicyAlgorithm`` does: its engines
(``OnPolicyEngine`` for gymnasium vector envs, ``MultiAgentOnPolicyEngine`` for PettingZoo ones)
step the env, fill rollout buffers, compute GAE (:mod:`.advantages`) and call the algorithm's
``learn``; the PPO loss itself is PPO's (:mod:`agilerl_plugin_gym.ppo_update`, shared with IPPO).
:mod:`agilerl_plugin_gym.engine.off_policy` (DQN, DDPG, TD3, MADDPG, MATD3) holds replay state, the
update schedule, gradient steps and target updates, which the off-policy strategies' act-store-learn
loops call; :mod:`.replay_per` prioritized replay and n-step returns; :mod:`.recurrent` recurrent
rollouts; :mod:`.common` the per-call env seeding and episode statistics.
"""
