"""The gym plugin's two training engines (see ``docs/gym.md``, "Engines").

:mod:`agilerl_plugin_gym.engine.on_policy` (PPO, IPPO, A2C-style algorithms) and
:mod:`agilerl_plugin_gym.engine.off_policy` (DQN, DDPG, TD3, MADDPG, MATD3) hold every piece of
training logic the single-agent and multi-agent algorithms share; :mod:`.common` the per-call env
seeding and episode statistics. Single- and multi-agent strategies call the same functions: only
the env loop differs (a gymnasium vector env vs a PettingZoo vector env).
"""
