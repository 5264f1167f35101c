"""Regenerate the bad-input corpus: python tests/data/bad/make_corpus.py (from anywhere).

Each case is a small valid manifest of one paradigm with one thing broken; the file's second line
(`# expect: ...`) is text the validator's output must contain (the field path, or file:line:col).
"""

import copy
import json
import struct
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent
T = "tests/data/bad/tables"
PPO = {
    "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32},
    "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
    "training": {"max_steps": 256, "evo_steps": 128, "progress": False},
}
DQN = {
    "algorithm": {"name": "DQN", "batch_size": 32, "learn_step": 4},
    "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
    "replay_buffer": {"max_size": 1000},
    "training": {"max_steps": 256, "evo_steps": 128, "progress": False},
}
TD3 = {
    "algorithm": {"name": "TD3", "batch_size": 32},
    "environment": {"name": "Pendulum-v1", "num_envs": 1, "sync": True},
    "training": {"max_steps": 256, "progress": False},
}
IPPO = {
    "algorithm": {"name": "IPPO", "learn_step": 128, "batch_size": 32},
    "environment": {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 2, "env_config": {"max_cycles": 25}},
    "training": {"max_steps": 256, "progress": False},
}
MADDPG = {
    "algorithm": {"name": "MADDPG", "batch_size": 32},
    "environment": {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 2},
    "training": {"max_steps": 256, "progress": False},
}
UCB = {
    "algorithm": {"name": "NeuralUCB", "batch_size": 16},
    "environment": {"env_type": "bandit", "name": "iris"},
    "training": {"max_steps": 200, "progress": False},
}
TABLE = {
    "algorithm": {"name": "NeuralTS", "batch_size": 16},
    "environment": {"env_type": "bandit", "features": f"{T}/features_ok.csv", "targets": f"{T}/targets3.csv"},
    "training": {"max_steps": 200, "progress": False},
}
SFT = {
    "algorithm": {"name": "SFT", "batch_size": 4},
    "network": {"pretrained_model_name_or_path": "tests/data/bad/models/ok", "max_context_length": 64},
    "environment": {"env_type": "dataset", "dataset_path": "examples/data/llm/sft_tiny.jsonl"},
    "training": {"max_steps": 10, "progress": False},
}
GRPO = {
    "algorithm": {"name": "GRPO", "batch_size": 4, "group_size": 4},
    "network": {"pretrained_model_name_or_path": "tests/data/bad/models/ok", "max_context_length": 128},
    "environment": {
        "env_type": "rollout",
        "dataset_path": "examples/llm/say_eight.jsonl",
        "rubric_file_path": "examples/llm/say_word_rubric.py",
    },
    "training": {"max_steps": 10, "progress": False},
}
CUSTOM = {
    "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32},
    "environment": {"name": "Bad", "custom": True, "path": "tests/data/bad/envs", "num_envs": 1, "sync": True},
    "training": {"max_steps": 128, "progress": False},
}

DEL = object()


def setp(d, path, value):
    node = d
    parts = path.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    if value is DEL:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


cases = []  # (name, base, {path: value}, expect, why)


def c(name, base, changes, expect, why):
    cases.append((name, base, changes, expect, why))


