"""DescribeTrainingJob as step states: one table from SageMaker's statuses to :class:`StepState`."""

from __future__ import annotations

from typing import Any

from mlrecipe.backends.base import StepOutcome, StepState

#: TrainingJobStatus -> step state. Stopping is still running (it ends as Stopped); Stopped ends the step.
JOB_STATES: dict[str, StepState] = {
    "InProgress": StepState.RUNNING,
    "Stopping": StepState.RUNNING,
    "Completed": StepState.SUCCEEDED,
    "Failed": StepState.FAILED,
    "Stopped": StepState.INTERRUPTED,
    "Deleting": StepState.FAILED,
}
#: SecondaryStatus values that mean the job has not started its container yet.
STARTING = frozenset({"Starting", "Pending", "LaunchingMLInstances", "PreparingTrainingStack", "Downloading",
                      "DownloadingTrainingImage"})


def job_state(job: dict[str, Any]) -> StepState:
    """The step state of a described job (an unknown status counts as running)."""
    return JOB_STATES.get(str(job.get("TrainingJobStatus")), StepState.RUNNING)


def job_outcome(job: dict[str, Any]) -> StepOutcome | None:
    """The outcome of a described job, or ``None`` while it runs."""
    state = job_state(job)
    if state.active:
        return None
    name, secondary = job.get("TrainingJobName", "?"), job.get("SecondaryStatus", "")
    if state is StepState.SUCCEEDED:
        return StepOutcome(state, 0, f"training job {name} completed{billed(job)}")
    reason = job.get("FailureReason") or secondary or job.get("TrainingJobStatus")
    if state is StepState.INTERRUPTED:
        return StepOutcome(state, None, f"training job {name} was stopped ({reason}){billed(job)}")
    return StepOutcome(state, None, f"training job {name} failed: {reason}{billed(job)}")


def billed(job: dict[str, Any]) -> str:
    """``; billable 123 s`` when the job reports billable seconds."""
    seconds = job.get("BillableTimeInSeconds")
    return f"; billable {seconds} s" if seconds is not None else ""


def progress_note(job: dict[str, Any]) -> str:
    """What the status line shows while the job runs: its secondary status and billable seconds."""
    secondary = job.get("SecondaryStatus") or job.get("TrainingJobStatus") or ""
    transitions = job.get("SecondaryStatusTransitions") or []
    detail = transitions[-1].get("StatusMessage", "") if transitions else ""
    note = f"SageMaker: {secondary}" + (f" ({detail})" if detail else "")
    return note + billed(job)


def model_artifacts(job: dict[str, Any]) -> str | None:
    """ModelArtifacts.S3ModelArtifacts of a described job."""
    return (job.get("ModelArtifacts") or {}).get("S3ModelArtifacts") or None
