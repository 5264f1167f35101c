"""Registries and routing by data."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from agilerl import plugins
from agilerl.builders import AlgorithmBuilder, select_builder
from agilerl.errors import DuplicateRegistrationError, MissingPluginError, UnknownNameError
from agilerl.models import AlgorithmSpec, EnvSpec, make_env
from agilerl.registry import BUILDERS, ENV_TYPES, MANIFEST_REGISTRY, STRATEGIES, AlgorithmRegistry
from agilerl.strategies import TrainingStrategy, select_strategy


class ToySpec(AlgorithmSpec):
    paradigm: ClassVar[str] = "toy"
    regime: ClassVar[str] = "online"
    lr: float = 0.1


class ToySubclassSpec(ToySpec):
    pass


def test_seed_registry_semantics() -> None:
    reg = AlgorithmRegistry()
    reg.add("Toy", ToySpec)
    assert reg.get("Toy") is ToySpec
    assert "Toy" in reg.names()
    assert ("Toy", ToySpec) in reg.items()
    spec = reg.create("Toy", lr=0.5)
    assert isinstance(spec, ToySpec) and spec.lr == 0.5 and spec.name == "Toy"
    with pytest.raises(KeyError):
        reg.get("Nope")
    with pytest.raises(KeyError):
        reg.create("Nope")
    assert reg.names() == sorted(reg.names())


def test_unknown_names_suggest_the_closest() -> None:
    reg = AlgorithmRegistry()
    reg.add("Toy", ToySpec)
    with pytest.raises(UnknownNameError) as info:
        reg.get("toy2")
    assert "Did you mean 'Toy'?" in str(info.value)


def test_adding_a_name_twice_names_both_providers() -> None:
    reg = AlgorithmRegistry()
    reg.add("Toy", ToySpec)
    with pytest.raises(DuplicateRegistrationError, match="registered twice"):
        reg.add("Toy", ToySubclassSpec)


class ToyBuilder(AlgorithmBuilder):
    paradigm = "toy"


class ToyStrategy(TrainingStrategy):
    paradigm = "toy"
    regime = "online"


class OtherStrategy(TrainingStrategy):
    paradigm = "toy"
    regime = "*"


def test_routing_by_paradigm_and_regime_with_overrides() -> None:
    MANIFEST_REGISTRY.add("Toy", ToySpec)
    MANIFEST_REGISTRY.add("ToySub", ToySubclassSpec, strategy=OtherStrategy)
    BUILDERS.add("toy", "test_registry_helpers:missing")  # a lazy string is resolved only on use
    BUILDERS.remove("toy")
    BUILDERS.add("toy", ToyBuilder)
    STRATEGIES.add("toy", "online", ToyStrategy)
    try:
        spec = MANIFEST_REGISTRY.create("Toy")
        assert select_builder(spec) is ToyBuilder
        assert isinstance(select_strategy(spec), ToyStrategy)
        # a registration may override the strategy
        assert isinstance(select_strategy(MANIFEST_REGISTRY.create("ToySub")), OtherStrategy)
        # a user subclass of a registered spec routes like its parent
        assert select_builder(ToySubclassSpec()) is ToyBuilder
    finally:
        MANIFEST_REGISTRY.remove("Toy")
        MANIFEST_REGISTRY.remove("ToySub")
        BUILDERS.remove("toy")
        STRATEGIES.remove("toy", "online")


def test_select_rejects_non_specs() -> None:
    with pytest.raises(TypeError):
        select_builder("PPO")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        select_strategy(object())  # type: ignore[arg-type]


def test_unknown_paradigm_lists_registered_builders() -> None:
    class LonelySpec(AlgorithmSpec):
        paradigm: ClassVar[str] = "lonely"

    with pytest.raises(UnknownNameError, match="unknown paradigm 'lonely'"):
        select_builder(LonelySpec())


class CounterEnvSpec(EnvSpec):
    env_type: str = "counter"
    start: int = 0


def make_counter(spec: CounterEnvSpec, *, seed: int | None = None) -> dict[str, Any]:
    return {"start": spec.start, "seed": seed}


def test_make_env_dispatches_on_env_type_and_passes_accepted_kwargs() -> None:
    ENV_TYPES.add("counter", CounterEnvSpec, make_counter, make_counter_env=make_counter)
    try:
        env = make_env(CounterEnvSpec(start=3), seed=7, tokenizer="ignored: not accepted")
        assert env == {"start": 3, "seed": 7}
        assert ENV_TYPES.function("make_counter_env") is make_counter
    finally:
        ENV_TYPES.remove("counter")


def test_seed_names_say_which_plugin_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import agilerl.models as models
    from agilerl.models.env import make_gym_env

    monkeypatch.setenv("AGILERL_LOAD_PLUGINS", "")
    plugins.reset()
    try:
        with pytest.raises(MissingPluginError, match="pip install agilerl-plugin-gym"):
            make_gym_env(None)
        with pytest.raises(MissingPluginError, match="pip install agilerl-plugin-gym"):
            models.PPOSpec  # noqa: B018
        with pytest.raises(MissingPluginError, match="agilerl-plugin-llm"):
            models.LLMEnvSpec  # noqa: B018
        with pytest.raises(MissingPluginError, match="pip install agilerl-plugin-llm"):
            models.LLMAlgorithmSpec  # noqa: B018
        with pytest.raises(AttributeError):
            models.NoSuchThing  # noqa: B018
    finally:
        monkeypatch.delenv("AGILERL_LOAD_PLUGINS")
        plugins.reset()