# --- values: types, ranges, non-finite ---
# fmt: off
c("ppo_lr_inf", PPO, {"algorithm.lr": float("inf")}, "algorithm.lr", "a non-finite learning rate trains to NaN")
c("ppo_lr_nan", PPO, {"algorithm.lr": float("nan")}, "algorithm.lr", "NaN is not a learning rate")
c("ppo_gamma_neg_inf", PPO, {"algorithm.gamma": float("-inf")}, "algorithm.gamma", "non-finite discount")
c("ppo_target_score_inf", PPO, {"training.target_score": float("inf")}, "training.target_score", "an infinite target never stops a run")
c("ppo_gamma_above_one", PPO, {"algorithm.gamma": 1.5}, "algorithm.gamma", "gamma > 1")
c("ppo_lr_string", PPO, {"algorithm.lr": "fast"}, "algorithm.lr", "a string for a float")
c("ppo_batch_zero", PPO, {"algorithm.batch_size": 0}, "algorithm.batch_size", "batch size 0")
c("ppo_num_envs_zero", PPO, {"environment.num_envs": 0}, "environment.num_envs", "no envs")
c("ppo_max_steps_negative", PPO, {"training.max_steps": -5}, "training.max_steps", "negative budget")
c("ppo_pop_size_zero", PPO, {"training.pop_size": 0}, "training.pop_size", "empty population")
c("ppo_max_steps_float", PPO, {"training.max_steps": 1.5}, "training.max_steps", "fractional step budget")
c("ppo_unknown_field", PPO, {"algorithm.learnstep": 64}, "algorithm.learnstep", "typo'd field")
c("ppo_unknown_section", PPO, {"trainng": {"max_steps": 5}}, "trainng", "typo'd section")
c("ppo_unknown_training_field", PPO, {"training.max_step": 5}, "training.max_step", "typo'd training field")
c("ppo_unknown_algorithm", PPO, {"algorithm.name": "PPOO"}, "algorithm.name", "unknown algorithm")
c("ppo_no_algorithm_name", PPO, {"algorithm.name": DEL}, "algorithm.name", "no algorithm name")
c("ppo_environment_list", PPO, {"environment": ["CartPole-v1"]}, "environment: must be a mapping", "environment is not a mapping")
c("ppo_unknown_gym_id", PPO, {"environment.name": "CartPoel-v1"}, "environment.name", "unknown gymnasium id")
c("ppo_wrong_api_version", PPO, {"apiVersion": "agilerl.com/v9"}, "apiVersion", "unknown manifest version")
c("ppo_continuous_actions_for_dqn", DQN, {"environment.name": "Pendulum-v1"}, "environment: DQN needs a Discrete action space", "DQN on a continuous action space")
c("ppo_encoder_arch_unknown", PPO, {"network": {"encoder_config": {"arch": "transformer"}}}, "network: encoder_config.arch 'transformer' is not an encoder kind", "unknown encoder")
c("ppo_mlp_ranges", PPO, {"network": {"encoder_config": {"arch": "mlp", "min_mlp_nodes": 512, "max_mlp_nodes": 8}}}, "network.encoder_config: min_mlp_nodes must be <= max_mlp_nodes", "min above max")
c("ppo_cnn_channel_range_inverted", PPO, {"network": {"encoder_config": {"arch": "cnn", "min_channel_size": 64, "max_channel_size": 8}}}, "network.encoder_config: min_channel_size (64) must be <= max_channel_size (8)", "CNN channel range min above max")
c("ppo_lstm_range_inverted", PPO, {"algorithm.recurrent": True, "network": {"encoder_config": {"arch": "lstm", "min_hidden_state_size": 128, "max_hidden_state_size": 16}}}, "network.encoder_config: min_hidden_state_size (128) must be <= max_hidden_state_size (16)", "LSTM range inverted")
c("ppo_lstm_layers_above_max", PPO, {"algorithm.recurrent": True, "network": {"encoder_config": {"arch": "lstm", "num_layers": 4, "max_layers": 2}}}, "network.encoder_config: num_layers (4) must lie in [min_layers, max_layers] = [1, 2]", "LSTM num_layers above its max")
c("ppo_llm_field_on_rl", PPO, {"network": {"pretrained_model_name_or_path": "gpt2"}}, "network.pretrained_model_name_or_path", "an LLM field on PPO")
c("ppo_evo_epochs_without_num_epochs", PPO, {"training.evo_epochs": 2}, "training: evo_epochs needs num_epochs", "evo_epochs needs num_epochs")
# --- cross-field ---
c("ppo_tournament_larger_than_population", PPO, {"training.pop_size": 3, "tournament_selection": {"tournament_size": 5}}, "tournament_selection.tournament_size", "tournament > population")
c("ppo_mutation_all_zero", PPO, { "training.pop_size": 2, "mutation": {"probabilities": {"no_mut": 0, "arch_mut": 0, "new_layer": 0, "params_mut": 0, "rl_hp_mut": 0}}, }, "mutation.probabilities", "no operator can be picked")
c("ppo_activation_selection_unknown", PPO, { "training.pop_size": 2, "mutation": { "probabilities": {"no_mut": 0, "arch_mut": 0, "new_layer": 0, "params_mut": 0, "rl_hp_mut": 0, "act_mut": 1}, "activation_selection": ["ReLU", "Swish"] }, }, "mutation.activation_selection: PPO's networks have no activation 'Swish'", "an activation the networks do not have")
c("ppo_mutation_negative_weight", PPO, {"mutation": {"probabilities": {"no_mut": -1}}}, "mutation.probabilities.no_mut", "negative weight")
c("ppo_hp_range_inverted", PPO, {"mutation": {"rl_hp_selection": {"lr": {"min": 1.0, "max": 0.1}}}}, "mutation.rl_hp_selection.lr", "min > max")
c("ppo_hp_not_numeric", PPO, {"mutation": {"rl_hp_selection": {"normalize_images": {"min": 0, "max": 1}}}}, "mutation.rl_hp_selection.normalize_images", "mutating a bool")
c("ppo_hp_range_inf", PPO, {"mutation": {"rl_hp_selection": {"lr": {"min": 0.0001, "max": float("inf")}}}}, "mutation.rl_hp_selection.lr.max", "infinite range")
c("ppo_batch_larger_than_rollout", PPO, {"algorithm.batch_size": 1000000000000}, "algorithm.batch_size", "batch > one rollout")
c("dqn_batch_larger_than_buffer", DQN, {"algorithm.batch_size": 5000}, "algorithm.batch_size", "batch > replay buffer")
c("dqn_batch_larger_than_budget", DQN, {"algorithm.batch_size": 500, "replay_buffer.max_size": 100000}, "algorithm.batch_size", "batch > step budget")
c("td3_batch_1e12", TD3, {"algorithm.batch_size": 1000000000000}, "algorithm.batch_size", "batch 1e12 never takes a step")
c("td3_tau_inf", TD3, {"algorithm.tau": float("inf")}, "algorithm.tau", "non-finite tau")
c("dqn_experience_sharing_false", DQN, {"training.experience_sharing": False}, "training.experience_sharing", "off-policy populations share one buffer")
c("ippo_batch_larger_than_rollout", IPPO, {"algorithm.batch_size": 4096}, "algorithm.batch_size", "batch > rollout")
c("maddpg_batch_larger_than_buffer", MADDPG, {"replay_buffer": {"max_size": 16}}, "algorithm.batch_size", "batch > buffer")
c("ippo_gym_id_for_multi_agent", IPPO, {"environment.name": "CartPole-v1"}, "environment.name", "a single-agent env for IPPO")
c("maddpg_lr_nan", MADDPG, {"algorithm.lr_actor": float("nan")}, "algorithm.lr_actor", "NaN learning rate")
c("ippo_bad_net_config", IPPO, {"algorithm.net_config": {"speaker": {"latent_dim": 0}}}, "algorithm.net_config.speaker.latent_dim", "per-agent config invalid")
# --- machine: device and resources ---
c("ppo_device_unknown", PPO, {"training.device": "gpu"}, "training.device", "unknown device name")
c("ppo_device_cuda_missing", PPO, {"training.device": "cuda:7"}, "training.device", "a CUDA device this machine lacks (cuda:7)")
c("ppo_num_envs_huge", PPO, {"environment.num_envs": 10000000000}, "environment.num_envs", "1e10 envs cannot fit in memory")
c("ppo_async_num_envs_huge", PPO, {"environment.num_envs": 100000, "environment.sync": False}, "environment.num_envs: needs at least", "100000 worker processes cannot fit in memory")
c("ppo_pop_size_huge", PPO, {"training.pop_size": 10000000000}, "training.pop_size", "1e10 agents cannot fit in memory")
c("ppo_learn_step_huge", PPO, {"algorithm.learn_step": 100000000000000, "algorithm.batch_size": 32}, "algorithm.learn_step", "a rollout larger than memory")
c("dqn_buffer_huge", DQN, {"replay_buffer.max_size": 100000000000000}, "replay_buffer.max_size", "a replay buffer larger than memory")
# --- bandit ---
c("bandit_features_inf", TABLE, {"environment.features": f"{T}/features_inf.csv"}, "environment.features", "inf in a feature column (names file, line and column)")
c("bandit_features_nan", TABLE, {"environment.features": f"{T}/features_nan.csv"}, "environment.features", "NaN in a feature column")
c("bandit_features_empty", TABLE, {"environment.features": f"{T}/empty.csv"}, "environment.features", "an empty file")
c("bandit_features_header_only", TABLE, {"environment.features": f"{T}/header_only.csv"}, "environment.features", "no rows")
c("bandit_row_count_mismatch", TABLE, {"environment.targets": f"{T}/targets2.csv"}, "environment.targets", "3 feature rows, 2 targets")
c("bandit_one_class", TABLE, {"environment.targets": f"{T}/targets_one_class.csv"}, "environment.targets", "one arm")
c("bandit_targets_missing_values", TABLE, {"environment.targets": f"{T}/targets_missing.csv"}, "environment.targets", "a missing target")
c("bandit_features_missing_file", TABLE, {"environment.features": f"{T}/nope.csv"}, "environment.features", "no such file")
c("bandit_target_column_absent", TABLE, {"environment.targets": DEL, "environment.env_config": {"target_column": "label"}}, "environment.env_config.target_column", "no such column")
c("bandit_categorical_absent", TABLE, {"environment.env_config": {"categorical": ["colour"]}}, "environment.env_config.categorical", "no such column")
c("bandit_no_data", UCB, {"environment.name": "not_a_dataset"}, "environment.name", "no table, no builtin dataset")
c("bandit_both_sources", TABLE, {"environment.entrypoint": "m:f"}, "environment: give either entrypoint", "entrypoint and tables")
c("bandit_lamb_inf", UCB, {"algorithm.lamb": float("inf")}, "algorithm.lamb", "non-finite prior")
c("bandit_cnn_encoder", UCB, {"network": {"encoder_config": {"arch": "cnn"}}}, "network.encoder_config.arch", "a CNN on a table")
c("bandit_tournament_larger_than_population", UCB, {"training.pop_size": 2, "tournament_selection": {"tournament_size": 4}}, "tournament_selection.tournament_size", "tournament > population")
# --- LLM ---
c("sft_lr_inf", SFT, {"algorithm.lr": float("inf")}, "algorithm.lr", "non-finite LLM learning rate")
c("sft_beta_nan", SFT, {"algorithm.beta": float("nan")}, "algorithm.beta", "NaN beta")
c("sft_lora_r_zero", SFT, {"network.lora_config": {"lora_r": 0}}, "network.lora_config.lora_r", "LoRA rank 0")
c("sft_mini_batch_larger", SFT, {"algorithm.mini_batch_size": 8}, "algorithm: mini_batch_size (8) cannot exceed batch_size", "mini batch > batch")
c("sft_arch_mutation", SFT, {"training.pop_size": 2, "mutation": {"probabilities": {"arch_mut": 0.5}}}, "mutation.probabilities: SFT does not support architecture mutation (arch_mut)", "LLMs mutate hyperparameters only")
c("grpo_group_size_zero", GRPO, {"algorithm.group_size": 0}, "algorithm.group_size", "no completions per prompt")
c("grpo_temperature_inf", GRPO, {"algorithm.temperature": float("inf")}, "algorithm.temperature", "infinite temperature")
c("grpo_device_cuda_missing", GRPO, {"training.device": "cuda:7"}, "training.device", "a CUDA device this machine lacks")
c("grpo_tournament_larger_than_population", GRPO, {"training.pop_size": 2, "tournament_selection": {"tournament_size": 3}}, "tournament_selection.tournament_size", "tournament > population")
J = "tests/data/bad/jsonl"
DPO = {**SFT, "algorithm": {"name": "DPO", "batch_size": 4}}
for stem, expect in [
    ("empty", "empty.jsonl: the file has no rows (it is empty); put the rows in it"),
    ("missing_response", "missing_response.jsonl:2: no column 'response'"),
    ("nan", "nan.jsonl:1: not a JSON object: each line of a .jsonl file is one JSON object ({\"column\": value, ...}); fix or delete this line (NaN is not valid JSON)"),
    ("not_json", "not_json.jsonl:2: not a JSON object: each line of a .jsonl file is one JSON object"),
    ("number", "number.jsonl:1: column 'response' is int (42), not text; write it as a string"),
]:
    c(
        f"sft_dataset_{stem}",
        SFT,
        {"environment.dataset_path": f"{J}/{stem}.jsonl"},
        f"environment.dataset_path: {J}/{expect}",
        f"an SFT dataset: {stem.replace('_', ' ')}",
    )
