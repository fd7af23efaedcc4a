"""A running local step wakes the runner as its node processes exit: one pidfd per node not yet seen to exit,
readable once it exits, closed once the step has settled. A handle of an earlier release still names its nodes."""

from __future__ import annotations

import os
import select
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from mlrecipe.backends.base import StepState
from mlrecipe.backends.host.nodes import exit_fd, identity
from mlrecipe.backends.local import procs
from mlrecipe.backends.local.handle import LocalHandle
from mlrecipe.backends.local.plan import LocalPlan, NodeLaunch
from mlrecipe.backends.local.running import LocalRunningStep

pytestmark = pytest.mark.integration  # starts real processes


def readable(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def gated_step(tmp_path: Path, gate: Path) -> LocalRunningStep:
    """One node that exits 0 once ``gate`` exists."""
    node = NodeLaunch(0, ["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.05; done'], {}, tmp_path / "node-0.log")
    plan = LocalPlan(step="s", chart="data-prep/data-process", program={}, program_path=tmp_path / "program.json",
                     nodes=[node])
    return LocalRunningStep(plan, "test-run", grace=5, lease_dir=tmp_path / "leases")


def test_a_node_exit_makes_its_wakeup_fd_readable_and_settling_closes_it(tmp_path: Path) -> None:
    probe = exit_fd(os.getpid())
    if probe is None:
        pytest.skip("no pidfd on this system (Linux >= 5.3): the runner looks every tick instead")
    os.close(probe)
    gate = tmp_path / "gate"
    step = gated_step(tmp_path, gate)
    step.start()
    try:
        (fd,) = step.wakeup_fds()
        assert not readable(fd, 0), "not readable while the node runs"
        assert step.poll() is None and step.wakeup_fds() == [fd]
        gate.touch()
        assert readable(fd, 60), "readable once the node exited"
        outcome = step.poll()
        assert outcome is not None and outcome.state is StepState.SUCCEEDED
        assert step.wakeup_fds() == []
        with pytest.raises(OSError):
            os.fstat(fd)  # closed with the step's outcome
    finally:
        gate.touch()
        step.cancel()


def test_cancel_closes_the_wakeup_fds(tmp_path: Path) -> None:
    step = gated_step(tmp_path, tmp_path / "never")
    step.start()
    fds = step.wakeup_fds()
    step.cancel()
    assert step.wakeup_fds() == []
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_a_handle_written_before_start_ticks_still_names_its_node(tmp_path: Path) -> None:
    """A release installed by an earlier mlrecipe recorded each node's ``created`` (epoch seconds): its node is
    still seen alive and stopped by uninstall (``cancel_handle``), and a record whose time is not the process's (a
    reused pid) is neither seen nor signalled."""
    with subprocess.Popen(["sleep", "300"], start_new_session=True) as proc:
        try:
            created = psutil.Process(proc.pid).create_time()
            old = LocalHandle.model_validate({"run_id": "old-run", "nodes": [{"rank": 0, "pid": proc.pid,
                                                                              "created": created}]})
            reused = LocalHandle.model_validate({"run_id": "old-run", "nodes": [{"rank": 0, "pid": proc.pid,
                                                                                 "created": created - 10}]})
            assert old.nodes[0].identity() == identity(proc.pid)
            assert procs.run_alive(old) and not procs.run_alive(reused)
            procs.stop_run(reused, grace=0)
            assert proc.poll() is None, "a process that is not the node's was signalled"
            procs.stop_run(old, grace=5, reap=proc.poll)
            assert proc.wait(timeout=60) == -signal.SIGTERM and not procs.run_alive(old)
        finally:
            proc.kill()
