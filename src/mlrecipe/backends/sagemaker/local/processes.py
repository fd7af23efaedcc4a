"""Processes of local SageMaker mode: identified by pid and start time (so a reused pid is never signalled), each
host a process group whose leader is ``unshare`` holding the host's own mount, UTS and pid namespaces. The identity,
the namespace wrapper and the parent-death rule are the host layer's (:mod:`mlrecipe.backends.host.nodes`); what is
here is particular to local mode (a group's members after its leader, ending an endpoint's server, host temps)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from mlrecipe.backends.host.nodes import (
    alive,
    bind_argv,
    host_argv,
    identity,
    kill_host,
    set_parent_death_kill,
    signal_group,
    start_time,
    stat_fields,
)
from mlrecipe.runtime.step_runtime import NODE_TEMP_NAME_VAR, named_node_temp_dir

__all__ = ["alive", "bind_argv", "end_host", "group_members", "host_argv", "host_temp_env", "identity", "kill_host",
           "remove_host_temps", "set_parent_death_kill", "signal_group", "start_time"]

def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``: a host's processes still hold its sockets and
    files for a moment after its ``unshare`` leader is gone."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat_fields(entry.name)
            if fields is not None and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def end_host(ident: list[int], grace: float, reap: Callable[[], object] = lambda: None) -> None:
    """Stop a host and return once none of its processes runs: SIGTERM to its group, up to ``grace`` seconds,
    then SIGKILL (``reap`` is called while waiting, so that a host started by this process is reaped)."""
    signal_group(ident, signal.SIGTERM)
    _wait_group_gone(ident, grace, reap)
    kill_host(ident)
    if group_members(ident[0]):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(ident[0], signal.SIGKILL)
    _wait_group_gone(ident, 5.0, reap)


def _wait_group_gone(ident: list[int], timeout: float, reap: Callable[[], object]) -> None:
    deadline = time.monotonic() + timeout
    while (alive(ident) or group_members(ident[0])) and time.monotonic() < deadline:
        reap()
        time.sleep(0.05)


def host_temp_env(root: Path, job: str, host: str) -> dict[str, str]:
    """What names a host's temporary directory (the step runtime's ``/tmp/mlrecipe-tmp-<name>``), so that
    :func:`remove_host_temps` finds it after the host was killed (its runtime could not remove it then)."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:8]
    return {NODE_TEMP_NAME_VAR: f"sm-{digest}-{job}-{host}"}


def remove_host_temps(hosts: list[dict], idents: list[list[int]], wait: float = 5.0) -> None:
    """Remove the named temporary directories of ``hosts`` (their ``env``) once no process of the host groups
    ``idents`` runs (waiting at most ``wait`` seconds; a directory a live process may still use is kept)."""
    deadline = time.monotonic() + wait
    while any(alive(i) or group_members(i[0]) for i in idents) and time.monotonic() < deadline:
        time.sleep(0.05)
    if any(alive(i) or group_members(i[0]) for i in idents):
        return
    for host in hosts:
        name = (host.get("env") or {}).get(NODE_TEMP_NAME_VAR)
        if name and os.path.basename(name) == name:
            shutil.rmtree(named_node_temp_dir(name), ignore_errors=True)
