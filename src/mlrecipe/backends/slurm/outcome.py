"""How a finished job ended: exit code, Slurm's state and reason, the failed node and its last log lines."""

from __future__ import annotations

import re
from pathlib import Path

from mlrecipe.backends.base import StepOutcome, StepState
from mlrecipe.backends.slurm.scontrol import JobInfo
from mlrecipe.logtail import tail
from mlrecipe.runtime.step_runtime import HANG_STATUS, read_hang_reason

# srun's own report in the batch log, e.g. "srun: error: n2: task 1: Exited with exit code 3"
_TASK_ERROR = re.compile(r"srun: error: (\S+): tasks? (\d+)(?:-\d+)?: (.*)")
_EXIT = re.compile(r"Exited with exit code (\d+)")


def failed_task(batch_log: Path) -> tuple[int, str, int | None] | None:
    """(rank, node, exit status) of the first task srun reported as failed, from the batch log."""
    found = None
    for line in tail(batch_log, 200):
        m = _TASK_ERROR.search(line)
        if m is None:
            continue
        code = _EXIT.search(m.group(3))
        entry = (int(m.group(2)), m.group(1), int(code.group(1)) if code else None)
        if code and int(code.group(1)) != 0:
            return entry
        found = found or entry
    return found


def exit_status(info: JobInfo) -> int | None:
    if info.signal:
        return 128 + info.signal if not info.exit_code else info.exit_code
    return info.exit_code


def outcome_of(info: JobInfo, step_dir: Path) -> StepOutcome:
    """The outcome of a job Slurm no longer runs."""
    code = exit_status(info)
    if info.step_state is StepState.SUCCEEDED and not code:
        return StepOutcome(StepState.SUCCEEDED, 0)
    batch_log = step_dir / "batch.log"
    task = failed_task(batch_log)
    rank = task[0] if task else None
    if task is not None and task[2]:
        code = task[2]  # the failed node's own status, not srun's maximum over the nodes it then killed
    message = f"Slurm job {info.job_id} {info.state} (reason: {info.reason}), exit code {exit_status(info)}"
    if info.restarts:
        message += f", after {info.restarts} requeue(s)"
    if task is not None:
        rank_, node, status = task
        message += f"; node {rank_} ({node}) " + (f"exited with status {status}" if status is not None else "failed")
    if code == HANG_STATUS:  # the watchdog stopped the command: its reason says why and where the stacks are
        message = read_hang_reason(step_dir) or message
    lines = tail(step_dir / f"node-{rank or 0}.log")
    if not lines:
        lines = tail(batch_log)
    return StepOutcome(StepState.FAILED, code if code is not None else 1, message, rank, lines)


def vanished(job_id: str, step_dir: Path) -> StepOutcome:
    """A job Slurm forgot (purged after MinJobAge, or the controller's state was reset)."""
    return StepOutcome(StepState.FAILED, None, f"Slurm job {job_id} is no longer known to the controller", None,
                       tail(step_dir / "node-0.log") or tail(step_dir / "batch.log"))
