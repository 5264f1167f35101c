"""Versioned paradigm protocols: a plugin algorithm class is checked against the protocol its
strategy declares, and the message names what it lacks and what changed since its version."""

from __future__ import annotations

from typing import Protocol

import pytest

from agilerl.errors import PluginError
from agilerl.protocols import VersionedProtocol, check_algorithm_class, missing_methods, protocol_methods


class Base(Protocol):
    steps: int

    def act(self, obs: object) -> object: ...


class Widget(Base, Protocol):
    def layout(self) -> object: ...

    def learn(self, batch: object) -> dict[str, float]: ...


V3 = VersionedProtocol(
    "toy widget", Widget, 3, {1: "first", 2: "learn() takes a batch", 3: "added layout()"}, "docs/toy.md"
)


class Complete:
    protocol_version = 3

    def act(self, obs: object) -> object:
        return obs

    def layout(self) -> object:
        return ()

    def learn(self, batch: object) -> dict[str, float]:
        return {}


class OldWidget:
    protocol_version = 1

    def act(self, obs: object) -> object:
        return obs

    def learn(self, batch: object) -> dict[str, float]:
        return {}


def test_methods_of_a_protocol_and_its_bases_are_checked() -> None:
    assert protocol_methods(Widget) == ["act", "layout", "learn"]
    assert missing_methods(OldWidget, Widget) == ["layout"]
    check_algorithm_class(Complete, V3, name="Complete")


def test_an_old_class_is_told_what_it_lacks_and_what_changed_since_its_version() -> None:
    with pytest.raises(PluginError) as info:
        check_algorithm_class(OldWidget, V3, name="Old")
    msg = str(info.value)
    assert f"Old ({__name__}.OldWidget) does not implement the toy widget protocol, version 3" in msg
    assert "it lacks layout()." in msg
    assert (
        "declares protocol_version 1; changed since: version 2: learn() takes a batch; version 3: added layout()" in msg
    )
    assert "docs/toy.md" in msg


def test_a_class_written_for_a_newer_version_asks_for_an_upgrade() -> None:
    class Future(Complete):
        protocol_version = 4

    with pytest.raises(
        PluginError, match=r"written for version 4 of the toy widget protocol.*speaks version 3: upgrade"
    ):
        check_algorithm_class(Future, V3, name="Future")
