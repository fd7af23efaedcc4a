"""The real Slurm cluster of the Slurm tests: one controller and two slurmd "nodes" on 127.0.0.1.

Started once per session on first use and stopped (jobs cancelled, daemons ended, files removed)
at the end. Without Slurm the tests that need it skip with the reason, except in CI (CI=true),
where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.serve.serving import tiny_model  # noqa: F401  (a fixture: the serving tests' model, for serving jobs)
from tests.slurm.cluster import Cluster, ClusterError, start_cluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    try:
        cluster = start_cluster()
    except ClusterError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the Slurm test cluster must start in CI: {exc}")
        pytest.skip(f"no Slurm test cluster on this machine: {exc}")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        cluster.stop()
