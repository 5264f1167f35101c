"""AgileRL's own published manifests (``../shared/agilerl-manifests``: 53 files, unchanged) against our
validator: each one either validates or fails with exactly the problem(s) in :data:`EXPECTED`.

A refusal names the feature we lack ("CQN is not supported yet") or the package to install;
never an unknown-field error for a field AgileRL defines, nor a raw pydantic message. One row per
file, so a change in outcome is a one-line edit here (and in docs/user-guide.md's count).
Rows for the LLM plugin's manifests record what this branch produces; the LLM plugin's work changes them.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest
import yaml

from agilerl.errors import ManifestError
from agilerl.models import load_manifest, validate_manifest

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = Path(os.environ.get("AGILERL_UPSTREAM_MANIFESTS", REPO.parent / "shared" / "agilerl-manifests"))

VALID = "valid"
_HAS_BOX2D = importlib.util.find_spec("Box2D") is not None


def needs_box2d(env_id: str) -> str:
    """Valid where gymnasium's Box2D extra is installed; else the one install message."""
    if _HAS_BOX2D:
        return VALID
    return (
        f"environment.name: env package for {env_id!r} is not installed: Box2D is not installed, you can "
        'install it by run `pip install swig` followed by `pip install "gymnasium[box2d]"`'
    )


