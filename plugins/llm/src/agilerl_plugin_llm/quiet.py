"""No Hugging Face progress bars in a log: ``Generating train split``, ``Loading weights`` and the
hub's download bars are drawn for a person at a terminal. Piped into a file they are hundreds of
carriage-return fragments, so a run whose stderr is not a terminal turns them off.

The user's own say wins: ``HF_HUB_DISABLE_PROGRESS_BARS`` or ``HF_DATASETS_DISABLE_PROGRESS_BARS``
set (to anything) leaves the libraries as configured.
"""

from __future__ import annotations

import os
import sys

__all__ = ["quiet_progress_bars"]


def _on_a_terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


def quiet_progress_bars() -> None:
    """Turn off the progress bars of the Hugging Face libraries already imported, when stderr is not
    a terminal. Call it after importing them and before they load anything."""
    if _on_a_terminal():
        return
    if "datasets" in sys.modules and "HF_DATASETS_DISABLE_PROGRESS_BARS" not in os.environ:
        import datasets

        datasets.disable_progress_bars()
    if "HF_HUB_DISABLE_PROGRESS_BARS" in os.environ:
        return
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # and the hub's
    elif "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
