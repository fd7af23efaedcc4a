"""What local SageMaker mode adds to the host layer's nodes (:mod:`mlrecipe.backends.host.nodes`, which holds the
identity, the namespace wrapper, the parent-death rule and the stop with a grace): the named temporary directory of
each host, removed once no process of the hosts runs (a killed host's step runtime could not remove it)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from mlrecipe.backends.host.nodes import alive, node_members, remove_node_temps
from mlrecipe.runtime.step_runtime import NODE_TEMP_NAME_VAR


def host_temp_env(root: Path, job: str, host: str) -> dict[str, str]:
    """What names a host's temporary directory (the step runtime's ``/tmp/mlrecipe-tmp-<name>``), so that
    :func:`remove_host_temps` finds it after the host was killed (its runtime could not remove it then)."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:8]
    return {NODE_TEMP_NAME_VAR: f"sm-{digest}-{job}-{host}"}


def remove_host_temps(hosts: list[dict], idents: list[list[int]], wait: float = 5.0) -> None:
    """Remove the named temporary directories of ``hosts`` (their ``env``) once no process of the host groups
    ``idents`` runs (waiting at most ``wait`` seconds; a directory a live process may still use is kept)."""
    deadline = time.monotonic() + wait
    while any(alive(i) or node_members(i) for i in idents) and time.monotonic() < deadline:
        time.sleep(0.05)
    if any(alive(i) or node_members(i) for i in idents):
        return
    remove_node_temps(host.get("env") or {} for host in hosts)
