"""The ``agilerl`` command's launcher, which checks that ``import agilerl`` is agilerl-core first.

The PyPI distribution ``agilerl`` (AgileRL) installs a package with the same import name as
agilerl-core's, ``agilerl``. Installed side by side, one shadows or overwrites the other: Python
imports whichever comes first on ``sys.path`` (or a mix of both packages' files, if pip wrote both
into one ``site-packages``). This module lives outside the ``agilerl`` package so the ``agilerl``
command can say so even when ``import agilerl`` gives the other package, or fails.

Our choice: agilerl-core keeps the import name ``agilerl`` (the seed API and every plugin import
it), so the two cannot share an environment; we detect the clash (:mod:`_agilerl_guard`, which
``agilerl`` itself also asks) and say which to uninstall.
"""

from __future__ import annotations

import sys
from typing import Any

from _agilerl_guard import DISTRIBUTION, foreign_agilerl


def main() -> Any:
    """The ``agilerl`` console script: check that ``import agilerl`` is agilerl-core, then run the CLI."""
    try:
        import agilerl  # deferred: the launcher checks which package ``import agilerl`` gives
    except Exception as exc:
        problem = foreign_agilerl()
        if problem is None:
            raise
        print(f"error: import agilerl failed ({type(exc).__name__}: {exc}); {problem}", file=sys.stderr)
        return 2
    if getattr(agilerl, "__distribution__", None) != DISTRIBUTION:
        problem = foreign_agilerl() or "another package named 'agilerl' shadows agilerl-core"
        where = getattr(agilerl, "__file__", "?")
        print(f"error: 'import agilerl' gives {where}, not {DISTRIBUTION}; {problem}", file=sys.stderr)
        return 2
    from agilerl.cli import main as cli_main  # deferred: only once agilerl is known to be agilerl-core

    return cli_main()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