c("dpo_dataset_no_rejected", DPO, {"environment.dataset_path": f"{J}/no_rejected.jsonl"}, f"environment.dataset_path: {J}/no_rejected.jsonl:1: no column 'rejected'", "a preference row without rejected")
c("dpo_dataset_chat_roles", DPO, {"environment.dataset_path": f"{J}/chat_roles.jsonl"}, f"environment.dataset_path: {J}/chat_roles.jsonl:1: column 'chosen': messages 0 and 1 are both user messages", "a conversational pair whose turns do not alternate")
c("grpo_dataset_chat_unknown_role", GRPO, {"environment.dataset_path": f"{J}/chat_unknown_role.jsonl"}, f"{J}/chat_unknown_role.jsonl:1: column 'prompt': message 0 has role 'bot'", "a conversational prompt with a role chat templates do not know")
# --- custom envs (checked like SB3's check_env / PettingZoo's api test) ---
for cls, what in [
    ("WrongShape", "shape (4,)"),
    ("WrongDtype", "dtype float64"),
    ("OutOfBounds", "outside the declared space"),
    ("NaNObservation", "non-finite observation"),
    ("ResetWithoutInfo", "(observation, info)"),
    ("OldStepApi", "(observation, reward, terminated, truncated, info)"),
    ("RewardIsAString", "a reward is a float"),
    ("RaisesOnStep", "step is broken"),
]:
    name = "custom_env_" + "".join("_" + ch.lower() if ch.isupper() else ch for ch in cls).lstrip("_")
    c(
        name,
        CUSTOM,
        {"environment.entrypoint": f"bad_envs:{cls}"},
        "environment: the custom env fails the env API check",
        f"custom env: {what}",
    )
