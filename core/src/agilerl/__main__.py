"""``python -m agilerl``: the ``agilerl`` CLI (so launchers such as ``torchrun -m agilerl`` and
``accelerate launch -m agilerl`` can start it)."""

import sys

from agilerl.cli import main

if __name__ == "__main__":
    sys.exit(main())
