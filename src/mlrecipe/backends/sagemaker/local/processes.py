"""Processes of local SageMaker mode: identified by pid and start time (so a reused pid is never signalled), each
host a process group whose leader is ``unshare`` holding the host's own mount, UTS and pid namespaces."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from mlrecipe.runtime.step_runtime import NODE_TEMP_NAME_VAR, named_node_temp_dir

HOST_SCRIPT = ('set -e; h="$1"; shift; while [ "$1" != "--" ]; do mount --bind "$1" "$2"; shift 2; done; shift; '
               '[ -z "$h" ] || hostname "$h"; exec "$@"')


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (the state first), or None when the process is
    gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else fields


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when it is gone (a zombie counts as gone)."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def identity(pid: int) -> list[int]:
    return [pid, start_time(pid) or 0]


def alive(ident: list[int] | None) -> bool:
    """True while the process ``[pid, start time]`` still runs."""
    return ident is not None and len(ident) == 2 and start_time(ident[0]) == ident[1]


def signal_group(ident: list[int], signum: int) -> None:
    """Send ``signum`` to the process group led by ``ident`` (if that leader still runs)."""
    if alive(ident):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(ident[0], signum)


def kill_host(ident: list[int]) -> None:
    """End a host at once: SIGKILL to ``unshare`` (its ``--kill-child`` ends the host's pid namespace, so every
    process in the host goes with it) and to its process group."""
    if alive(ident):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(ident[0], signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(ident[0], signal.SIGKILL)


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``: a host's processes still hold its sockets and
    files for a moment after its ``unshare`` leader is gone."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
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


def host_argv(host: str, mounts: list[tuple[str, str]], argv: list[str]) -> list[str]:
    """``argv`` as the entrypoint (pid 1) of host ``host``: private mount, UTS (hostname) and pid namespaces with
    ``mounts`` (source, target) bound in order."""
    prefix = ["unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc",
              "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")
    pairs = [p for m in mounts for p in m]
    return [*prefix, "sh", "-c", HOST_SCRIPT, "mlrecipe-sagemaker-host", host, *pairs, "--", *argv]


def bind_argv(mounts: list[tuple[str, str]], argv: list[str]) -> list[str]:
    """``argv`` in a private mount namespace with ``mounts`` (source, target) bound in order (same pid)."""
    prefix = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")
    pairs = [p for m in mounts for p in m]
    return [*prefix, "sh", "-c", HOST_SCRIPT, "mlrecipe-sagemaker-endpoint", "", *pairs, "--", *argv]


def set_parent_death_kill() -> None:
    """In a child before exec: SIGKILL when the parent (the job's supervisor) dies, so no host outlives it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


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