c("custom_env_no_spaces", CUSTOM, {"environment.entrypoint": "bad_envs:NoSpaces"}, "environment: making the custom env raised", "custom env without spaces")
c("custom_env_missing_module", CUSTOM, {"environment.entrypoint": "no_such_module:Env"}, "environment.entrypoint", "entrypoint does not import")
c("custom_env_path_not_a_dir", CUSTOM, {"environment.entrypoint": "bad_envs:WrongShape", "environment.path": "tests/data/bad/nope"}, "environment.path", "path is not a directory")
c("custom_pz_env_missing_agent_obs", IPPO, { "environment.entrypoint": "bad_envs:missing_agent_observation", "environment.path": "tests/data/bad/envs", "environment.name": "missing_obs", }, "environment: the custom env fails the env API check: reset() returned observations for", "a parallel env that omits an agent's observation")
# --- offline (CQN): datasets in AgileRL's HDF5 format and Minari ids (files written below) ---
H = "tests/data/bad/hdf5"
CQN = {
    "algorithm": {"name": "CQN", "batch_size": 4},
    "environment": {"name": "CartPole-v1", "num_envs": 2, "dataset_path": f"{H}/ok.h5"},
    "training": {"max_steps": 64, "progress": False},
}
c("cqn_dataset_missing_file", CQN, {"environment.dataset_path": f"{H}/nope.h5"}, "environment.dataset_path: no such file: tests/data/bad/hdf5/nope.h5", "no such dataset file")
c("cqn_dataset_empty_file", CQN, {"environment.dataset_path": f"{H}/empty.h5"}, "environment.dataset_path: tests/data/bad/hdf5/empty.h5 is empty (0 bytes)", "an empty dataset file")
c("cqn_dataset_not_hdf5", CQN, {"environment.dataset_path": f"{H}/not_hdf5.h5"}, "environment.dataset_path: tests/data/bad/hdf5/not_hdf5.h5 is not a readable HDF5 file", "a text file named .h5")
c("cqn_dataset_no_rewards", CQN, {"environment.dataset_path": f"{H}/no_rewards.h5"}, "no_rewards.h5 has no 'rewards' dataset", "a missing key")
c("cqn_dataset_obs_shape", CQN, {"environment.dataset_path": f"{H}/obs_shape.h5"}, "obs_shape.h5: 'observations' rows have shape (3,), but the env's observation space", "observations of another env")
c("cqn_dataset_action_out_of_range", CQN, {"environment.dataset_path": f"{H}/action_out_of_range.h5"}, "action_out_of_range.h5: 'actions': action 2 at row 3 is outside the env's action space Discrete(2)", "an action CartPole does not have")
c("cqn_dataset_length_mismatch", CQN, {"environment.dataset_path": f"{H}/length_mismatch.h5"}, "length_mismatch.h5: 'terminals' has 7 rows but 'rewards' has 8", "keys of different lengths")
c("cqn_dataset_no_rows", CQN, {"environment.dataset_path": f"{H}/no_rows.h5"}, "no_rows.h5 holds no transitions", "a dataset without rows")
c("cqn_dataset_nan_reward", CQN, {"environment.dataset_path": f"{H}/nan_reward.h5"}, "nan_reward.h5: 'rewards': a non-finite value (NaN or inf) at row 2", "a NaN reward")
c("cqn_batch_larger_than_dataset", CQN, {"algorithm.batch_size": 64}, "algorithm.batch_size: 64 is larger than the dataset (7 transitions", "batch > dataset")
c("cqn_minari_not_local", CQN, {"environment.dataset_path": DEL, "environment.minari_dataset_id": "cartpole/not-here-v0"}, "environment.minari_dataset_id: Minari dataset 'cartpole/not-here-v0' is not in the local Minari directory", "a Minari id that is not on this machine")
c("cqn_minari_remote", CQN, {"environment.dataset_path": DEL, "environment.minari_dataset_id": "cartpole/random-v0", "environment.remote": True}, "environment.remote: downloading Minari datasets is not supported", "remote: true would download")
c("cqn_no_dataset", CQN, {"environment.dataset_path": DEL}, "environment: an offline env needs a dataset", "no dataset source")
c("cqn_both_sources", CQN, {"environment.minari_dataset_id": "cartpole/random-v0"}, "environment: give either dataset_path", "two dataset sources")
c("cqn_gym_env_type", CQN, {"environment.env_type": "gym", "environment.dataset_path": DEL}, "environment.env_type: CQN trains on offline environments", "CQN on an online env")
c("cqn_continuous_actions", CQN, {"environment.name": "Pendulum-v1"}, "environment: CQN needs a Discrete action space", "CQN on continuous actions")
# --- run-time needs checked at validation (issue 27) ---
MFPBT = {"training.pop_size": 6, "mutation": {"probabilities": {"no_mut": 1.0}}}
c("ppo_pop_size_10000", PPO, {"training.pop_size": 10000}, "training.pop_size: 10000 members is more than a run takes (at most 1024)", "a population no generation would finish (passes the memory floor)")
c("ppo_mfpbt_strategy_typo", PPO, {**MFPBT, "selection_strategy": {"strategy": "multi_frequncy", "n_subpopulations": 2}}, "selection_strategy.strategy: unknown strategy 'multi_frequncy'; did you mean 'multi_frequency'?", "a typo in the MF-PBT strategy name")
c("ppo_mfpbt_pop_not_divisible", PPO, {**MFPBT, "training.pop_size": 7, "selection_strategy": {"strategy": "multi_frequency", "n_subpopulations": 2}}, "selection_strategy: training.pop_size (7) must split into 2 sub-populations", "MF-PBT sub-populations that do not divide the population")
c("ppo_list_for_a_number", PPO, {"algorithm.learn_step": [64]}, "algorithm.learn_step: Input should be a valid integer (got [64]); this field takes one value, not a list", "a list where one number goes (as --set gives it)")
c("ppo_comma_text_for_a_number", PPO, {"algorithm.learn_step": "64,64"}, "algorithm.learn_step: Input should be a valid integer, unable to parse string as an integer (got '64,64'); this field takes one value, not a list", "comma-separated text where one number goes (--set algorithm.learn_step=64,64)")
c("ppo_comma_text_for_a_list", PPO, {"network": {"encoder_config": {"hidden_size": "64,64"}}}, "network.encoder_config.hidden_size: Input should be a valid list (got '64,64'); write a list in brackets", "a comma-separated string where a list goes (--set x=64,64)")
c("ppo_ray_cpus_per_member_huge", PPO, {"training.backend": "ray", "training.num_cpus_per_member": 100000}, "training.num_cpus_per_member: 100000 CPUs per member, but this machine has", "a Ray worker asking for more CPUs than the machine has (it would wait forever)")
# --- LLM inputs: the model directory, rollout rows and the rubric (files written below) ---
M, R, RJ = "tests/data/bad/models", "tests/data/bad/rubrics", "tests/data/bad/jsonl"
for base, prefix in ((GRPO, "grpo"), (SFT, "sft")):
    c(f"{prefix}_no_model", base, {"network.pretrained_model_name_or_path": DEL}, "network.pretrained_model_name_or_path: required", "no model at all")
