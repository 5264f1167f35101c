"""The gym plugin's optimizers under their public name (other RL plugins import them from here).

They live with the other fast paths in :mod:`agilerl_plugin_gym.fast.optim`.
"""

from agilerl_plugin_gym.fast.optim import Adam, FlatAdam, FlatParameters, RMSprop, inference_mode, no_grad

__all__ = ["Adam", "FlatAdam", "FlatParameters", "RMSprop", "inference_mode", "no_grad"]