# path under UPSTREAM -> "valid", the one problem line, or the list of problem lines.
EXPECTED: dict[str, str | list[str]] = {
    "configs/training/bandit/neural_ts.yaml": "mutation.probabilities: NeuralTS does not support activation mutation (act_mut) yet; set act_mut: 0",
    "configs/training/bandit/neural_ucb.yaml": "mutation.probabilities: NeuralUCB does not support activation mutation (act_mut) yet; set act_mut: 0",
    "configs/training/bandit/neural_ucb_mfpbt.yaml": "mutation.probabilities: NeuralUCB does not support activation mutation (act_mut) yet; set act_mut: 0",
    "configs/training/cqn.yaml": "algorithm.name: CQN is not supported yet: offline RL from a dataset (minari_dataset_id) needs an offline env type and strategy this plugin does not have",
    "configs/training/cqn_mfpbt.yaml": "algorithm.name: CQN is not supported yet: offline RL from a dataset (minari_dataset_id) needs an offline env type and strategy this plugin does not have",
    "configs/training/ddpg/ddpg.yaml": "algorithm.share_encoders: a shared actor-critic encoder (share_encoders: true) is not supported yet here (got True)",
    "configs/training/ddpg/ddpg_simba.yaml": "network.simba: SimBa encoders (arch: simba / simba: true) are not supported yet; use an mlp encoder",
    "configs/training/dqn/dqn.yaml": "mutation.probabilities: DQN does not support activation mutation (act_mut) yet; set act_mut: 0",
    "configs/training/dqn/dqn_mfpbt.yaml": "mutation.probabilities: DQN does not support activation mutation (act_mut) yet; set act_mut: 0",
    "configs/training/dqn/dqn_rainbow.yaml": "mutation.probabilities: RainbowDQN does not support activation mutation (act_mut) yet; set act_mut: 0",
    "configs/training/llm_finetuning/cispo.yaml": "algorithm: use_vllm: true needs vLLM, which runs on a CUDA GPU, and vllm is not installed here; install 'agilerl-plugin-llm[vllm]' on a CUDA machine, or set use_vllm: false to generate with HF generate (got {'batch_size': 4, 'group_size': 16, 'beta': 0.001, 'lr': ...)",
    "configs/training/llm_finetuning/cispo_gemma4_group5.yaml": [
        "algorithm: strip_multimodal_towers is not supported; remove it (got {'tensor_parallel_size': 1, 'gpu_memory_utilization': 0.9...)",
        "environment: env_name 'game:Sudoku-v0-hard' is a GEM env, built with gem.make: install gem-llm (pip install gem-llm), or give entrypoint: module:Class for your own text env (got {'env_type': 'multiturn', 'env_name': 'game:Sudoku-v0-har...)",
    ],
    "configs/training/llm_finetuning/cispo_quant_bench.yaml": [
        "algorithm: quantization: QLoRA (a bitsandbytes nf4/int8 base) is not supported: it needs a CUDA GPU and is not implemented by agilerl-plugin-llm yet; remove it (or set quantization: none) to train in full precision; activation_offload: activation offloading is not supported yet; use_sequence_packing: sequence packing is not supported yet; lora_target_scope: lora_target_scope is not supported yet; use network.lora_config.target_modules; chunk_rows: chunked rows are not supported yet; use_liger_loss: Liger's fused loss is not supported yet (the loss here is computed unfused, to the same result); remove it or set it to false; vllm_importance_sampling_correction: correcting for vLLM's sampling log-probs is not implemented; remove it or set it to false (got {'batch_size': 2, 'beta': 0.0, 'lr': 2e-05, 'clip_coef': ...)",
        "environment: env_name 'game:Sudoku-v0-hard' is a GEM env, built with gem.make: install gem-llm (pip install gem-llm), or give entrypoint: module:Class for your own text env (got {'env_type': 'multiturn', 'env_name': 'game:Sudoku-v0-har...)",
    ],
    "configs/training/llm_finetuning/cispo_quant_bench_qwen.yaml": [
        "algorithm: quantization: QLoRA (a bitsandbytes nf4/int8 base) is not supported: it needs a CUDA GPU and is not implemented by agilerl-plugin-llm yet; remove it (or set quantization: none) to train in full precision; activation_offload: activation offloading is not supported yet; use_sequence_packing: sequence packing is not supported yet; chunk_rows: chunked rows are not supported yet; use_liger_loss: Liger's fused loss is not supported yet (the loss here is computed unfused, to the same result); remove it or set it to false; vllm_importance_sampling_correction: correcting for vLLM's sampling log-probs is not implemented; remove it or set it to false (got {'batch_size': 2, 'beta': 0.0, 'lr': 2e-05, 'clip_coef': ...)",
        "environment: env_name 'game:GuessTheNumber-v0-easy' is a GEM env, built with gem.make: install gem-llm (pip install gem-llm), or give entrypoint: module:Class for your own text env (got {'env_type': 'multiturn', 'env_name': 'game:GuessTheNumbe...)",
    ],
    "configs/training/llm_finetuning/dpo.yaml": VALID,
    "configs/training/llm_finetuning/grpo.yaml": VALID,
    "configs/training/llm_finetuning/grpo_multiturn.yaml": [
        "algorithm: use_vllm: true needs vLLM, which runs on a CUDA GPU, and vllm is not installed here; install 'agilerl-plugin-llm[vllm]' on a CUDA machine, or set use_vllm: false to generate with HF generate (got {'batch_size': 16, 'group_size': 4, 'lr': 0.0003, 'beta':...)",
        "environment: env_name 'game:GuessTheNumber-v0-easy' is a GEM env, built with gem.make: install gem-llm (pip install gem-llm), or give entrypoint: module:Class for your own text env (got {'env_type': 'multiturn', 'env_name': 'game:GuessTheNumbe...)",
    ],
    "configs/training/llm_finetuning/gspo.yaml": "algorithm: use_vllm: true needs vLLM, which runs on a CUDA GPU, and vllm is not installed here; install 'agilerl-plugin-llm[vllm]' on a CUDA machine, or set use_vllm: false to generate with HF generate (got {'batch_size': 4, 'group_size': 16, 'beta': 0.001, 'lr': ...)",
    "configs/training/llm_finetuning/ppo_llm.yaml": "algorithm: use_vllm: true needs vLLM, which runs on a CUDA GPU, and vllm is not installed here; install 'agilerl-plugin-llm[vllm]' on a CUDA machine, or set use_vllm: false to generate with HF generate (got {'batch_size': 4, 'beta': 0.001, 'lr_actor': 5e-06, 'lr_c...)",
    "configs/training/llm_finetuning/ppo_llm_quant_bench.yaml": "algorithm: use_liger_loss: Liger's fused loss is not supported yet (the loss here is computed unfused, to the same result); remove it or set it to false (got {'batch_size': 32, 'beta': 0.001, 'lr_actor': 5e-06, 'lr_...)",
    "configs/training/llm_finetuning/reinforce_llm.yaml": "algorithm: use_vllm: true needs vLLM, which runs on a CUDA GPU, and vllm is not installed here; install 'agilerl-plugin-llm[vllm]' on a CUDA machine, or set use_vllm: false to generate with HF generate (got {'batch_size': 4, 'beta': 0.001, 'lr': 5e-06, 'clip_coef'...)",
    "configs/training/llm_finetuning/reinforce_quant_bench.yaml": [
        "algorithm: lora_target_scope: lora_target_scope is not supported yet; use network.lora_config.target_modules (got {'batch_size': 1, 'beta': 0, 'lr': 5e-05, 'clip_coef': 0....)",
        "environment: env_name 'game:Sudoku-v0-hard' is a GEM env, built with gem.make: install gem-llm (pip install gem-llm), or give entrypoint: module:Class for your own text env (got {'env_type': 'multiturn', 'env_name': 'game:Sudoku-v0-har...)",
    ],
    "configs/training/multi_agent/ippo.yaml": "mutation.probabilities: IPPO does not support architecture mutation (arch_mut) yet; set arch_mut: 0",
    "configs/training/multi_agent/ippo_mfpbt.yaml": "mutation.probabilities: IPPO does not support architecture mutation (arch_mut) yet; set arch_mut: 0",
    "configs/training/multi_agent/ippo_pong.yaml": "mutation.probabilities: IPPO does not support architecture mutation (arch_mut) or activation mutation (act_mut) yet; set arch_mut: 0, act_mut: 0",
    "configs/training/multi_agent/maddpg.yaml": "mutation.probabilities: MADDPG does not support architecture mutation (arch_mut) yet; set arch_mut: 0",
    "configs/training/multi_agent/maddpg_mfpbt.yaml": "mutation.probabilities: MADDPG does not support architecture mutation (arch_mut) yet; set arch_mut: 0",
    "configs/training/multi_agent/matd3.yaml": "mutation.probabilities: MATD3 does not support architecture mutation (arch_mut) or activation mutation (act_mut) yet; set arch_mut: 0, act_mut: 0",
    "configs/training/multi_input.yaml": "mutation.probabilities: PPO does not support activation mutation (act_mut) yet; set act_mut: 0",
    "configs/training/ppo/ppo.yaml": needs_box2d("LunarLander-v3"),
    "configs/training/ppo/ppo_image.yaml": "network.min_latent_dim: latent_dim mutation is not supported yet (architecture mutation keeps the latent size); remove min_latent_dim/max_latent_dim or set mutation.probabilities.arch_mut: 0",
    "configs/training/ppo/ppo_mfpbt.yaml": needs_box2d("LunarLander-v3"),
    "configs/training/ppo/ppo_recurrent.yaml": "algorithm.recurrent: recurrent PPO is not supported by agilerl-plugin-gym yet; set recurrent: false (got True)",
    "configs/training/sft.yaml": VALID,
    "configs/training/td3.yaml": "algorithm.share_encoders: a shared actor-critic encoder (share_encoders: true) is not supported yet here (got True)",
    "docs/_static/examples/gsm8k_grpo.yaml": "environment: a rollout env needs exactly one source; set one of dataset, dataset_path, entrypoint, env_url, hf_dataset_id (dataset rows also need rubric_file_path)",
    "docs/_static/examples/merge_ppo.yaml": "mutation.probabilities: PPO does not support activation mutation (act_mut) yet; set act_mut: 0",
    "tests/manifests/cqn.yaml": "algorithm.name: CQN is not supported yet: offline RL from a dataset (minari_dataset_id) needs an offline env type and strategy this plugin does not have",
    "tests/manifests/ddpg.yaml": "algorithm.share_encoders: a shared actor-critic encoder (share_encoders: true) is not supported yet here (got True)",
    "tests/manifests/ddpg_simba.yaml": "network.encoder_config: SimBa encoders (arch: simba / simba: true) are not supported yet; use an mlp encoder",
    "tests/manifests/dqn.yaml": needs_box2d("LunarLander-v3"),
    "tests/manifests/ippo.yaml": VALID,
    "tests/manifests/ippo_cnn.yaml": VALID,
    "tests/manifests/maddpg.yaml": VALID,
    "tests/manifests/matd3.yaml": VALID,
    "tests/manifests/multi_input.yaml": "network.encoder_config: multi-input encoders (arch: multiinput, for Dict/Tuple observations) are not supported yet",
    "tests/manifests/neural_ts.yaml": VALID,
    "tests/manifests/neural_ucb.yaml": VALID,
    "tests/manifests/ppo.yaml": needs_box2d("LunarLander-v3"),
    "tests/manifests/ppo_cnn.yaml": "environment.name: 'DummyImage-v0' is not a registered gymnasium environment. For your own env class set environment.entrypoint: 'module:Class' (and custom: true).",
    "tests/manifests/ppo_lstm.yaml": "algorithm.recurrent: recurrent PPO is not supported by agilerl-plugin-gym yet; set recurrent: false (got True)",
    "tests/manifests/rainbow_dqn.yaml": needs_box2d("LunarLander-v3"),
    "tests/manifests/td3.yaml": needs_box2d("LunarLanderContinuous-v3"),
}


