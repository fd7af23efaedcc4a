"""A submitted local step as the runner watches it: its nodes (a node group of the host layer,
:mod:`mlrecipe.backends.host.nodes`) and, for a server, its readiness."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mlrecipe.backends.base import RunningStep, StepOutcome, StepState
from mlrecipe.backends.host.cpus import CpuSlots
from mlrecipe.backends.host.grant import DeviceGrant, GrantWait
from mlrecipe.backends.host.nodes import NodeGroup, NodeSpec
from mlrecipe.backends.host.serving import ReadinessWatcher
from mlrecipe.backends.local import procs
from mlrecipe.backends.local.handle import LocalHandle, NodeProcess, ServerAddress
from mlrecipe.backends.local.plan import LocalPlan
from mlrecipe.errors import LinkedPathError
from mlrecipe.logtail import tail
from mlrecipe.runtime.step_runtime import HANG_STATUS, read_hang_reason


class LocalRunningStep(RunningStep[LocalHandle]):
    """The node processes of one local step (a server's outlive the CLI until ``uninstall``).

    They start once the step holds its device grant (:mod:`mlrecipe.backends.host.grant`): its GPUs (the
    machine-wide lease) and its CPUs (``cpus``, shared by the steps of the release).
    """

    def __init__(self, plan: LocalPlan, run_id: str, grace: float, lease_dir: Path,
                 cpus: CpuSlots | None = None) -> None:
        self.plan = plan
        self.grant = DeviceGrant(lease_dir, plan.release, plan.step, gpus=tuple(plan.devices.lease),
                                 cpus=cpus if plan.ranks else None, ranks=plan.ranks, cpu_holder=run_id)
        self.started = False
        self._waiting_since: float | None = None
        self._wait_note = ""
        self.grace = grace
        self.group = NodeGroup([])
        self.handle = LocalHandle(run_id=run_id)
        self._outcome: StepOutcome | None = None
        self.server = plan.server
        self.watcher: ReadinessWatcher | None = None
        if self.server is not None:
            self.handle.server = ServerAddress(url=self.server.url, health=self.server.health_url)
            self.watcher = ReadinessWatcher(self.server.readiness)

    def take_devices(self) -> GrantWait | None:
        """Hold the step's GPUs and CPUs: None once held (or none needed), else what it waits for (the progress
        note says it)."""
        wait = self.grant.take()
        if wait is not None:
            self._waiting_since = self._waiting_since or time.monotonic()
            self._wait_note = wait.note(time.monotonic() - self._waiting_since)
        return wait

    def start(self) -> None:
        """Start every node (the group hands them the GPU lease, which the CLI then lets go of); a server's nodes
        outlive the CLI (until uninstall), the others die with it."""
        base = dict(os.environ)
        self.group = NodeGroup([NodeSpec(argv=node.argv, env={**base, **node.env,
                                                              **procs.run_env(self.handle.run_id, node.rank)},
                                         log_path=node.log_path, outlives_starter=self.server is not None)
                                for node in self.plan.nodes], grant=self.grant)
        try:
            self.group.start()
        finally:
            started = zip(self.plan.nodes, self.group.identities(), strict=False)  # those before one that failed
            self.handle.nodes = [NodeProcess(rank=node.rank, pid=pid, started=ticks) for node, (pid, ticks) in started]
        self.started = True
        self._wait_note = ""
        if self.watcher is not None:
            self.watcher.start_clock()

    def wakeup_fds(self) -> list[int]:
        """The pidfds of the node processes that have not been seen to exit: the runner wakes as one exits."""
        return self.group.exit_fds()

    def _failed(self, rank: int, code: int | None, message: str) -> StepOutcome:
        self.cancel()
        return StepOutcome(StepState.FAILED, code, message, rank, tail(self.plan.nodes[rank].log_path))

    def poll(self) -> StepOutcome | None:
        if self._outcome is not None:
            return self._outcome
        if not self.started:
            if self.take_devices() is not None:
                return None
            try:
                self.start()
            except (OSError, LinkedPathError) as exc:
                self._outcome = StepOutcome(StepState.FAILED, None, f"cannot start the step's processes: {exc}")
                self.cancel()
                return self._outcome
        codes = self.group.codes()
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
            self.group.close()  # and its grant: the step's CPUs are given back
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
            self.group.close()
        return url

    def cancel(self) -> None:
        self.grant.give_back()
        procs.stop_run(self.handle, self.grace, reap=self.group.codes)
        self.group.close()

