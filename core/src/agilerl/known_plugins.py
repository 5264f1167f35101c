"""Which distribution we publish provides which name: the data behind "pip install X" hints.

A plugin that is not installed cannot say what it would provide, so core keeps this one small table
(read by :mod:`agilerl.errors` and :mod:`agilerl.compat`, no logic of its own).
``tests/test_architecture.py`` checks it against what the installed plugins register: every
algorithm, env type and paradigm each one registers, and the seed API names it provides, exactly.
"""

from __future__ import annotations

#: distribution -> what it registers: ``algorithms`` (``algorithm.name``), ``env_types``
#: (``environment.env_type``), ``paradigms`` (builders) and ``seed_names`` (the seed API's names it
#: provides: spec classes and env factories importable from ``agilerl.models``).
KNOWN_PLUGINS: dict[str, dict[str, tuple[str, ...]]] = {
    "agilerl-plugin-gym": {
        "algorithms": (
            "A2C",
            "CQN",
            "DDPG",
            "DQN",
            "IPPO",
            "MADDPG",
            "MATD3",
            "PPO",
            "RainbowDQN",
            "SAC",
            "TD3",
            "TQC",
        ),
        "env_types": ("gym", "offline"),
        "paradigms": ("multi_agent", "single_agent"),
        "seed_names": (
            "GymEnvSpec",
            "MultiAgentAlgorithmSpec",
            "OfflineEnvSpec",
            "SingleAgentAlgorithmSpec",
            "make_gym_env",
            "make_pz_env",
            "make_single_env",
        ),
    },
    "agilerl-plugin-bandit": {
        "algorithms": ("NeuralTS", "NeuralUCB"),
        "env_types": ("bandit",),
        "paradigms": ("bandit",),
        "seed_names": ("BanditEnvSpec", "make_bandit_env"),
    },
    "agilerl-plugin-llm": {
        "algorithms": ("CISPO", "DPO", "GRPO", "GSPO", "LLMPPO", "LLMREINFORCE", "RLOO", "RewardModel", "SFT"),
        "env_types": ("dataset", "multiturn", "preference", "reasoning", "rollout", "sft"),
        "paradigms": ("llm",),
        "seed_names": (
            "LLMAlgorithmSpec",
            "LLMEnvSpec",
            "LoraConfigDict",
            "make_llm_env",
            "make_rollout_env_factory",
        ),
    },
}

#: Any of those names -> the distribution to install for it.
KNOWN_PROVIDERS: dict[str, str] = {
    name: dist for dist, kinds in KNOWN_PLUGINS.items() for names in kinds.values() for name in names
}