@pytest.fixture(autouse=True)
def _in_the_upstream_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    # AgileRL's manifests name data relative to its repository root (tests/data/iris_features.csv),
    # where its own tests run them from; validation checks that the files are there.
    monkeypatch.chdir(UPSTREAM)


def _outcome(path: Path) -> str | list[str]:
    try:
        load_manifest(path)
    except ManifestError as exc:
        lines = [_normalise(str(p)) for p in exc.problems]
        return lines[0] if len(lines) == 1 else lines
    return VALID


def _normalise(line: str) -> str:
    # The list of valid fields after an unknown-field error grows with every spec change: not pinned here.
    return re.sub(r" \(valid fields: [^)]*\)", "", line)


def _files() -> list[str]:
    return sorted(str(p.relative_to(UPSTREAM)) for p in UPSTREAM.rglob("*") if p.suffix in {".yaml", ".yml", ".json"})


def test_the_upstream_folder_is_the_53_files_the_table_covers() -> None:
    assert UPSTREAM.is_dir(), f"AgileRL's manifests are expected at {UPSTREAM} (set AGILERL_UPSTREAM_MANIFESTS)"
    assert _files() == sorted(EXPECTED)
    assert len(EXPECTED) == 53


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_upstream_manifest_outcome(rel: str) -> None:
    assert _outcome(UPSTREAM / rel) == EXPECTED[rel]


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_no_upstream_refusal_is_a_raw_pydantic_or_spurious_message(rel: str) -> None:
    expected = EXPECTED[rel]
    lines = [expected] if isinstance(expected, str) else expected
    for line in lines:
        assert "discriminator" not in line and "Input tag" not in line
        assert "Input should be" not in line  # a bound AgileRL does not have
        assert "required when the algorithm is invalid or unknown" not in line


