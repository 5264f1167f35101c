"""A local Ray instance for the Ray-backend tests: 2 CPUs, no dashboard, shut down at the end."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason="the Ray backend needs the extra: pip install 'agilerl-core[ray]'")
    ray.init(
        address="local",  # its own instance, whatever other cluster this machine runs or /tmp/ray names
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "AGILERL_STRICT_PLUGINS": "1"}},
    )
    os.environ.pop("RAY_ADDRESS", None)
    try:
        yield ray
    finally:
        ray.shutdown()
