"""``"module:attribute"`` references, resolved in one place for core and plugins alike.

Manifests and registrations name classes and functions as strings (``my_envs:make_env``) so that
nothing heavy is imported until it is used. :func:`import_object` is the one resolver: plugins call
it with their own error type, so every bad reference reads the same way and names its field.
"""

from __future__ import annotations

import importlib
from typing import Any

from agilerl.errors import PluginError, closest


def split_reference(ref: str, *, dotted_ok: bool = False) -> tuple[str, str] | None:
    """``("module", "attr.path")`` for ``"module:attr.path"`` (or ``"module.attr"`` when
    ``dotted_ok``); ``None`` when ``ref`` is neither."""
    module_name, sep, attr = ref.partition(":")
    if not sep and dotted_ok:
        module_name, _, attr = ref.rpartition(".")
    if not module_name or not attr or ":" in attr:
        return None
    return module_name, attr


def import_object(
    ref: str,
    *,
    what: str = "object",
    error: type[Exception] = PluginError,
    dotted_ok: bool = False,
    hint: str = "Check the spelling and that the package is installed.",
) -> Any:
    """Import the object ``ref`` names; raise ``error`` with a message starting ``"{what}: "``.

    :param ref: ``"package.module:Name"`` (an attribute path may follow: ``module:Outer.inner``).
    :param what: the manifest field or registration the reference came from.
    :param error: the exception type to raise (a plugin's own, usually an ``AgileRLError``).
    :param dotted_ok: accept ``"package.module.Name"`` as well.
    :param hint: appended when the module cannot be imported.
    """
    parts = split_reference(ref, dotted_ok=dotted_ok)
    if parts is None:
        form = "'package.module:Name'" + (" or 'package.module.Name'" if dotted_ok else "")
        raise error(f"{what}: {ref!r} is not an import path; write it as {form}")
    module_name, attr = parts
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or anything the module raises while importing
        raise error(
            f"{what}: cannot import module {module_name!r} for {ref!r}: {type(exc).__name__}: {exc}. {hint}"
        ) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            found = closest(part, [n for n in dir(target) if not n.startswith("_")])
            raise error(
                f"{what}: module {module_name!r} has no attribute {attr!r}"
                + (f"; did you mean {found!r}?" if found else "")
            ) from None
    return target


__all__ = ["import_object", "split_reference"]