c("grpo_model_hub_id_not_cached", GRPO, {"network.pretrained_model_name_or_path": "agilerl-corpus/not-cached-model"}, "network.pretrained_model_name_or_path: 'agilerl-corpus/not-cached-model' is not a local path", "a Hub model id this machine has not cached (the run never downloads)")
c("grpo_dataset_hub_id_not_cached", GRPO, {"environment.dataset_path": DEL, "environment.hf_dataset_id": "agilerl-corpus/not-cached-rows"}, "environment.hf_dataset_id: 'agilerl-corpus/not-cached-rows' is not a local path", "a Hub dataset id this machine has not cached, as rollout rows")
c("sft_dataset_hub_id_not_cached", SFT, {"environment.dataset_path": DEL, "environment.dataset": "agilerl-corpus/not-cached-sft"}, "environment.dataset: 'agilerl-corpus/not-cached-sft' is not a local path", "a Hub dataset id this machine has not cached, as SFT rows")
c("grpo_model_dir_missing", GRPO, {"network.pretrained_model_name_or_path": "./no-such-model"}, "network.pretrained_model_name_or_path: './no-such-model': no such directory", "a model directory that does not exist")
c("grpo_model_is_a_file", GRPO, {"network.pretrained_model_name_or_path": f"{M}/ok/config.json"}, "config.json' is a file; give the model's directory", "a model path that is a file")
c("grpo_model_config_broken", GRPO, {"network.pretrained_model_name_or_path": f"{M}/broken_config"}, "config.json does not parse as JSON", "a config.json that is not JSON")
c("grpo_model_config_no_model_type", GRPO, {"network.pretrained_model_name_or_path": f"{M}/no_model_type"}, "config.json names no model_type", "a config.json transformers cannot map to an architecture")
c("grpo_model_no_tokenizer", GRPO, {"network.pretrained_model_name_or_path": f"{M}/no_tokenizer"}, "no tokenizer files", "a model directory without its tokenizer")
c("grpo_model_no_weights", GRPO, {"network.pretrained_model_name_or_path": f"{M}/no_weights"}, "no weights (model.safetensors or pytorch_model.bin)", "a model directory without weights")
c("grpo_model_weights_truncated", GRPO, {"network.pretrained_model_name_or_path": f"{M}/truncated"}, "model.safetensors: truncated: its header describes", "a safetensors file cut short (an interrupted copy)")
c("grpo_model_weights_not_safetensors", GRPO, {"network.pretrained_model_name_or_path": f"{M}/garbage_weights"}, "model.safetensors: not a safetensors file, or truncated", "weights that are not safetensors")
c("grpo_dataset_missing_file", GRPO, {"environment.dataset_path": f"{RJ}/nope.jsonl"}, "environment.dataset_path: no such file: tests/data/bad/jsonl/nope.jsonl", "rollout rows that do not exist")
c("grpo_dataset_empty", GRPO, {"environment.dataset_path": f"{RJ}/empty.jsonl"}, "environment.dataset_path: tests/data/bad/jsonl/empty.jsonl: the file has no rows (it is empty); put the rows in it (.jsonl: one JSON object per line)", "rollout rows: an empty file")
c("grpo_dataset_blank_lines_only", GRPO, {"environment.dataset_path": f"{RJ}/blank_lines.jsonl"}, "environment.dataset_path: tests/data/bad/jsonl/blank_lines.jsonl: the file has no rows; put the rows in it", "rollout rows: a file of blank lines only")
c("grpo_dataset_not_json", GRPO, {"environment.dataset_path": f"{RJ}/not_json.jsonl"}, "environment.dataset_path: tests/data/bad/jsonl/not_json.jsonl:2: not a JSON object: each line of a .jsonl file is one JSON object", "rollout rows: a line that is not JSON")
c("grpo_dataset_wrong_columns", GRPO, {"environment.dataset_path": f"{RJ}/no_question.jsonl"}, "no_question.jsonl:1: no column 'question' (or 'prompt'), which a rollout needs", "rollout rows without a question column")
c("grpo_dataset_directory", GRPO, {"environment.dataset_path": "tests/data/bad/jsonl"}, "environment.dataset_path: tests/data/bad/jsonl is a directory", "a directory where one rows file goes")
c("grpo_dataset_not_a_data_file", GRPO, {"environment.dataset_path": "/etc/passwd"}, "environment.dataset_path: /etc/passwd is not a dataset file", "a system file as rollout rows")
c("grpo_dataset_json_not_rows", GRPO, {"environment.dataset_path": f"{RJ}/not_rows.json"}, "not_rows.json: a .json dataset is a list of row objects", "a .json file that holds no rows")
c("grpo_dataset_csv_no_question", GRPO, {"environment.dataset_path": f"{RJ}/no_question.csv"}, "no_question.csv:2: no column 'question'", "CSV rows without a question column")
c("sft_dataset_not_a_data_file", SFT, {"environment.dataset_path": "/etc/passwd"}, "environment.dataset_path: /etc/passwd is not a dataset file", "a system file as SFT rows")
c("sft_dataset_directory_without_data", SFT, {"environment.dataset_path": "tests/data/bad/envs"}, "tests/data/bad/envs is a directory without data files", "a directory with no data files as SFT rows")
c("sft_dataset_missing_file", SFT, {"environment.dataset_path": f"{RJ}/nope.jsonl"}, "environment.dataset_path: no such file", "SFT rows that do not exist")
c("sft_dataset_parquet_garbage", SFT, {"environment.dataset_path": f"{RJ}/garbage.parquet"}, "garbage.parquet is not a Parquet file", "a .parquet file that is not Parquet")
c("grpo_no_rubric", GRPO, {"environment.rubric_file_path": DEL}, "environment.rubric_file_path: required with dataset rows", "dataset rows without a rubric")
c("grpo_rubric_missing_file", GRPO, {"environment.rubric_file_path": f"{R}/nope.py"}, "environment.rubric_file_path: no such file: tests/data/bad/rubrics/nope.py", "a rubric file that does not exist")
c("grpo_rubric_syntax_error", GRPO, {"environment.rubric_file_path": f"{R}/syntax_error.py"}, "environment.rubric_file_path: tests/data/bad/rubrics/syntax_error.py:1:44: syntax error: expected ':'", "a rubric that is not Python")
c("grpo_rubric_no_reward_fn", GRPO, {"environment.rubric_file_path": f"{R}/no_reward_fn.py"}, "has no top-level 'reward_fn' (it defines score_answer)", "a rubric without reward_fn")
c("grpo_rubric_named_function_absent", GRPO, {"environment.rubric_file_path": f"{R}/no_reward_fn.py", "environment.rubric_name": "score_answr"}, "environment.rubric_name: tests/data/bad/rubrics/no_reward_fn.py has no top-level 'score_answr' (it defines score_answer); did you mean 'score_answer'?", "rubric_name naming a function the file lacks")
c("grpo_rubric_not_callable", GRPO, {"environment.rubric_file_path": f"{R}/not_callable.py"}, "reward_fn is bound to a constant value, not a function", "reward_fn = 1.0")
c("grpo_rubric_wrong_arity", GRPO, {"environment.rubric_file_path": f"{R}/wrong_arity.py"}, "reward_fn(completion) takes 1 argument(s), but the run calls reward_fn(completion, answer, question)", "a reward function of one argument")
c("grpo_rubric_class_without_call", GRPO, {"environment.rubric_file_path": f"{R}/class_without_call.py"}, "class reward_fn has no __call__", "a rubric class whose instances cannot be called")
c("grpo_rubric_async", GRPO, {"environment.rubric_file_path": f"{R}/async_reward.py"}, "reward_fn is an async def", "an async reward function")
c("grpo_reward_funcs_not_importable", GRPO, {"environment.rubric_file_path": DEL, "environment.reward_funcs": ["agilerl_corpus_no_such_module:score"]}, "environment.reward_funcs[0]: cannot import module 'agilerl_corpus_no_such_module'", "a reward function whose module cannot be imported")
c("grpo_reward_funcs_no_completions", GRPO, {"environment.rubric_file_path": DEL, "environment.reward_funcs": [f"{R}/batched_no_completions.py:score"]}, "environment.reward_funcs[0]: score(prompts) takes no 'completions' argument", "a batched reward function that cannot take the completions")
c("grpo_loss_type_unknown", GRPO, {"algorithm.loss_type": "ppo"}, "loss_type: 'ppo' is not one of grpo, dr_grpo, dapo, bnpo, cispo, gspo", "a loss_type that does not exist")
# --- env_url (the OpenEnv plugin): each URL checked, then the server asked once (nothing listens on port 9) ---
OE = {**GRPO, "environment": {"env_type": "rollout", "env_url": "http://127.0.0.1:9", "max_turns": 1}}
c("openenv_url_file_scheme", OE, {"environment.env_url": "file:///etc/passwd"}, "environment.env_url: 'file:///etc/passwd' is not a usable URL: unsupported scheme 'file'", "a file URL where a server goes")
c("openenv_url_malformed_scheme", OE, {"environment.env_url": "http:/127.0.0.1:8000"}, "environment.env_url: 'http:/127.0.0.1:8000' is not a usable URL: malformed: a scheme needs '://'", "a scheme missing a slash")
c("openenv_url_no_host", OE, {"environment.env_url": "http://:8000"}, "environment.env_url: 'http://:8000' is not a usable URL: no host name", "a URL without a host")
c("openenv_url_port_out_of_range", OE, {"environment.env_url": "http://127.0.0.1:70000"}, "is not a usable URL: bad port: Port out of range 0-65535", "a port above 65535")
c("openenv_url_unset_variable", OE, {"environment.env_url": "http://${AGILERL_CORPUS_UNSET_HOST}:8000"}, "environment.env_url: uses ${AGILERL_CORPUS_UNSET_HOST}, but the environment variable AGILERL_CORPUS_UNSET_HOST is not set", "a ${VARIABLE} in the URL that is not set")
c("openenv_header_unset_variable", OE, {"environment.env_url_headers_from_env": {"Authorization": "AGILERL_CORPUS_UNSET_TOKEN"}}, "environment.env_url_headers_from_env.Authorization: reads the environment variable AGILERL_CORPUS_UNSET_TOKEN, which is not set", "a header read from an unset variable")
c("openenv_replica_list_one_bad", OE, {"environment.env_url": ["http://127.0.0.1:9", "htp://127.0.0.1:8001"]}, "environment.env_url[1]: 'htp://127.0.0.1:8001' is not a usable URL: unsupported scheme 'htp'", "one bad URL in a replica list")
c("openenv_request_timeout_zero", OE, {"environment.request_timeout_s": 0}, "environment.request_timeout_s: 0 seconds would fail every request at once", "a zero request timeout")
c("openenv_unreachable", OE, {}, "environment.env_url: the OpenEnv server at http://127.0.0.1:9 is not reachable", "no server at the URL (validation.check_env: false skips asking)")
c("openenv_no_max_turns", OE, {"environment.max_turns": DEL}, "environment.max_turns: required with env_url", "an env_url without a turn budget")
c("sft_fsdp_unknown_field", SFT, {"algorithm.fsdp": {"shard_size": 2, "param_dtype": "float32"}}, "algorithm.fsdp.shard_size: not an FSDPConfig field; did you mean 'shard_group_size'? (got 2)", "a typo in the fsdp mapping (checked without torch)")
c("sft_fsdp_mixed_precision", SFT, {"algorithm.fsdp": True}, "algorithm.fsdp.param_dtype: AgileRL's default cannot run here: mixed-precision FSDP is not implemented (weights train in float32 here); set it explicitly to 'float32' (got 'bfloat16')", "FSDP with AgileRL's bfloat16 default, which runs in float32 only here")
c("ippo_mfpbt_pop_not_divisible", IPPO, {"training.pop_size": 7, "mutation": {"probabilities": {"no_mut": 1.0}}, "selection_strategy": {"strategy": "multi_frequency", "n_subpopulations": 2}}, "selection_strategy: training.pop_size (7) must split into 2 sub-populations", "MF-PBT on a multi-agent env, a population that does not split")
# fmt: on

