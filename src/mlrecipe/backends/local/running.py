"""A submitted local step as the runner watches it: its node processes and, for a server, its readiness."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

from mlrecipe.backends.base import RunningStep, StepOutcome, StepState
from mlrecipe.backends.host.cpus import CpuSlots
from mlrecipe.backends.host.devices import Gpu
from mlrecipe.backends.host.gpu_lease import GpuLease, Holder, busy_message
from mlrecipe.backends.host.serving import ReadinessWatcher
from mlrecipe.backends.local import procs
from mlrecipe.backends.local.handle import LocalHandle, NodeProcess, ServerAddress
from mlrecipe.backends.local.plan import LocalPlan
from mlrecipe.errors import LinkedPathError
from mlrecipe.logtail import tail
from mlrecipe.runtime.step_runtime import HANG_STATUS, read_hang_reason


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


class LocalRunningStep(RunningStep[LocalHandle]):
    """The node processes of one local step (a server's outlive the CLI until ``uninstall``).

    They start once the step holds its GPUs (the machine-wide lease) and its CPUs (``cpus``, shared by the
    steps of the release: :mod:`mlrecipe.backends.host.cpus`).
    """

    def __init__(self, plan: LocalPlan, run_id: str, grace: float, lease_dir: Path,
                 cpus: CpuSlots | None = None) -> None:
        self.plan = plan
        self.cpus = cpus if plan.ranks else None
        gpus = plan.devices.lease
        self.lease = GpuLease(lease_dir, gpus, plan.release, plan.step) if gpus else None
        self.started = False
        self._waiting_since: float | None = None
        self._wait_note = ""
        self.grace = grace
        self.popens: list[subprocess.Popen[bytes]] = []
        self._exit_fds: dict[int, int] = {}  #: node process pid -> a pidfd, readable once it exits
        self.handle = LocalHandle(run_id=run_id)
        self._outcome: StepOutcome | None = None
        self.server = plan.server
        self.watcher: ReadinessWatcher | None = None
        if self.server is not None:
            self.handle.server = ServerAddress(url=self.server.url, health=self.server.health_url)
            self.watcher = ReadinessWatcher(self.server.readiness)

    def take_gpus(self) -> list[tuple[Gpu, Holder | None]]:
        """Lease the step's GPUs: the busy ones and their holders (empty when held, or none needed)."""
        if self.lease is None:
            return []
        busy = self.lease.acquire()
        if busy:
            self._waiting_since = self._waiting_since or time.monotonic()
            waited = time.monotonic() - self._waiting_since
            self._wait_note = f"waiting {waited:.0f} s for its GPUs: {busy_message(busy)}"
        return busy

    def take_cpus(self) -> bool:
        """Hold the step's CPUs; whether it holds them (else the progress note says why it waits)."""
        if self.cpus is None or self.cpus.take(self.handle.run_id, self.plan.ranks):
            return True
        self._waiting_since = self._waiting_since or time.monotonic()
        self._wait_note = self.cpus.waiting_note(self.plan.ranks, time.monotonic() - self._waiting_since)
        return False

    def _free_cpus(self) -> None:
        if self.cpus is not None:
            self.cpus.release(self.handle.run_id)

    def start(self) -> None:
        """Start every node (handing them the GPU lease, which the CLI then lets go of)."""
        fds = self.lease.fds if self.lease is not None else []
        base = dict(os.environ)
        for node in self.plan.nodes:
            node.log_path.parent.mkdir(parents=True, exist_ok=True)
            env = {**base, **node.env, procs.RUN_ID_VAR: self.handle.run_id,
                   **procs.node_temp_env(self.handle.run_id, node.rank)}
            with open_node_log(node.log_path) as log:
                p = subprocess.Popen(
                    node.argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=fds,
                    start_new_session=True,
                    # a server outlives the CLI (until uninstall); other steps die with it
                    preexec_fn=None if self.server is not None else procs.die_with_parent,
                )
            self.popens.append(p)
            self.handle.nodes.append(NodeProcess(rank=node.rank, pid=p.pid, created=procs.create_time(p.pid)))
            fd = procs.exit_fd(p.pid)
            if fd is not None:
                self._exit_fds[p.pid] = fd
        self.started = True
        self._wait_note = ""
        if self.lease is not None:
            self.lease.close()
        if self.watcher is not None:
            self.watcher.start_clock()

    def wakeup_fds(self) -> list[int]:
        """The pidfds of the node processes that have not been seen to exit: the runner wakes as one exits."""
        return [self._exit_fds[p.pid] for p in self.popens if p.returncode is None and p.pid in self._exit_fds]

    def _unwatch(self) -> None:
        for fd in self._exit_fds.values():
            os.close(fd)
        self._exit_fds.clear()

    def _failed(self, rank: int, code: int | None, message: str) -> StepOutcome:
        self.cancel()
        return StepOutcome(StepState.FAILED, code, message, rank, tail(self.plan.nodes[rank].log_path))

    def poll(self) -> StepOutcome | None:
        if self._outcome is not None:
            return self._outcome
        if not self.started:
            if self.take_gpus() or not self.take_cpus():
                return None
            try:
                self.start()
            except (OSError, LinkedPathError) as exc:
                self._outcome = StepOutcome(StepState.FAILED, None, f"cannot start the step's processes: {exc}")
                self.cancel()
                return self._outcome
        codes = [p.poll() for p in self.popens]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        ready = self.watcher is not None and self.watcher.ready
        if failed:
            rank, code = failed[0]
            message = f"node {rank} exited with status {code}"
            if code == HANG_STATUS:  # the watchdog stopped it: its reason says why and where the stacks are
                message = read_hang_reason(self.plan.program_path.parent) or message
            self._outcome = self._failed(rank, code, message)
        elif self.server is not None and any(c is not None for c in codes):
            when = "after it was ready" if ready else "before it was ready"
            self._outcome = self._failed(0, 0, f"the server exited with status 0 {when}")
        elif all(c == 0 for c in codes):
            self._outcome = StepOutcome(StepState.SUCCEEDED, 0)
        elif self.watcher is not None and self.server is not None:
            waited = self.watcher.overdue(self.server.url)
            if waited is not None:
                self._outcome = self._failed(0, None, f"the server was not ready after {waited:.0f} s "
                                             f"(GET {self.server.health_url}; raise server.startup_probe to wait "
                                             "longer)")
        if self._outcome is not None:
            self._unwatch()
            self._free_cpus()
        return self._outcome

    def progress_note(self) -> str:
        """While the step waits for GPUs another release holds, or for CPUs: for which, and since when."""
        return "" if self.started else self._wait_note

    def ready_url(self) -> str | None:
        """The server's URL once ``GET`` on its health path answers 2xx (probes at most once per period)."""
        if self.watcher is None or self.server is None or self._outcome is not None or not self.started:
            return None
        url = self.watcher.check(self.server.url)
        if url is not None:  # the runner stops watching a ready server
            self._unwatch()
        return url

    def cancel(self) -> None:
        self._free_cpus()
        if self.lease is not None:
            self.lease.close()
        procs.stop_run(self.handle, self.grace, self.popens)
        self._unwatch()

