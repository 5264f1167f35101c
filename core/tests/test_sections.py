"""``agilerl_register_sections``: a plugin owns the schema of a manifest section, or adds fields to
core's ``training`` section; core validates with what is registered and knows only the names."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from agilerl import hookimpl
from agilerl.errors import DuplicateRegistrationError, ManifestError, PluginError
from agilerl.models import Spec, section_models, training_spec_class, validate_manifest
from agilerl.models.composition import training_as
from agilerl.models.sections import TrainingSpec
from agilerl.registry import SECTION_SCHEMAS


class SmoothingFields(Spec):
    """A plugin's own training field."""

    field_synonyms = {"smoothing_factor": "smoothing"}
    smoothing: float = Field(default=0.0, ge=0, le=1)


class TinyBuffer(Spec):
    capacity: int = Field(default=10, ge=1)


class _SectionPlugin:
    def __init__(self, *pairs: tuple[str, Any]) -> None:
        self.pairs = pairs

    @hookimpl
    def agilerl_register_sections(self, register: Any) -> None:
        for section, model in self.pairs:
            register(section, model)


def test_a_plugins_training_fields_join_the_section_and_are_refused_where_unread(
    example_plugin: Any, ucb_manifest: dict[str, Any], register_plugin: Callable[..., str]
) -> None:
    register_plugin(_SectionPlugin(("training", SmoothingFields)), name="smoothing-plugin")
    cls = training_spec_class()
    assert issubclass(cls, TrainingSpec) and issubclass(cls, SmoothingFields)
    assert next(iter(cls.model_fields)) == "name"  # core's fields first, then the plugins'
    ucb_manifest["training"]["smoothing"] = 0.5
    with pytest.raises(ManifestError) as info:
        validate_manifest(ucb_manifest)
    assert [str(p) for p in info.value.problems] == [
        "training.smoothing: not used by UCB1 (not supported yet); remove it"
    ]
    ucb_manifest["training"]["smoothing"] = 2.0  # its own schema still applies
    with pytest.raises(ManifestError, match=r"training\.smoothing"):
        validate_manifest(ucb_manifest)
    del ucb_manifest["training"]["smoothing"]
    ucb_manifest["training"]["smoothing_factor"] = 0.1  # its synonyms join core's
    with pytest.raises(ManifestError, match="did you mean 'smoothing'"):
        validate_manifest(ucb_manifest)
    del ucb_manifest["training"]["smoothing_factor"]
    manifest = validate_manifest(ucb_manifest)
    assert type(manifest.training) is cls and manifest.training.smoothing == 0.0  # type: ignore[attr-defined]
    assert training_as(manifest, SmoothingFields) is manifest.training  # the plugin's typed view of it
    with pytest.raises(TypeError, match="TinyBuffer"):  # fields no installed plugin added
        training_as(manifest, TinyBuffer)
    # The composed class is found by name in another process: checkpoints and Ray pickle it.
    assert pickle.loads(pickle.dumps(manifest)).training == manifest.training


def test_a_section_has_one_owner(register_plugin: Callable[..., str]) -> None:
    owner = SECTION_SCHEMAS.provider("replay_buffer")
    if owner is None:
        pytest.skip("no installed plugin owns replay_buffer")
    assert section_models()["replay_buffer"] is not None
    register_plugin(_SectionPlugin(("replay_buffer", TinyBuffer)), name="second-buffer-owner")
    with pytest.raises(DuplicateRegistrationError, match="section 'replay_buffer' is registered twice") as info:
        section_models()
    assert owner in str(info.value) and "second-buffer-owner" in str(info.value)


def test_only_known_sections_can_be_registered(register_plugin: Callable[..., str]) -> None:
    with pytest.raises(PluginError, match="section 'memory' cannot be registered"):
        SECTION_SCHEMAS.add("memory", TinyBuffer)


def test_a_section_no_installed_plugin_reads_is_refused_by_name(tmp_path: Path) -> None:
    """Only the bandit plugin loaded (AGILERL_LOAD_PLUGINS): nobody owns ``replay_buffer`` here."""
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "algorithm: {name: NeuralUCB, batch_size: 16}\n"
        "environment: {env_type: bandit, name: iris}\n"
        "replay_buffer: {max_size: 100}\n"
        "training: {max_steps: 200, progress: false}\n"
    )
    env = {**os.environ, "AGILERL_LOAD_PLUGINS": "bandit"}
    done = subprocess.run([sys.executable, "-m", "agilerl", "validate", str(manifest)], env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "replay_buffer: no installed plugin reads the replay_buffer section (NeuralUCB does not read it" in (
        done.stdout + done.stderr
    )