written = 0
for name, base, changes, expect, why in cases:
    d = copy.deepcopy(base)
    for k, v in changes.items():
        setp(d, k, v)
    text = yaml.safe_dump(d, sort_keys=False, default_flow_style=False)
    (OUT / f"{name}.yaml").write_text(f"# {why}\n# expect: {expect}\n{text}")
    written += 1

# --- raw files: syntax and limits ---
raw = {
    "dup_key.yaml": (
        "a duplicate key (YAML keeps the last silently)",
        "dup_key.yaml:10:3: duplicate key 'max_steps'",
        "algorithm:\n  name: PPO\n  learn_step: 64\n  batch_size: 32\nenvironment: {name: CartPole-v1}\ntraining:\n  max_steps: 100\n  max_steps: 200\n".replace(
            "training:\n  max_steps: 100\n  max_steps: 200", "training:\n  max_steps: 100\n  max_steps: 200"
        ),
    ),
    "dup_section.yaml": (
        "a section given twice",
        "dup_section.yaml:8:1: duplicate key 'training'",
        "algorithm: {name: PPO, learn_step: 64, batch_size: 32}\nenvironment: {name: CartPole-v1}\ntraining: {max_steps: 100}\n\n\ntraining: {max_steps: 200}\n",
    ),
    "alias_bomb.yaml": (
        "a billion-laughs alias bomb",
        "expands to more than",
        "\n".join(
            [f"a0: &a0 [{', '.join(['lol'] * 9)}]"]
            + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
        )
        + "\n",
    ),
    "deep_nesting.yaml": (
        "5000 nested lists",
        "nesting deeper than",
        "algorithm: {name: PPO}\nenvironment: {name: CartPole-v1, env_config: {x: " + "[" * 5000 + "]" * 5000 + "}}\n",
    ),
    "tab_indent.yaml": (
        "a tab in the indentation",
        "tab_indent.yaml:5:1: invalid YAML",
        "algorithm:\n  name: PPO\n\tlr: 0.1\n",
    ),
    "python_tag.yaml": (
        "a python object tag (never constructed)",
        "python_tag.yaml:3:12: invalid YAML: could not determine a constructor",
        "algorithm: !!python/object/apply:os.system ['echo pwned']\n",
    ),
    "two_documents.yaml": (
        "two YAML documents",
        "more than one YAML document",
        "algorithm: {name: PPO}\n---\nalgorithm: {name: DQN}\n",
    ),
    "list_at_top.yaml": ("a list instead of a mapping", "a mapping of sections", "- algorithm: PPO\n"),
    "empty.yaml": ("an empty file", "the manifest is empty", ""),
    "unclosed.yaml": (
        "an unclosed flow mapping",
        "unclosed.yaml:4:12: invalid YAML",
        "algorithm: {name: PPO\nenvironment: {name: CartPole-v1}\n",
    ),
    "dup_key.json": (
        "a duplicate key in JSON",
        "duplicate key 'max_steps'",
        '{"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1"}, "training": {"max_steps": 1, "max_steps": 2}}',
    ),
    "nan.json": (
        "JSON's non-standard NaN",
        "NaN is not valid JSON",
        '{"algorithm": {"name": "PPO", "lr": NaN}, "environment": {"name": "CartPole-v1"}}',
    ),
    "trailing_comma.json": (
        "invalid JSON",
        "trailing_comma.json:1:30: invalid JSON",
        '{"algorithm": {"name": "PPO",}}',
    ),
    "deep_nesting.json": ("100000 nested arrays", "nesting deeper than", '{"a": ' + "[" * 100000 + "]" * 100000 + "}"),
}
for fname, (why, expect, text) in raw.items():
    (OUT / fname).write_text(f"# {why}\n# expect: {expect}\n{text}" if not fname.endswith(".json") else text)
    if fname.endswith(".json"):
        (OUT / (fname + ".expect")).write_text(f"# {why}\n# expect: {expect}\n")
    written += 1
