"""Plugin loading: entry points, isolation of broken plugins, strict mode, allowlist, bad hooks."""

from __future__ import annotations

import json
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agilerl import hookimpl, plugins
from agilerl.errors import DuplicateRegistrationError, PluginError
from agilerl.registry import MANIFEST_REGISTRY


def make_distribution(root: Path, dist: str, module: str, source: str, version: str = "1.2.3") -> None:
    """A real installed distribution on disk: a module plus dist-info with an `agilerl` entry point."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[agilerl]\n{module} = {module}\n")


GOOD = """
    from agilerl import hookimpl
    from agilerl.models import AlgorithmSpec

    class GoodAlgoSpec(AlgorithmSpec):
        paradigm = "toy"

    @hookimpl
    def agilerl_register_algorithms(register):
        register(GoodAlgoSpec)
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path for fake installed distributions; plugins reloaded around the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("AGILERL_STRICT_PLUGINS", raising=False)
    plugins.reset()
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith(("good_plugin", "broken_plugin", "typo_plugin", "dup_"))]:
        del sys.modules[name]
    monkeypatch.undo()
    plugins.reset()


def test_plugins_are_discovered_through_entry_points(site: Path) -> None:
    make_distribution(site, "good-plugin", "good_plugin", GOOD)
    assert "GoodAlgo" in MANIFEST_REGISTRY.names()
    info = {i.name: i for i in plugins.plugin_infos()}["good_plugin"]
    assert (info.distribution, info.version, info.error) == ("good-plugin", "1.2.3", None)
    assert info.hooks == ["agilerl_register_algorithms"]
    assert MANIFEST_REGISTRY.entry("GoodAlgo").provider == "good_plugin"


def test_a_broken_plugin_is_reported_and_the_others_still_work(site: Path) -> None:
    make_distribution(site, "good-plugin", "good_plugin", GOOD)
    make_distribution(site, "broken-plugin", "broken_plugin", "raise RuntimeError('kaboom')\n", version="0.9")
    with pytest.warns(
        plugins.PluginLoadWarning, match=r"'broken_plugin' \(broken-plugin 0.9\) failed to load: RuntimeError: kaboom"
    ):
        names = MANIFEST_REGISTRY.names()
    assert "GoodAlgo" in names
    info = {i.name: i for i in plugins.plugin_infos()}["broken_plugin"]
    assert info.error == "RuntimeError: kaboom"


