"""Evolvable networks built from the manifest's ``network`` section (public API, shared by plugins).

A network is an *encoder* (MLP for vector observations, CNN for H x W x C images) that maps an
observation to a ``latent_dim`` vector, followed by a *head* (an MLP) that maps the latent vector to
the outputs an algorithm needs (action logits, Q-values, a value, ...)::

    from agilerl_plugin_gym.sections import NetworkSpec
    from agilerl_plugin_gym.networks import EvolvableNetwork

    net = EvolvableNetwork.from_spec(NetworkSpec(latent_dim=64), observation_space, out_dim=2)
    q = net(obs_tensor)                            # (batch, 2)

Every module here is *evolvable*: it can grow or shrink without being rebuilt by hand, which is what
architecture mutation (evolutionary HPO) needs. Growth is function-preserving where the maths allows:

* :meth:`EvolvableMLP.add_layer` inserts a hidden layer initialised to the identity, so with a
  ReLU-family activation and no layer norm the network computes exactly the same function;
* :meth:`EvolvableMLP.add_node` adds units whose outgoing weights are zero: the output is unchanged;
* :meth:`EvolvableCNN.add_channel` / :meth:`EvolvableCNN.add_layer` do the same for convolutions;
* removals cannot preserve the function; they keep the surviving weights (removing the last hidden
  layer folds it linearly into the next one) so the network starts close to where it was.

The encoder's output size (``latent_dim``) never changes under encoder mutations, so heads stay
valid and a shared encoder can be mutated once for every head that reads it. Only the
``latent.add_node`` / ``latent.remove_node`` mutations (offered when the manifest gives
``min_latent_dim``/``max_latent_dim``) resize it, encoder output and head input together
(:meth:`EvolvableNetwork.set_latent_dim`). Activation mutation swaps the hidden activations and
keeps every weight (:meth:`EvolvableNetwork.set_activation`): any encoder or head with
``activation`` and ``set_activation(name, *, output)`` takes part.

:meth:`EvolvableNetwork.mutation_methods` lists the mutations a network supports as strings such as
``"encoder.add_layer"``; :meth:`EvolvableNetwork.apply_mutation` applies one.
:func:`add_parameter_noise` is the "parameter mutation" operator (Gaussian noise on weights).
:meth:`EvolvableNetwork.arch` / :meth:`EvolvableNetwork.set_arch` save and restore the current shape
so a mutated network can be rebuilt before ``load_state_dict`` (checkpoint resume).

The package is roomed by job; each module imports only the ones above it, never this package:

* :mod:`.layers` — activations, input sizes, initialisation, weight-preserving resizes;
* :mod:`.mlp`, :mod:`.cnn`, :mod:`.simba`, :mod:`.lstm` — one encoder kind each;
* :mod:`.multi_input` — one sub-encoder per part of a Dict/Tuple observation;
* :mod:`.factory` — the built-in kinds' builders and :func:`build_encoder` (the kinds' table is
  :data:`agilerl_plugin_gym.sections.encoders.ENCODERS`);
* :mod:`.network` — :class:`EvolvableNetwork`, encoder + head;
* :mod:`.mutation` — parameter noise and the activation draw;
* :mod:`.rainbow` — RainbowDQN's noisy, dueling, distributional network.
"""

from __future__ import annotations

from agilerl_plugin_gym.networks.cnn import EvolvableCNN
from agilerl_plugin_gym.networks.factory import build_encoder, default_network_spec, encoder_builder, latent_range
from agilerl_plugin_gym.networks.layers import activation_layer, image_chw, obs_dim
from agilerl_plugin_gym.networks.lstm import EvolvableLSTM
from agilerl_plugin_gym.networks.mlp import EvolvableMLP
from agilerl_plugin_gym.networks.multi_input import EvolvableMultiInput
from agilerl_plugin_gym.networks.mutation import add_parameter_noise, pick_activation
from agilerl_plugin_gym.networks.network import EvolvableNetwork
from agilerl_plugin_gym.networks.simba import EvolvableSimBa
from agilerl_plugin_gym.space_kinds import is_image_space

__all__ = [
    "EvolvableCNN",
    "EvolvableLSTM",
    "EvolvableMLP",
    "EvolvableMultiInput",
    "EvolvableNetwork",
    "EvolvableSimBa",
    "activation_layer",
    "add_parameter_noise",
    "build_encoder",
    "default_network_spec",
    "image_chw",
    "is_image_space",
    "latent_range",
    "obs_dim",
    "encoder_builder",
    "pick_activation",
]