(OUT / "binary_garbage.yaml").write_bytes(b"# binary garbage\n# expect: not UTF-8 text\n" + bytes(range(128, 256)) * 8)
(OUT / "utf16.yaml").write_bytes(
    b"# a UTF-16 file\n# expect: not UTF-8\n" + "algorithm: {name: PPO}\n".encode("utf-16")
)
written += 2

# HDF5 datasets of the offline cases: 8 steps of CartPole-shaped rows, each file broken one way.
import h5py  # noqa: E402
import numpy as np  # noqa: E402

(OUT / "hdf5").mkdir(exist_ok=True)
_rng = np.random.default_rng(0)
_OK = {
    "observations": _rng.uniform(-0.05, 0.05, (8, 4)).astype(np.float32),
    "actions": np.array([0, 1, 0, 1, 1, 0, 1, 0]),
    "rewards": np.ones(8, dtype=np.float32),
    "terminals": np.array([0, 0, 0, 1, 0, 0, 0, 1], dtype=bool),
}


def _h5(name, **changes):
    arrays = {**_OK, **changes}
    with h5py.File(OUT / "hdf5" / name, "w") as f:
        for key, value in arrays.items():
            if value is not None:
                f[key] = value


_h5("ok.h5")
_h5("no_rewards.h5", rewards=None)
_h5("obs_shape.h5", observations=_OK["observations"][:, :3])
_h5("action_out_of_range.h5", actions=np.array([0, 1, 0, 2, 1, 0, 1, 0]))
_h5("length_mismatch.h5", terminals=_OK["terminals"][:7])
_h5("no_rows.h5", **{k: v[:0] for k, v in _OK.items()})
_h5("nan_reward.h5", rewards=np.array([1, 1, np.nan, 1, 1, 1, 1, 1], dtype=np.float32))
(OUT / "hdf5" / "empty.h5").write_bytes(b"")
(OUT / "hdf5" / "not_hdf5.h5").write_text("observations,actions\n0,1\n")
written += 9

