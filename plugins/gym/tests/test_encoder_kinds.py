"""An encoder kind from outside the plugin: one spec class, one network builder, one
``register_encoder`` line (docs/gym.md, "Adding an encoder kind"). It validates, is refused where it
cannot go, builds and trains PPO, and leaves the table as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import gymnasium
import pytest
import torch
from pydantic import Field
from torch import nn

from agilerl.errors import ManifestError
from agilerl.models import load_manifest
from agilerl.models.base import Spec
from agilerl.training.trainer import LocalTrainer
from agilerl_plugin_gym.sections import ENCODERS, EncoderKind, NetworkSpec, infer_encoder_arch, register_encoder
from agilerl_plugin_gym.sections.encoders import unregister_encoder


class ToySpec(Spec):
    """A two-layer tanh encoder whose hidden width is the one field."""

    arch: Literal["toy"] = "toy"
    width: Annotated[int, Field(ge=1, le=256)] = 16


class ToyEncoder(nn.Module):
    """observation -> ``width`` -> latent, tanh after each; ``arch()``/``set_arch()`` for checkpoints."""

    def __init__(self, in_dim: int, width: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.set_arch({"width": width})

    def arch(self) -> dict[str, Any]:
        return {"width": self.width}

    def set_arch(self, arch: dict[str, Any]) -> None:
        self.width = int(arch["width"])
        self.net = nn.Sequential(nn.Linear(self.in_dim, self.width), nn.Tanh(), nn.Linear(self.width, self.out_dim),
                                 nn.Tanh())  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build_toy(cfg: Any, space: gymnasium.spaces.Space[Any], latent: int, normalize_images: bool) -> nn.Module:
    return ToyEncoder(gymnasium.spaces.flatdim(space), cfg.width if isinstance(cfg, ToySpec) else 16, latent)


@pytest.fixture(scope="module", autouse=True)
def toy_kind() -> Iterator[None]:
    register_encoder(EncoderKind("toy", ToySpec, lambda c: "width" in c, builder=f"{__name__}:build_toy"))
    try:
        yield
    finally:
        unregister_encoder("toy")


def _manifest(network: dict[str, Any], tmp_path: Path | None = None, **algorithm: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32, "update_epochs": 2, **algorithm},
        "environment": {"name": "CartPole-v1", "num_envs": 1},
        "network": network,
        "training": {"max_steps": 256, "evo_steps": 128, "pop_size": 1, "seed": 0, "progress": False,
                     **({"run_dir": str(tmp_path)} if tmp_path else {})},
    }  # fmt: skip


def test_a_registered_kind_validates_and_is_inferred() -> None:
    manifest = load_manifest(_manifest({"latent_dim": 8, "encoder_config": {"arch": "toy", "width": 12}}))
    enc = manifest.network.encoder_config
    assert type(enc) is ToySpec and enc.width == 12
    assert infer_encoder_arch({"width": 5}) == "toy" and infer_encoder_arch({"hidden_size": [5]}) == "mlp"
    assert type(NetworkSpec.model_validate({"encoder_config": {"width": 5}}).encoder_config) is ToySpec
    with pytest.raises(
        ManifestError, match=r"network\.encoder_config\.width: Input should be greater than or equal to 1 \(got 0\)"
    ):
        load_manifest(_manifest({"encoder_config": {"arch": "toy", "width": 0}}))
    # a vector kind on an image env is refused by the same rule as SimBa's (its registration says: vector)
    from agilerl_plugin_gym.encoder_rules import EncoderSpaceError, encoder_kind

    image = gymnasium.spaces.Box(0, 255, (16, 16, 3), dtype="uint8")
    with pytest.raises(EncoderSpaceError, match=r"toy encoders read vector observations; .* use arch: cnn"):
        encoder_kind(NetworkSpec.model_validate({"encoder_config": {"arch": "toy"}}), image)


def test_a_registered_kind_builds_and_trains_ppo(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from agilerl.builders import AlgorithmBuildRuntime, select_builder
    from agilerl.inference import load
    from agilerl.strategies import select_strategy

    data = _manifest({"latent_dim": 8, "encoder_config": {"arch": "toy", "width": 12}}, tmp_path)
    # a few PPO updates through the plugin's strategy: the encoder's weights move and stay finite
    manifest = load_manifest(data)
    strategy = select_strategy(manifest.algorithm)
    env = strategy.make_env(manifest, seed=0)
    agent = select_builder(manifest.algorithm).build_for_run(
        manifest.algorithm, env=env, manifest=manifest, runtime=AlgorithmBuildRuntime(seed=0, manifest=manifest)
    )
    actor = agent.nets["actor"]
    assert isinstance(actor.encoder, ToyEncoder) and actor.encoder.width == 12 and actor.encoder_arch == "toy"
    before = [p.detach().clone() for p in actor.encoder.parameters()]
    stats = strategy.learn(agent, SimpleNamespace(env=env, seed=0, manifest=manifest), 128)
    env.close()
    after = list(actor.encoder.parameters())
    assert all(torch.isfinite(p).all() for p in after) and any(
        not torch.equal(b, a) for b, a in zip(before, after, strict=True)
    )
    assert agent.steps >= 128 and all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    # a whole run from the manifest; its checkpoint loads back with the same encoder and policy
    result = LocalTrainer.from_manifest(data).train()
    trained = result.population[0].nets["actor"]
    loaded = load(result.elite_path).nets["actor"]
    obs = torch.randn(5, 4)
    assert isinstance(loaded.encoder, ToyEncoder) and torch.equal(loaded(obs), trained(obs))


def test_the_table_is_left_as_it_was() -> None:
    assert "toy" in ENCODERS
    unregister_encoder("toy")
    try:
        with pytest.raises(ManifestError, match="'toy' is not an encoder kind"):
            load_manifest(_manifest({"encoder_config": {"arch": "toy"}}))
    finally:
        register_encoder(EncoderKind("toy", ToySpec, lambda c: "width" in c, builder=f"{__name__}:build_toy"))
