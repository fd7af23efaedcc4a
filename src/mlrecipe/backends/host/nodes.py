"""Nodes on this machine: a typed node spec and a node group that starts, watches and stops them.

A :class:`NodeSpec` says what one node runs (argv, env, working directory, log file), whether it gets a host of its
own (private mount, UTS and pid namespaces, a hostname, bind mounts: :func:`host_argv`), whether it outlives the
process that started it (a server) and what devices it was given. A :class:`NodeGroup` starts its nodes, each a
process group in its own session, holds a pidfd of each (so a watcher learns at once that one ended), and stops them
with :func:`stop_nodes`. What is here exists once:

- the namespace wrapper: :func:`unshare` (hosts, bind mounts, a Ray cluster's pid namespace);
- the process identity: ``[pid, start ticks]`` (:func:`identity`, :func:`alive`; from
  :mod:`mlrecipe.process_identity`, which the runner uses for the CLI's driver too), so a reused pid is never
  signalled;
- the parent-death rule: :meth:`NodeSpec.parent_death_signal`;
- the stop with a grace: :func:`stop_nodes`, from the node group that started the nodes or from their identities
  alone (another process: ``uninstall``, ``resume``);
- the device grant: a group's GPUs and CPU slots (:class:`~.grant.DeviceGrant`), handed to its nodes as they start.

The local backend runs a step's nodes as one group (``backends/local/running.py``), SageMaker's local mode a training
job's supervisor and an endpoint's model server, each a node that outlives its starter
(``backends/sagemaker/local/training.py``, ``hosting.py``), and the job's hosts (``supervisor.py``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from mlrecipe.backends.host.devices import Gpu
from mlrecipe.backends.host.grant import DeviceGrant
from mlrecipe.backends.host.mount_points import mount_argv
from mlrecipe.errors import LinkedPathError
from mlrecipe.process_identity import alive as alive
from mlrecipe.process_identity import identity as identity
from mlrecipe.process_identity import start_time as start_time
from mlrecipe.process_identity import stat_fields as stat_fields
from mlrecipe.runtime.step_runtime import NODE_TEMP_NAME_VAR, named_node_temp_dir

HOST_SCRIPT = 'set -e; [ -z "$1" ] || hostname "$1"; shift; exec "$@"'
KILL_CHILD = "--kill-child"  #: the option of :func:`unshare` ``pid=True`` that ends the namespace with unshare
STOP_LOOK_SECONDS = 0.05  #: how often a stop looks whether the nodes' processes are gone
KILLED_SECONDS = 5.0  #: how long processes sent SIGKILL get to be gone (a bound on waiting only)


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``: a node's processes may still run (and hold its
    sockets and files) after its leader is gone."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat_fields(entry.name)
            if fields is not None and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def node_members(ident: Sequence[int]) -> list[int]:
    """The live processes of the process group a node's leader ``ident`` started: while the leader runs, or after it
    ended as long as no other process has its pid (Linux gives no new process the id of a group that still exists,
    so a process with that pid means the group is gone and the pid reused)."""
    if alive(ident) or start_time(ident[0]) is None:
        return group_members(ident[0])
    return []


def exit_fd(pid: int) -> int | None:
    """A pidfd of the child ``pid``: readable once it exits (``None`` where there are none: not Linux >= 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def node_exit_fd(ident: Sequence[int] | None) -> int | None:
    """A pidfd of the node ``ident`` (started by any process: another CLI's job supervisor), readable once it
    exits; None when it no longer runs, or where there are no pidfds. The caller closes it."""
    if not alive(ident):
        return None
    assert ident is not None
    fd = exit_fd(ident[0])
    if fd is not None and not alive(ident):  # the pid was reused between the look and the open
        os.close(fd)
        return None
    return fd


def signal_group(ident: Sequence[int], signum: int) -> None:
    """Send ``signum`` to the process group led by ``ident`` while it has members (:func:`node_members`); SIGKILL
    goes to the leader too (for a host, ``unshare``, whose ``--kill-child`` then ends the host's pid namespace)."""
    leader = alive(ident)
    if leader and signum == signal.SIGKILL:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(ident[0], signum)
    if leader or node_members(ident):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(ident[0], signum)


def kill_host(ident: Sequence[int]) -> None:
    """End a node at once: SIGKILL to its leader and its process group."""
    signal_group(ident, signal.SIGKILL)


def still_running(groups: list[NodeGroup]) -> list[NodeGroup]:
    """``groups`` cut down, in place, to those whose nodes still run; the others are closed (reaped, pidfds
    closed). For a starter that keeps the groups it started (local mode's supervisors and endpoint servers)."""
    running = []
    for group in groups:
        if group.alive():
            running.append(group)
        else:
            group.close()
    groups[:] = running
    return groups


def stop_nodes(idents: Sequence[Sequence[int]], grace: float, reap: Callable[[], object] = lambda: None,
               strays: Callable[[], list[int]] = list) -> bool:
    """Stop nodes by their identities: SIGTERM to each node's process group and to ``strays()`` (processes of the
    nodes that left their groups), up to ``grace`` seconds for all of them to be gone, then SIGKILL to what is left;
    whether all are gone (waiting at most :data:`KILLED_SECONDS` more). ``reap`` is called while waiting, so that
    nodes this process started are reaped."""

    def running() -> bool:
        reap()
        if any(alive(i) for i in idents):  # cheap: the leaders first
            return True
        return any(node_members(i) for i in idents) or bool(strays())

    def send(signum: int) -> None:
        for ident in idents:
            signal_group(ident, signum)
        for pid in strays():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while running() and time.monotonic() < deadline:
        time.sleep(STOP_LOOK_SECONDS)
    send(signal.SIGKILL)
    deadline = time.monotonic() + KILLED_SECONDS
    while (left := running()) and time.monotonic() < deadline:
        time.sleep(STOP_LOOK_SECONDS)
    return not left


def remove_node_temps(envs: Iterable[Mapping[str, str]]) -> None:
    """Remove the temporary directory the step runtime made for each node whose env (one of ``envs``) names it
    (``MLRECIPE_NODE_TEMP_NAME``): call once none of the nodes' processes runs (a node's runtime removes its own
    unless it got SIGKILL)."""
    for env in envs:
        name = env.get(NODE_TEMP_NAME_VAR)
        if name and os.path.basename(name) == name:
            shutil.rmtree(named_node_temp_dir(name), ignore_errors=True)


def unshare(*, mount: bool = False, uts: bool = False, pid: bool = False) -> list[str]:
    """The one namespace wrapper: the argv prefix that runs a program in new namespaces (``mount``: a private mount
    namespace; ``uts``: its own hostname; ``pid``: the first process of a new pid namespace with its own /proc,
    every process in it ended when the program's ``unshare`` ends). Not as root: in a user namespace, as its root."""
    argv = ["unshare"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    argv += ["--mount"] if mount else []
    argv += ["--uts"] if uts else []
    argv += ["--pid", "--fork", KILL_CHILD, "--mount-proc"] if pid else []
    return argv + (["--propagation", "private"] if mount else [])


def host_argv(host: str, mounts: Sequence[tuple[str, str]], argv: list[str], *, fresh_root: bool = False) -> list[str]:
    """``argv`` as the entrypoint (pid 1) of host ``host``: private mount, UTS (hostname) and pid namespaces with
    ``mounts`` (source, target) bound in order by the one mount script (:func:`.mount_points.mount_argv`: missing
    mount points made in the namespace only; ``fresh_root``: a root of its own)."""
    return [*unshare(mount=True, uts=True, pid=True), "sh", "-c", HOST_SCRIPT, "mlrecipe-sagemaker-host", host,
            *mount_argv(mounts, argv, fresh_root=fresh_root)]


def set_parent_death_signal(signum: int) -> None:
    """In a child before exec: ``signum`` when the parent dies (``prctl(PR_SET_PDEATHSIG)``)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signum)
    except (OSError, AttributeError):
        pass


def open_node_log(path: Path) -> BinaryIO:
    """``path`` opened to append a node's output, not inherited by other children; :class:`LinkedPathError` when
    it is a symbolic link (one planted after the release's check is refused, not written through)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP or not path.is_symlink():
            raise
        raise LinkedPathError(f"{path} is a symbolic link (to {os.readlink(path)}): mlrecipe does not write "
                              "through links under MLRECIPE_HOME; remove the link") from None
    return open(fd, "ab")


@dataclass(frozen=True)
class NodeSpec:
    """One node: what it runs and where its output goes; ``hostname`` set: a host of its own (namespaces, that
    hostname, ``mounts`` bound as (source, target), ``fresh_root``: a root of its own); ``outlives_starter``: it
    keeps running when the process that started it ends (a server, until uninstalled); the devices it was given
    (``gpus``: also in its env's ``CUDA_VISIBLE_DEVICES``; ``cpus``: how many CPUs it counts for)."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path | None = None
    hostname: str | None = None
    mounts: tuple[tuple[str, str], ...] = ()
    fresh_root: bool = False
    outlives_starter: bool = False
    gpus: tuple[Gpu, ...] = ()
    cpus: int = 1

    def command(self) -> list[str]:
        """The argv that is started: in its own namespaces when it is a host."""
        if self.hostname is None:
            return self.argv
        return host_argv(self.hostname, self.mounts, self.argv, fresh_root=self.fresh_root)

    def parent_death_signal(self) -> int | None:
        """The parent-death rule: what the node's leader gets when the process that started it dies, even by
        SIGKILL. None for a node that outlives its starter; SIGKILL for a node in a pid namespace of its own (a host,
        or a wrapper's :func:`unshare` ``pid=True`` such as a Ray job's: its leader is ``unshare``, which ignores
        SIGTERM while it waits and whose ``--kill-child`` ends every process of the namespace); SIGTERM otherwise
        (the node's program, the step runtime, stops its own processes and removes its temporary directory)."""
        if self.outlives_starter:
            return None
        own_pid_namespace = self.hostname is not None or KILL_CHILD in self.argv
        return signal.SIGKILL if own_pid_namespace else signal.SIGTERM


@dataclass
class NodeGroup:
    """The nodes of one group, started together, watched through pidfds, stopped together. Their devices are
    ``grant``'s (:class:`~.grant.DeviceGrant`, taken before :meth:`start`): its GPU lease goes to every node, so that
    it lasts as long as they do, and this process lets go of its own hold once they started; :meth:`close` gives the
    grant's CPU slots back."""

    specs: list[NodeSpec]
    grant: DeviceGrant | None = None
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _idents: list[list[int]] = field(default_factory=list)
    _exit_fds: dict[int, int] = field(default_factory=dict)

    def start(self) -> None:
        """Start every node, in order, each in its own session (a node that cannot start raises ``OSError`` or
        :class:`LinkedPathError`; the nodes started before it are in :meth:`identities`). The grant is handed over
        either way: the nodes that started hold its lease."""
        pass_fds = tuple(self.grant.fds) if self.grant is not None else ()
        try:
            for spec in self.specs:
                self._start_node(spec, pass_fds)
        finally:
            if self.grant is not None:
                self.grant.handed_over()

    def _start_node(self, spec: NodeSpec, pass_fds: tuple[int, ...]) -> None:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        death = spec.parent_death_signal()
        with open_node_log(spec.log_path) as log:
            p = subprocess.Popen(spec.command(), env=spec.env, cwd=spec.cwd, stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, pass_fds=pass_fds, start_new_session=True,
                                 preexec_fn=None if death is None else functools.partial(set_parent_death_signal,
                                                                                         death))
        self.processes.append(p)
        self._idents.append(identity(p.pid))
        fd = exit_fd(p.pid)
        if fd is not None:
            self._exit_fds[p.pid] = fd

    def identities(self) -> list[list[int]]:
        """Each started node's ``[pid, start ticks]``, in order."""
        return [list(i) for i in self._idents]

    def codes(self) -> list[int | None]:
        """Each node's exit status, None while it runs."""
        return [p.poll() for p in self.processes]

    def alive(self) -> bool:
        """Whether any node still runs."""
        return any(code is None for code in self.codes())

    def exit_fds(self) -> list[int]:
        """The pidfds of the nodes not yet seen to exit: each readable once its node exits."""
        return [self._exit_fds[p.pid] for p in self.processes if p.returncode is None and p.pid in self._exit_fds]

    def wait_any(self, timeout: float) -> None:
        """Return when a running node ends, or after ``timeout`` seconds (a signal's handler ends it too)."""
        fds = self.exit_fds()
        if len(fds) < sum(p.returncode is None for p in self.processes):  # no pidfd for one: look again soon
            timeout = min(timeout, 0.05)
        if not fds:
            time.sleep(max(timeout, 0))
            return
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        poller.poll(max(timeout, 0) * 1000)

    def stop(self, grace: float, strays: Callable[[], list[int]] = list) -> bool:
        """Stop every node (:func:`stop_nodes`) and reap them; whether none of their processes is left."""
        gone = stop_nodes(self._idents, grace, reap=self.codes, strays=strays)
        for p in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=KILLED_SECONDS)
        self.close()
        return gone

    def close(self) -> None:
        """Let go of the pidfds and of the grant (its CPU slots: the watcher is done with these nodes)."""
        for fd in self._exit_fds.values():
            os.close(fd)
        self._exit_fds.clear()
        if self.grant is not None:
            self.grant.give_back()