# LLM inputs. The model directories hold a model's files in shape only: the config, a tokenizer file,
# a one-tensor safetensors file. Validation reads headers and never loads weights; nothing trains on them.
_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 4}
_TOKENIZER = {"version": "1.0", "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "a": 1}, "unk_token": "<unk>"}}
_header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
_SAFETENSORS = struct.pack("<Q", len(_header)) + _header + b"\0\0\0\0"


def _model(name, config=_CONFIG, tokenizer=True, weights=_SAFETENSORS):
    d = OUT / "models" / name
    d.mkdir(parents=True, exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if tokenizer:
        (d / "tokenizer.json").write_text(json.dumps(_TOKENIZER))
        (d / "tokenizer_config.json").write_text(json.dumps({"unk_token": "<unk>"}))
    if weights is not None:
        (d / "model.safetensors").write_bytes(weights)


_model("ok")
_model("broken_config", config='{"model_type": "llama",')
_model("no_model_type", config={"vocab_size": 8})
_model("no_tokenizer", tokenizer=False)
_model("no_weights", weights=None)
_model("truncated", weights=_SAFETENSORS[:-2])
_model("garbage_weights", weights=b"not a tensor file at all")
(OUT / "rubrics").mkdir(exist_ok=True)
for name, text in {
    "syntax_error.py": "def reward_fn(completion, answer, question)\n    return 1.0\n",
    "no_reward_fn.py": "def score_answer(completion, answer, question):\n    return float(answer in completion)\n",
    "not_callable.py": "reward_fn = 1.0\n",
    "wrong_arity.py": "def reward_fn(completion):\n    return 1.0\n",
    "class_without_call.py": "class reward_fn:\n    scale = 1.0\n",
    "async_reward.py": "async def reward_fn(completion, answer, question):\n    return 1.0\n",
    "batched_no_completions.py": "def score(prompts):\n    return [0.0] * len(prompts)\n",
}.items():
    (OUT / "rubrics" / name).write_text(text)
(OUT / "jsonl" / "no_question.jsonl").write_text('{"query": "say eight", "answer": "eight"}\n')
(OUT / "jsonl" / "not_rows.json").write_text('{"version": 1}\n')
(OUT / "jsonl" / "blank_lines.jsonl").write_text("\n  \n\n")
(OUT / "jsonl" / "no_question.csv").write_text("query,answer\nsay eight,eight\n")
(OUT / "jsonl" / "garbage.parquet").write_text("prompt,response\n")
(OUT / "jsonl" / "chat_roles.jsonl").write_text(
    json.dumps(
        {
            "prompt": [{"role": "user", "content": "say eight"}],
            "chosen": [{"role": "user", "content": "eight"}, {"role": "user", "content": "eight"}],
            "rejected": [{"role": "assistant", "content": "seven"}],
        }
    )
    + "\n"
)
(OUT / "jsonl" / "chat_unknown_role.jsonl").write_text(
    json.dumps({"prompt": [{"role": "bot", "content": "say eight"}], "answer": "eight"}) + "\n"
)
written += 20
print(f"wrote {written} files to {OUT}")
