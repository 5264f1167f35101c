#!/usr/bin/env python
"""Regenerate the generated reference pages in docs/:

- docs/plugins/hooks.md   — every hook (core's and plugin-defined), exact signature and docstring;
- docs/reference/manifest.md — every manifest section and field (`agilerl schema --markdown`).

Run after changing hookspecs or specs: `python scripts/gen_docs.py`. A test fails when a hook is
missing from the generated page.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def hook_specs() -> list[tuple[str, str, str, str]]:
    """(name, signature, docstring, defining module) for every hook the plugin manager knows."""
    from agilerl.plugins import get_plugin_manager

    pm = get_plugin_manager()
    out = []
    for name in sorted(vars(pm.hook)):
        caller = getattr(pm.hook, name)
        spec = getattr(caller, "spec", None)
        if spec is None:
            continue
        fn = spec.function
        sig = str(inspect.signature(fn)).replace("'", "")
        out.append((name, f"{name}{sig}", inspect.getdoc(fn) or "", fn.__module__))
    return out


def hooks_page() -> str:
    lines = [
        "# Hook reference",
        "",
        "Generated from the hook specifications by `scripts/gen_docs.py`; do not edit by hand.",
        "Implement a hook by defining a function of the same name decorated with `agilerl.hookimpl`",
        "in the module your distribution names in its `agilerl` entry point. Hooks are called with",
        "keyword arguments; an implementation may take a subset of them.",
        "",
    ]
    for name, sig, doc, module in hook_specs():
        lines += [f"## `{name}`", "", f"Defined in `{module}`.", "", "```python", f"def {sig}", "```", "", doc, ""]
    return "\n".join(lines)


def manifest_page() -> str:
    """The manifest reference: ``agilerl schema --markdown`` (core generates it)."""
    from agilerl.schema import manifest_markdown

    return manifest_markdown()


def main() -> int:
    (ROOT / "docs/plugins").mkdir(parents=True, exist_ok=True)
    (ROOT / "docs/reference").mkdir(parents=True, exist_ok=True)
    (ROOT / "docs/plugins/hooks.md").write_text(hooks_page())
    (ROOT / "docs/reference/manifest.md").write_text(manifest_page())
    print("wrote docs/plugins/hooks.md and docs/reference/manifest.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
