"""agilerl: train agents, populations and fine-tuned models from one validated YAML manifest.
This is the core; paradigms come from plugins (entry-point group ``agilerl``). ``import agilerl`` imports no torch and no plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agilerl.hookspecs import hookimpl
from agilerl.registry import MANIFEST_REGISTRY

__version__ = "0.1.0"
#: Which distribution this package comes from (the PyPI package ``agilerl`` shares the import name).
__distribution__ = "agilerl-core"


class PackageClashWarning(UserWarning):
    """The PyPI distribution ``agilerl`` is installed next to agilerl-core (same import name)."""


def _warn_if_shadowed() -> None:
    try:
        from _agilerl_guard import foreign_agilerl
    except ImportError:  # pragma: no cover - a broken install without the launcher module
        return
    problem = foreign_agilerl()
    if problem:
        import warnings

        warnings.warn(problem, PackageClashWarning, stacklevel=3)


_warn_if_shadowed()

if TYPE_CHECKING:
    from agilerl.export import export_policy
    from agilerl.inference import evaluate, load
    from agilerl.training.loop import TrainResult
    from agilerl.training.trainer import LocalTrainer, train

_LAZY = {
    "LocalTrainer": "agilerl.training.trainer",
    "train": "agilerl.training.trainer",
    "TrainResult": "agilerl.training.loop",
    "load_manifest": "agilerl.models.manifest",
    "validate_manifest": "agilerl.models.manifest",
    "TrainingManifest": "agilerl.models.manifest",
    "load": "agilerl.inference",
    "evaluate": "agilerl.inference",
    "export_policy": "agilerl.export",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agilerl' has no attribute {name!r}")


__all__ = [
    "MANIFEST_REGISTRY",
    "LocalTrainer",
    "TrainResult",
    "__version__",
    "evaluate",
    "export_policy",
    "hookimpl",
    "load",
    "train",
]
