"""Every AgileRL manifest that validates also trains: ``agilerl train`` on each of AgileRL's 53
published manifests (``../shared/agilerl-manifests``, unchanged) for a short budget, then a resume
from the checkpoint it wrote.

Validation is not the promise; training is. Each manifest runs from a working directory that
holds local stand-ins for what it names but cannot be downloaded here, at the relative paths it
names them by (nothing in the manifests is edited):

* ``tests/data/iris_*.csv``: the iris tables (AgileRL's test data, also in this repo's tests/data);
* a Hub model id such as ``Qwen/Qwen2.5-0.5B-Instruct``: a tiny local Llama saved at that path
  (``from_pretrained`` reads a local directory of that name first);
* a Hub dataset id: a few JSONL rows of the columns the manifest reads, at that path;
* ``reward.py``: a rubric with the function the manifest names;
* a Minari dataset id: a small local Minari dataset of CartPole episodes (``MINARI_DATASETS_PATH``);
* ``DummyImage-v0`` (AgileRL's test-only image env): a small registered image env.

Only the budget is overridden, never an algorithm's setting: ``max_steps`` = 2 generations of
``evo_steps`` (each the smaller of the manifest's and a cap, but at least one bandit episode of
``episode_steps``), ``checkpoint_steps`` = ``evo_steps``,
``pop_size`` 2 (or the manifest's own, when its selection strategy needs more, as MF-PBT does),
``eval_loop`` 1, ``eval_steps`` capped, ``target_score`` and ``max_wall_seconds`` dropped (a tiny
budget must not stop early or late), and for LLM manifests ``max_context_length`` left as written.
The test then resumes from the first generation's checkpoint into a fresh run directory and
checks that it reaches the same number of steps.

A manifest that does not validate in that directory is reported as skipped with its one reason;
:data:`NOT_TRAINED_HERE` pins which may, so a new refusal fails here as well as in
``tests/test_upstream_manifests.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from agilerl.cli import main
from agilerl.errors import ManifestError
from agilerl.models import load_manifest

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = Path(os.environ.get("AGILERL_UPSTREAM_MANIFESTS", REPO.parent / "shared" / "agilerl-manifests"))

pytestmark = pytest.mark.slow

#: Budget caps (env steps for gym and bandits; the LLM strategies' own step unit for LLM manifests).
EVO_CAP = {"gym": 256, "llm": 2}
EVAL_STEPS_CAP = 100


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_VLLM = _has("vllm")

#: Manifests that may not train in this environment, with why. Each reason is a missing package
#: (installed in another CI venv or not at all); anything else that fails to validate fails the test.
NOT_TRAINED_HERE: dict[str, str] = {
    **{
        rel: "use_vllm: true needs vLLM (bash scripts/install.sh --vllm; CI trains these in its vLLM venv)"
        for rel in (
            "configs/training/llm_finetuning/cispo.yaml",
            "configs/training/llm_finetuning/gspo.yaml",
            "configs/training/llm_finetuning/ppo_llm.yaml",
            "configs/training/llm_finetuning/ppo_llm_quant_bench.yaml",
            "configs/training/llm_finetuning/reinforce_llm.yaml",
            "configs/training/llm_finetuning/grpo_multiturn.yaml",
            "configs/training/llm_finetuning/cispo_gemma4_group5.yaml",
            "configs/training/llm_finetuning/cispo_quant_bench.yaml",
            "configs/training/llm_finetuning/cispo_quant_bench_qwen.yaml",
            "configs/training/llm_finetuning/reinforce_quant_bench.yaml",
        )
        if not _VLLM
    },
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

_COUNTDOWN = [{"nums": [i, i + 1, i + 2], "target": 3 * i + 3} for i in range(1, 13)]
_PREFERENCES = [
    {"prompt": f"what is {w}?", "chosen": f"the answer is {w}.", "rejected": "no."}
    for w in ("one", "two", "red", "blue", "cat", "dog", "sun", "moon", "tea", "milk", "big", "small")
]
_RUBRIC = '''"""Stand-in rubric for AgileRL's Countdown manifests: rewards a digit-bearing answer."""


def combined_rewards(completion, answer, question):
    return 1.0 if any(ch.isdigit() for ch in completion) else 0.0


