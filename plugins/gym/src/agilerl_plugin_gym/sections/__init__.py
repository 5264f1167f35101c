"""The manifest sections this plugin owns (pydantic only: importing them imports no torch).

* :mod:`.encoders` — the encoder kinds of ``network.encoder_config`` and their table;
* :mod:`.network` — the ``network`` section;
* :mod:`.replay_buffer` — the ``replay_buffer`` section;
* :mod:`.training` — the ``training`` fields only RL algorithms read.

``hooks.agilerl_register_sections`` hands them to core; ``agilerl.models.NetworkSpec`` (the seed
API's name) resolves here.
"""

from __future__ import annotations

from agilerl_plugin_gym.sections.encoders import (
    ENCODERS,
    CnnLstmSpec,
    CnnSpec,
    EncoderKind,
    LstmSpec,
    MlpSpec,
    MultiInputSpec,
    SimbaSpec,
    infer_encoder_arch,
    register_encoder,
)
from agilerl_plugin_gym.sections.network import EncoderSpec, NetworkSpec
from agilerl_plugin_gym.sections.replay_buffer import NStepArgs, PerArgs, ReplayBufferSpec
from agilerl_plugin_gym.sections.training import RLTrainingFields

__all__ = [
    "ENCODERS",
    "CnnLstmSpec",
    "CnnSpec",
    "EncoderKind",
    "EncoderSpec",
    "LstmSpec",
    "MlpSpec",
    "MultiInputSpec",
    "NStepArgs",
    "NetworkSpec",
    "PerArgs",
    "RLTrainingFields",
    "ReplayBufferSpec",
    "SimbaSpec",
    "infer_encoder_arch",
    "register_encoder",
]