@pytest.mark.parametrize("rel", [r for r, e in sorted(EXPECTED.items()) if e == VALID])
def test_valid_upstream_manifests_round_trip(rel: str) -> None:
    manifest = load_manifest(UPSTREAM / rel)
    assert validate_manifest(manifest.to_dict()) == manifest


def test_measured_count_is_the_one_the_docs_state() -> None:
    valid = sum(e == VALID for e in EXPECTED.values())
    text = (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8")
    if _HAS_BOX2D:  # the docs state the figure with the dev requirements (Box2D among them) installed
        assert f"{valid} of the 53" in text


_ALE = (
    VALID
    if importlib.util.find_spec("ale_py") is not None
    else "environment.name: env package ale-py is not installed: pip install ale-py (it provides the ALE/ ids)"
)
_MPE2 = "mpe2.simple_speaker_listener_v4"  # PettingZoo moved MPE out: pettingzoo.mpe.* says so on import
_TOURNAMENT = {"selection_strategy": {"tournament_size": 2, "elitism": True}}

#: What docs/user-guide.md tells an AgileRL user to change, per file, and the outcome after it:
#: valid, or only the env package left to install.
DOCUMENTED_EDITS: dict[str, tuple[dict[str, object], str]] = {
    "configs/training/dqn/dqn.yaml": ({"mutation.probabilities.act_mut": 0}, needs_box2d("LunarLander-v3")),
    "configs/training/dqn/dqn_rainbow.yaml": ({"mutation.probabilities.act_mut": 0}, needs_box2d("LunarLander-v3")),
    "configs/training/ppo/ppo_image.yaml": ({"network.min_latent_dim": None, "network.max_latent_dim": None}, _ALE),
    "configs/training/ddpg/ddpg.yaml": ({"algorithm.share_encoders": False}, needs_box2d("LunarLanderContinuous-v3")),
    "configs/training/td3.yaml": ({"algorithm.share_encoders": False}, needs_box2d("LunarLanderContinuous-v3")),
    "tests/manifests/ddpg.yaml": ({"algorithm.share_encoders": False}, needs_box2d("LunarLanderContinuous-v3")),
    "configs/training/multi_agent/ippo.yaml": ({"mutation.probabilities.arch_mut": 0}, VALID),
    "configs/training/multi_agent/maddpg.yaml": ({"mutation.probabilities.arch_mut": 0}, VALID),
    "configs/training/multi_agent/matd3.yaml": (
        {"mutation.probabilities.arch_mut": 0, "mutation.probabilities.act_mut": 0}, VALID),
    "configs/training/multi_agent/ippo_pong.yaml": (
        {"mutation.probabilities.arch_mut": 0, "mutation.probabilities.act_mut": 0}, VALID),
    "configs/training/bandit/neural_ts.yaml": (
        {"mutation.probabilities.act_mut": 0, "training.episode_steps": None}, VALID),
    "configs/training/bandit/neural_ucb.yaml": ({"mutation.probabilities.act_mut": 0}, VALID),
    "configs/training/bandit/neural_ucb_mfpbt.yaml": (
        {**_TOURNAMENT, "mutation.probabilities.act_mut": 0}, VALID),
    "configs/training/ppo/ppo_mfpbt.yaml": (_TOURNAMENT, needs_box2d("LunarLander-v3")),
    "configs/training/dqn/dqn_mfpbt.yaml": (
        {**_TOURNAMENT, "mutation.probabilities.act_mut": 0}, needs_box2d("LunarLander-v3")),
    "configs/training/multi_agent/ippo_mfpbt.yaml": (
        {**_TOURNAMENT, "mutation.probabilities.arch_mut": 0, "environment.name": _MPE2}, VALID),
    "configs/training/multi_agent/maddpg_mfpbt.yaml": (
        {**_TOURNAMENT, "mutation.probabilities.arch_mut": 0, "environment.name": _MPE2}, VALID),
}  # fmt: skip


def _edited(rel: str, edits: dict[str, object]) -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((UPSTREAM / rel).read_text(encoding="utf-8"))
    for path, value in edits.items():
        *head, last = path.split(".")
        node: dict[str, object] = data
        for key in head:
            node = node.setdefault(key, {})  # type: ignore[assignment]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return data


@pytest.mark.parametrize("rel", sorted(r for r in DOCUMENTED_EDITS if EXPECTED[r] != VALID))
def test_the_documented_changes_make_the_manifest_run(rel: str) -> None:
    edits, expected = DOCUMENTED_EDITS[rel]
    assert EXPECTED[rel] != VALID  # it needed a change
    try:
        validate_manifest(_edited(rel, edits))
        outcome = VALID
    except ManifestError as exc:
        outcome = "\n".join(str(p) for p in exc.problems)
    assert outcome == expected
