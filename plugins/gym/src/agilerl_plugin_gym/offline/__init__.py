"""Offline RL: train from a fixed dataset of transitions, evaluate in the env (``docs/gym.md``, "Offline RL").

* :mod:`.specs` — ``OfflineEnvSpec`` (``env_type: offline``) and ``CQNSpec`` (pydantic only).
* :mod:`.datasets` — AgileRL's HDF5 format (h5py) and local Minari datasets: validation and loading.
* :mod:`.strategy` — the ``single_agent/offline`` strategy (gradient steps on the dataset; the env
  is only used for evaluation), built on the off-policy engine.
* :mod:`.cqn` — Conservative Q-Network (CQL applied to DQN), AgileRL's ``CQN``.
"""
