"""Nodes on this machine: a typed node spec and a node group that starts, watches and stops them.

A :class:`NodeSpec` says what one node runs (argv, env, working directory, log file), whether it gets a host of its
own (private mount, UTS and pid namespaces, a hostname, bind mounts: :func:`host_argv`) and what devices it was
given. A :class:`NodeGroup` starts its nodes, each a process group in its own session that dies with the process
that started it (the parent-death rule), holds a pidfd of each (so a watcher learns at once that one ended), and
stops them with a grace: SIGTERM to every group, SIGKILL to what is left after ``grace`` seconds. A node is known by
its identity ``[pid, start ticks]`` (:func:`identity`), so a reused pid is never signalled.

SageMaker's local mode runs a training job's hosts as one group (``backends/sagemaker/local/supervisor.py``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlrecipe.backends.host.devices import Gpu

HOST_SCRIPT = ('set -e; h="$1"; shift; while [ "$1" != "--" ]; do mount --bind "$1" "$2"; shift 2; done; shift; '
               '[ -z "$h" ] || hostname "$h"; exec "$@"')


def stat_fields(pid: int | str) -> list[str] | None:
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
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def identity(pid: int) -> list[int]:
    """``[pid, start ticks]``: a process, not just a pid."""
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
    """End a node at once: SIGKILL to its leader (for a host, ``unshare``, whose ``--kill-child`` ends the host's
    pid namespace, so every process in it goes too) and to its process group."""
    if alive(ident):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(ident[0], signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(ident[0], signal.SIGKILL)


def host_argv(host: str, mounts: Sequence[tuple[str, str]], argv: list[str]) -> list[str]:
    """``argv`` as the entrypoint (pid 1) of host ``host``: private mount, UTS (hostname) and pid namespaces with
    ``mounts`` (source, target) bound in order."""
    prefix = ["unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc",
              "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")
    pairs = [p for m in mounts for p in m]
    return [*prefix, "sh", "-c", HOST_SCRIPT, "mlrecipe-sagemaker-host", host, *pairs, "--", *argv]


def bind_argv(mounts: Sequence[tuple[str, str]], argv: list[str]) -> list[str]:
    """``argv`` in a private mount namespace with ``mounts`` (source, target) bound in order (same pid)."""
    prefix = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")
    pairs = [p for m in mounts for p in m]
    return [*prefix, "sh", "-c", HOST_SCRIPT, "mlrecipe-sagemaker-endpoint", "", *pairs, "--", *argv]


def set_parent_death_kill() -> None:
    """In a child before exec: SIGKILL when the parent dies, so no node outlives the process that started it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True)
class NodeSpec:
    """One node: what it runs and where its output goes; ``hostname`` set: a host of its own (namespaces, that
    hostname, ``mounts`` bound as (source, target)); the devices it was given (``gpus``: also in its env's
    ``CUDA_VISIBLE_DEVICES``; ``cpus``: how many CPUs it counts for)."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path | None = None
    hostname: str | None = None
    mounts: tuple[tuple[str, str], ...] = ()
    gpus: tuple[Gpu, ...] = ()
    cpus: int = 1

    def command(self) -> list[str]:
        """The argv that is started: in its own namespaces when it is a host."""
        return host_argv(self.hostname, self.mounts, self.argv) if self.hostname is not None else self.argv


@dataclass
class NodeGroup:
    """The nodes of one group, started together, watched through pidfds, stopped together; ``pass_fds`` go to
    every node (the GPU lease, so that it lasts as long as they do)."""

    specs: list[NodeSpec]
    pass_fds: Sequence[int] = ()
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _exit_fds: dict[int, int] = field(default_factory=dict)

    def start(self) -> None:
        """Start every node, in order (each in its own session, dying with this process)."""
        for spec in self.specs:
            spec.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(spec.log_path, "ab") as log:
                p = subprocess.Popen(spec.command(), env=spec.env, cwd=spec.cwd, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, pass_fds=tuple(self.pass_fds),
                                     start_new_session=True, preexec_fn=set_parent_death_kill)
            self.processes.append(p)
            with contextlib.suppress(AttributeError, OSError):
                self._exit_fds[p.pid] = os.pidfd_open(p.pid)

    def identities(self) -> list[list[int]]:
        """Each node's ``[pid, start ticks]``, in order."""
        return [identity(p.pid) for p in self.processes]

    def codes(self) -> list[int | None]:
        """Each node's exit status, None while it runs."""
        return [p.poll() for p in self.processes]

    def alive(self) -> bool:
        """Whether any node still runs."""
        return any(code is None for code in self.codes())

    def wait_any(self, timeout: float) -> None:
        """Return when a running node ends, or after ``timeout`` seconds (a signal's handler ends it too)."""
        fds = [self._exit_fds[p.pid] for p in self.processes if p.returncode is None and p.pid in self._exit_fds]
        if len(fds) < sum(p.returncode is None for p in self.processes):  # no pidfd for one: look again soon
            timeout = min(timeout, 0.05)
        if not fds:
            time.sleep(max(timeout, 0))
            return
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        poller.poll(max(timeout, 0) * 1000)

    def stop(self, grace: float) -> None:
        """SIGTERM to every node's group, up to ``grace`` seconds for them to end, then SIGKILL; returns once every
        node has been reaped."""
        idents = self.identities()
        for ident in idents:
            signal_group(ident, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.alive() and (left := deadline - time.monotonic()) > 0:
            self.wait_any(left)
        for ident in idents:
            kill_host(ident)
        for p in self.processes:
            p.wait()
        self.close()

    def close(self) -> None:
        """Let go of the pidfds."""
        for fd in self._exit_fds.values():
            os.close(fd)
        self._exit_fds.clear()
