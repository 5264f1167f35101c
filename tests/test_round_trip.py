"""The manifest a run stores (checkpoint, run dir) re-validates to the same spec.

Property: validate(dump(validate(m))) == validate(m) for every example, every manifest file in the
repo's tests and every one of AgileRL's manifests that validates; and ``agilerl train --resume CKPT``
works from the checkpoint alone for a manifest whose encoder ``arch`` was inferred.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from agilerl.errors import ManifestError
from agilerl.models import load_manifest, validate_manifest

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = Path(os.environ.get("AGILERL_UPSTREAM_MANIFESTS", REPO.parent / "shared" / "agilerl-manifests"))


def _corpus() -> list[Path]:
    files = [*REPO.glob("examples/**/*.yaml"), *REPO.glob("**/tests/**/*.yaml"), *UPSTREAM.glob("**/*.yaml")]
    return sorted({p for p in files if "bad" not in p.parts and ".venv" not in p.parts})


def _valid(path: Path) -> bool:
    cwd = Path.cwd()
    try:
        os.chdir(UPSTREAM if UPSTREAM in path.parents else REPO)
        load_manifest(path)
    except ManifestError:
        return False
    finally:
        os.chdir(cwd)
    return True


VALID = [p for p in _corpus() if _valid(p)]


def test_the_corpus_is_not_empty() -> None:
    assert len(VALID) >= 20  # 17 examples (UCB1 needs its plugin) and AgileRL's valid ones


@pytest.mark.parametrize("path", VALID, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_dump_revalidates_to_the_same_manifest(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(UPSTREAM if UPSTREAM in path.parents else REPO)
    manifest = load_manifest(path)
    dumped = manifest.to_dict()
    again = validate_manifest(yaml.safe_load(yaml.safe_dump(dumped)))  # through YAML, as stored
    assert again == manifest
    assert again.to_dict() == dumped


@pytest.mark.parametrize(
    "network",
    [
        {"encoder_config": {"hidden_size": [16]}},
        {"arch": "cnn"},
        {"encoder_config": {"arch": "lstm"}},
        {"encoder_config": {"arch": "simba"}},
        {"encoder_config": {"arch": "multiinput"}},
        {"latent_dim": 32, "min_latent_dim": 16, "max_latent_dim": 64, "head_config": {"hidden_size": [8]}},
    ],
)
def test_discriminators_survive_the_dump_even_at_their_defaults(network: dict[str, object]) -> None:
    from agilerl.models.manifest import TrainingManifest

    # Built directly: the gym plugin refuses lstm/simba/multiinput, but the dump must not depend on that.
    base = validate_manifest({"algorithm": "PPO", "environment": {"name": "CartPole-v1"}})
    from agilerl_plugin_gym.sections import NetworkSpec

    manifest = TrainingManifest.model_validate({**dict(base), "network": NetworkSpec.model_validate(network)})
    dumped = manifest.to_dict()["network"]
    assert NetworkSpec.model_validate(dumped) == manifest.network
    if manifest.network is not None and manifest.network.encoder_config is not None:
        assert dumped["encoder_config"]["arch"] == manifest.network.encoder_config.arch


def test_train_resume_from_the_checkpoint_alone(tmp_path: Path) -> None:
    from agilerl.cli import main

    manifest = {
        "algorithm": {"name": "DQN", "batch_size": 8, "learn_step": 1},
        "environment": {"name": "CartPole-v1", "num_envs": 1, "sync": True},
        "network": {"latent_dim": 8, "encoder_config": {"hidden_size": [8]}, "head_config": {"hidden_size": [8]}},
        "training": {"max_steps": 60, "evo_steps": 30, "learning_delay": 10, "seed": 0, "progress": False,
                     "checkpoint_steps": 30, "checkpoint_path": str(tmp_path / "ck")},
    }  # fmt: skip
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert main(["train", str(path), "--run-dir", str(tmp_path / "a"), "--no-progress"]) == 0
    checkpoint = tmp_path / "ck_60.pt"
    assert checkpoint.exists()
    path.unlink()  # the original YAML is gone: the checkpoint's own copy must do
    code = main(["train", "--resume", str(checkpoint), "--set", "training.max_steps=90",
                 "--run-dir", str(tmp_path / "b"), "--no-progress"])  # fmt: skip
    assert code == 0
