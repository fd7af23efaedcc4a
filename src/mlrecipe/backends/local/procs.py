"""What the local backend adds to the host layer's nodes (:mod:`mlrecipe.backends.host.nodes`): the run id every
process of a step carries in its environment (so that processes that left their node's group are found too), the
nodes' temporary directories, and a run stopped or looked at from its handle alone (``uninstall``, ``resume``)."""

from __future__ import annotations

from collections.abc import Callable

import psutil

from mlrecipe.backends.host.nodes import alive, remove_node_temps, stop_nodes
from mlrecipe.backends.local.handle import LocalHandle
from mlrecipe.runtime.step_runtime import NODE_TEMP_NAME_VAR

RUN_ID_VAR = "MLRECIPE_RUN_ID"


def run_env(run_id: str, rank: int) -> dict[str, str]:
    """What node ``rank`` of run ``run_id`` adds to its env: the run id, and the name of its temporary directory (so
    that :func:`stop_run` can remove it after a SIGKILL)."""
    return {RUN_ID_VAR: run_id, NODE_TEMP_NAME_VAR: f"{run_id}-{rank}"}


def members(run_id: str) -> list[int]:
    """Every live process that belongs to the run ``run_id`` (found by its environment)."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get(RUN_ID_VAR) == run_id and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def run_alive(handle: LocalHandle) -> bool:
    """Whether any process of the run described by ``handle`` is still alive."""
    return any(alive(node.identity()) for node in handle.nodes) or bool(members(handle.run_id))


def stop_run(handle: LocalHandle, grace: float, reap: Callable[[], object] = lambda: None) -> None:
    """Stop every process of the run (the host layer's :func:`~mlrecipe.backends.host.nodes.stop_nodes`: SIGTERM,
    up to ``grace`` seconds, SIGKILL); once nothing of the run is left, remove the nodes' temporary directories (a
    node's step runtime removes its own, unless it got SIGKILL)."""
    if stop_nodes([node.identity() for node in handle.nodes], grace, reap=reap,
                  strays=lambda: members(handle.run_id)):
        remove_node_temps(run_env(handle.run_id, node.rank) for node in handle.nodes)