def test_a_plugin_whose_hook_raises_is_named_and_skipped(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_distribution(site, "good-plugin", "good_plugin", GOOD)
    hook = "from agilerl import hookimpl\n\n@hookimpl\ndef agilerl_register_algorithms(register):\n    raise KeyError('x')\n"
    make_distribution(site, "broken-plugin", "broken_plugin", hook, version="0.9")
    with pytest.warns(
        plugins.PluginLoadWarning, match=r"'broken_plugin' \(broken-plugin 0.9\) failed in agilerl_register_"
    ):
        assert "GoodAlgo" in MANIFEST_REGISTRY.names()
    info = {i.name: i for i in plugins.plugin_infos()}["broken_plugin"]
    assert info.error == "agilerl_register_algorithms: KeyError: 'x'"
    MANIFEST_REGISTRY.invalidate()
    monkeypatch.setenv("AGILERL_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match=r"broken-plugin 0\.9"):
        MANIFEST_REGISTRY.names()


def test_a_plugin_using_lazy_core_names_at_import_loads_once(site: Path) -> None:
    """Re-entrant loading: the plugin's import asks a registry (via agilerl.models) mid-load."""
    source = GOOD.replace(
        "from agilerl.models import AlgorithmSpec", "from agilerl.models import AlgorithmSpec, GoodAlgoSpec as _"
    )
    make_distribution(site, "good-plugin", "good_plugin", GOOD)
    make_distribution(site, "dup-lazy", "dup_lazy", source.replace("GoodAlgoSpec(", "LazyAlgoSpec(")
                      .replace("register(GoodAlgoSpec)", "register(LazyAlgoSpec)"))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert {"GoodAlgo", "LazyAlgo"} <= set(MANIFEST_REGISTRY.names())
    assert all(i.error is None for i in plugins.plugin_infos())


def test_a_stale_editable_install_only_warns_even_in_strict_mode(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout that renamed a package leaves its old editable install behind (source gone)."""
    make_distribution(site, "good-plugin", "good_plugin", GOOD)
    make_distribution(site, "gone-plugin", "gone_plugin", GOOD, version="0.1")
    (site / "gone_plugin.py").unlink()
    url = (site / "moved-away").as_uri()
    (site / "gone_plugin-0.1.dist-info" / "direct_url.json").write_text(
        json.dumps({"dir_info": {"editable": True}, "url": url})
    )
    monkeypatch.setenv("AGILERL_STRICT_PLUGINS", "1")
    with pytest.warns(plugins.PluginLoadWarning, match=r"stale editable install.*pip uninstall gone-plugin"):
        assert "GoodAlgo" in MANIFEST_REGISTRY.names()


def test_strict_mode_reraises(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_distribution(site, "broken-plugin", "broken_plugin", "raise RuntimeError('kaboom')\n")
    monkeypatch.setenv("AGILERL_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="kaboom"):
        MANIFEST_REGISTRY.names()


def test_allowlist_loads_only_the_named_plugins(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_distribution(site, "good-plugin", "good_plugin", GOOD)
    make_distribution(site, "broken-plugin", "broken_plugin", "raise RuntimeError('kaboom')\n")
    monkeypatch.setenv("AGILERL_LOAD_PLUGINS", "good-plugin")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the broken one is not even imported
        assert [i.name for i in plugins.plugin_infos()] == ["good_plugin"]
    plugins.reset()
    monkeypatch.setenv("AGILERL_LOAD_PLUGINS", "")
    assert plugins.plugin_infos() == []
    assert MANIFEST_REGISTRY.names() == []


def test_disable_list(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_distribution(site, "good-plugin", "good_plugin", GOOD)
    monkeypatch.setenv("AGILERL_DISABLE_PLUGINS", "good_plugin")
    assert "GoodAlgo" not in MANIFEST_REGISTRY.names()


def test_a_misspelled_hook_implementation_is_rejected(site: Path) -> None:
    make_distribution(
        site,
        "typo-plugin",
        "typo_plugin",
        """
        from agilerl import hookimpl

        @hookimpl
        def agilerl_register_algorithm(register):  # missing the final 's'
            pass
        """,
    )
    with pytest.raises(PluginError, match="agilerl_register_algorithm"):
        MANIFEST_REGISTRY.names()


def test_two_plugins_registering_one_name_make_only_that_name_ambiguous(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agilerl.errors import AmbiguousNameError

    for i in (1, 2):
        make_distribution(site, f"dup-{i}", f"dup_{i}", GOOD)
    make_distribution(site, "good-plugin", "good_plugin", GOOD.replace("GoodAlgo", "OtherAlgo"))
    monkeypatch.setenv("AGILERL_STRICT_PLUGINS", "1")  # a clash is no plugin failure, even strict
    names = MANIFEST_REGISTRY.names()
    assert {"OtherAlgo", "dup_1:GoodAlgo", "dup_2:GoodAlgo"} <= set(names) and "GoodAlgo" not in names
    assert MANIFEST_REGISTRY.get("OtherAlgo").__name__ == "OtherAlgoSpec"  # the rest still works
    with pytest.raises(AmbiguousNameError) as info:
        MANIFEST_REGISTRY.get("GoodAlgo")
    said = str(info.value)
    assert "algorithm 'GoodAlgo' is registered by 2 plugins: 'dup_1' (dup-1 1.2.3) and 'dup_2' (dup-2 1.2.3)" in said
    assert "name: dup_1:GoodAlgo" in said and "AGILERL_PROVIDER_GOODALGO=dup_1" in said
    # picked by entry-point or distribution name, in the name or in the environment
    assert MANIFEST_REGISTRY.entry("dup_2:GoodAlgo").provider == "dup_2"
    assert MANIFEST_REGISTRY.entry("dup-1:GoodAlgo").provider == "dup_1"
    monkeypatch.setenv("AGILERL_PROVIDER_GOODALGO", "dup-2")
    assert MANIFEST_REGISTRY.entry("GoodAlgo").provider == "dup_2"
    monkeypatch.setenv("AGILERL_PROVIDER_GOODALGO", "dup-3")
    with pytest.raises(AmbiguousNameError, match="AGILERL_PROVIDER_GOODALGO=dup-3 names none of them"):
        MANIFEST_REGISTRY.get("GoodAlgo")
    assert MANIFEST_REGISTRY.clashes() == {"GoodAlgo": ["dup_1", "dup_2"]}


def test_in_process_plugins_and_plugin_defined_hookspecs(register_plugin: Any) -> None:
    """A plugin can add hook specs of its own; another plugin implements them."""
    import types

    from agilerl.hookspecs import hookspec

    specs = types.ModuleType("my_specs")

    def my_register_widgets(register: Any) -> None:
        """Plugin-defined hook."""

    specs.my_register_widgets = hookspec(my_register_widgets)  # type: ignore[attr-defined]

    class Host:
        @hookimpl
        def agilerl_add_hookspecs(self, plugin_manager: Any) -> None:
            plugin_manager.add_hookspecs(specs)

    class Impl:
        @hookimpl
        def my_register_widgets(self, register: Any) -> None:
            register("widget")

    plugins.reset()
    plugins.load_plugins()
    pm = plugins.get_plugin_manager()
    Host().agilerl_add_hookspecs(pm)  # what load_plugins does for entry-point plugins
    register_plugin(Impl(), name="impl")
    got: list[str] = []
    pm.hook.my_register_widgets(register=got.append)
    assert got == ["widget"]


def test_a_plugin_defined_hook_fills_a_hook_table_in_one_line(register_plugin: Any) -> None:
    """``HookTable``: core's registry behaviour (providers, duplicates, refill) for a plugin's own hook."""
    import types

    from agilerl.errors import UnknownNameError
    from agilerl.hookspecs import hookspec
    from agilerl.registry import HookTable

    widgets = HookTable("my_register_gadgets", kind="gadget")  # the one line
    assert widgets.keys() == []  # no plugin declares the hook yet: an empty table, no error
    specs = types.ModuleType("gadget_specs")

    def my_register_gadgets(register: Any) -> None:
        """Plugin-defined hook."""

    specs.my_register_gadgets = hookspec(my_register_gadgets)  # type: ignore[attr-defined]

    class Impl:
        def __init__(self, value: Any) -> None:
            self.value = value

        @hookimpl
        def my_register_gadgets(self, register: Any) -> None:
            register("knob", self.value, colour="red")

    plugins.reset()
    plugins.load_plugins()
    plugins.get_plugin_manager().add_hookspecs(specs)
    register_plugin(Impl("my_pkg:Knob"), name="knobs")  # a registration refills the table
    entry = widgets.entry("knob")
    assert (entry.value, entry.provider, entry.extra) == ("my_pkg:Knob", "knobs", {"colour": "red"})
    with pytest.raises(UnknownNameError, match="gadget"):
        widgets.entry("knot")
    register_plugin(Impl("other_pkg:Knob"), name="other-knobs")
    with pytest.raises(
        DuplicateRegistrationError,
        match=r"gadget 'knob' is registered twice: by '(other-)?knobs' and by '(other-)?knobs'",
    ):
        widgets.keys()


# --- the same failures seen from the CLI: one screen, exit 1 or 2, never a bare traceback ----------


def test_cli_reports_a_broken_plugin_and_keeps_working(site: Path, run_cli: Any) -> None:
    make_distribution(site, "good-plugin", "good_plugin", GOOD)
    make_distribution(site, "broken-plugin", "broken_plugin", "raise ImportError('needs libfoo')\n", version="0.9")
    code, out, err = run_cli("algorithms")
    assert code == 0 and "GoodAlgo" in out
    assert (
        "warning: agilerl plugin 'broken_plugin' (broken-plugin 0.9) failed to load: ImportError: needs libfoo" in err
    )
    assert "Traceback" not in err and "warnings.warn" not in err


def test_cli_strict_mode_fails_with_exit_2(site: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    make_distribution(site, "broken-plugin", "broken_plugin", "raise ImportError('needs libfoo')\n")
    monkeypatch.setenv("AGILERL_STRICT_PLUGINS", "1")
    code, _, err = run_cli("algorithms")
    assert code == 2 and "needs libfoo" in err and "Traceback" not in err


def test_cli_shows_a_clash_and_refuses_only_the_ambiguous_name(
    site: Path, run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_distribution(site, "dup-1", "dup_1", GOOD)
    make_distribution(site, "dup-2", "dup_2", GOOD)
    monkeypatch.setenv("AGILERL_LOAD_PLUGINS", "dup-1,dup-2")
    code, out, err = run_cli("algorithms")
    assert code == 0 and "dup_1:GoodAlgo" in out and "dup_2:GoodAlgo" in out, err
    code, out, err = run_cli("plugins")
    assert code == 0, err
    assert "clash: algorithm 'GoodAlgo' is registered by 'dup_1' and 'dup_2'" in out
    assert "name: dup_1:GoodAlgo" in out and "AGILERL_PROVIDER_GOODALGO=dup_1" in out
    code, out, _ = run_cli("plugins", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["dup_1"]["clashes"] == [{"kind": "algorithm", "name": "GoodAlgo", "providers": ["dup_1", "dup_2"]}]
    manifest = tmp_path / "m.yaml"
    manifest.write_text("algorithm: {name: GoodAlgo}\nenvironment: {env_type: none}\n")
    code, _, err = run_cli("validate", manifest)
    assert code != 0 and "algorithm.name: algorithm 'GoodAlgo' is registered by 2 plugins" in err, err
    assert "Traceback" not in err


def test_cli_misspelled_hook_implementation(site: Path, run_cli: Any) -> None:
    make_distribution(
        site,
        "typo-plugin",
        "typo_plugin",
        "from agilerl import hookimpl\n\n@hookimpl\ndef agilerl_register_strategy(register):\n    pass\n",
    )
    code, _, err = run_cli("algorithms")
    assert code == 2 and "agilerl_register_strategy" in err and "hook reference" in err and "Traceback" not in err
