"""agilerl plugin: OpenEnv.

* ``env_url`` rollout source for the LLM plugin: train against OpenEnv servers
  (:mod:`agilerl_plugin_openenv.client`);
* ``agilerl serve-env ENTRYPOINT``: serve a text env as an OpenEnv server
  (:mod:`agilerl_plugin_openenv.server`).

Importing this package is cheap; openenv-core is imported only when one of the two is used.
"""

__version__ = "0.1.0"
