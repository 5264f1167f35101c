"""``python -m agilerl`` runs the ``agilerl`` command line."""

import sys

from agilerl.cli import main

sys.exit(main())
