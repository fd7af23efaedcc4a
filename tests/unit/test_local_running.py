"""A running local step wakes the runner as its node processes exit: one pidfd per node not yet seen to exit,
readable once it exits, closed once the step has settled."""

from __future__ import annotations

import os
import select
from pathlib import Path

import pytest

from mlrecipe.backends.base import StepState
from mlrecipe.backends.host.nodes import exit_fd
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