reward_fn = combined_rewards
'''


def _load_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _register_dummy_image_env() -> None:
    import gymnasium as gym

    if "DummyImage-v0" not in gym.registry:
        gym.register("DummyImage-v0", entry_point=f"{__name__}:DummyImageEnv", max_episode_steps=50)


class DummyImageEnv:
    """Stand-in for AgileRL's test-only ``DummyImage-v0``: 3x32x32 uint8 frames, 2 actions, reward for
    matching the frame's parity."""

    def __new__(cls, **kwargs: Any) -> Any:
        import gymnasium as gym
        import numpy as np
        from gymnasium import spaces

        class _Env(gym.Env):  # type: ignore[type-arg]
            observation_space = spaces.Box(0, 255, (3, 32, 32), np.uint8)
            action_space = spaces.Discrete(2)

            def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
                super().reset(seed=seed)
                self._bit = int(self.np_random.integers(2))
                return np.full((3, 32, 32), 200 * self._bit, np.uint8), {}

            def step(self, action: Any) -> Any:
                reward = float(int(action) == self._bit)
                self._bit = int(self.np_random.integers(2))
                return np.full((3, 32, 32), 200 * self._bit, np.uint8), reward, False, False, {}

        return _Env()


@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("agilerl-root")
    (root / "tests" / "data").mkdir(parents=True)
    for name in ("iris_features.csv", "iris_targets.csv"):
        shutil.copy(UPSTREAM / "tests" / "data" / name, root / "tests" / "data" / name)
    manifests = [yaml.safe_load((UPSTREAM / rel).read_text(encoding="utf-8")) for rel in _files()]
    models = {str(m) for data in manifests for m in _walk(data, "pretrained_model_name_or_path") if m}
    if models:
        from agilerl_plugin_llm.testing import build_tiny_model

        # head size 32 (hidden 64, 2 heads): what vLLM's CPU attention accepts
        template = build_tiny_model(root / "_tiny")
        for model in models:
            shutil.copytree(template, root / model)
    datasets = {str(d) for data in manifests for d in _walk(data, "dataset") if isinstance(d, str)}
    for name in datasets:
        rows = _COUNTDOWN if "Countdown" in name else _PREFERENCES
        _write_rows(root / name, rows)
    (root / "reward.py").write_text(_RUBRIC, encoding="utf-8")
    minari_ids = {str(d) for data in manifests for d in _walk(data, "minari_dataset_id") if d}
    if minari_ids:
        os.environ["MINARI_DATASETS_PATH"] = str(root / "minari")
        helpers = _load_module(REPO / "plugins" / "gym" / "tests" / "offline_test_helpers.py")
        record_episodes, write_minari = helpers.record_episodes, helpers.write_minari

        for i, dataset_id in enumerate(sorted(minari_ids)):
            write_minari(dataset_id, record_episodes(None, 600, seed=10 + i))
    _register_dummy_image_env()
    return root


# --------------------------------------------------------------------------------------------------
# The budget
# --------------------------------------------------------------------------------------------------


def _paradigm(data: dict[str, Any]) -> str:
    return "llm" if data.get("network", {}).get("pretrained_model_name_or_path") else "gym"


def budget(data: dict[str, Any]) -> list[str]:
    """``--set`` overrides of the run's budget only (see the module docstring)."""
    t = dict(data.get("training") or {})
    kind = _paradigm(data)
    evo = min(int(t.get("evo_steps") or EVO_CAP[kind]), EVO_CAP[kind])
    evo = max(evo, int(t.get("episode_steps") or 0))  # a generation holds at least one whole episode
    subpops = int((data.get("selection_strategy") or {}).get("n_subpopulations") or 0)
    pop = max(2, int(t.get("pop_size") or 2)) if subpops else 2
    sets = {
        "training.max_steps": 2 * evo,
        "training.evo_steps": evo,
        "training.checkpoint_steps": evo,
        "training.pop_size": pop,
        "training.eval_loop": 1,
        "training.target_score": "null",
        "training.max_wall_seconds": "null",
    }
    if t.get("eval_steps") is None or int(t["eval_steps"]) > EVAL_STEPS_CAP:
        sets["training.eval_steps"] = EVAL_STEPS_CAP
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
    monkeypatch.chdir(standin_dir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    path = UPSTREAM / rel
    try:
        load_manifest(path)
    except ManifestError as exc:
        if rel in NOT_TRAINED_HERE:
            pytest.skip(f"{NOT_TRAINED_HERE[rel]} ({exc.problems[0]})")
        raise
    assert rel not in NOT_TRAINED_HERE, f"{rel} validates here: remove it from NOT_TRAINED_HERE"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    sets = budget(data)
    run = tmp_path / "run"
    assert main(["train", str(path), "--run-dir", str(run), "--no-progress", *sets]) == 0
    metrics = _rows(run / "metrics.jsonl")
    assert metrics, "no metrics written"
    checkpoints = sorted(run.glob("checkpoint_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    assert checkpoints, f"no checkpoint in {sorted(p.name for p in run.iterdir())}"
    assert (run / "last.pt").is_file() and (run / "best.pt").is_file()
    final_steps = int(checkpoints[-1].stem.split("_")[1])

    resumed = tmp_path / "resumed"
    argv = ["train", str(path), "--resume", str(checkpoints[0]), "--run-dir", str(resumed), "--no-progress", *sets]
    assert main(argv) == 0
    again = sorted(resumed.glob("checkpoint_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    assert again and int(again[-1].stem.split("_")[1]) == final_steps
    assert _rows(resumed / "metrics.jsonl")


def test_not_trained_here_names_only_manifests_that_exist() -> None:
    assert set(NOT_TRAINED_HERE) <= set(_files())
