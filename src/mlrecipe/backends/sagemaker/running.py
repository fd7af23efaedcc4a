"""A submitted training job as the runner watches it: DescribeTrainingJob at most once per ``poll_seconds``, and at
once when the job ended in local mode (its client hands a pidfd of the job's supervisor: the runner wakes as it
exits, as it does for the local backend's node processes)."""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Callable
from typing import Any

from mlrecipe.backends.base import PollClock, RunningStep, StepOutcome, StepState
from mlrecipe.backends.sagemaker import status
from mlrecipe.backends.sagemaker.client import call, error_code
from mlrecipe.backends.sagemaker.handle import TrainingJobHandle
from mlrecipe.errors import BackendError

#: The typed outputs of a completed training step (later steps get ``MLRECIPE_<STEP>_<NAME>``).
OUTPUT_MODEL_ARTIFACTS = "model_artifacts"
OUTPUT_JOB_NAME = "job_name"


class SageMakerRunningStep(RunningStep[TrainingJobHandle]):
    """One training job. A completed job's outcome carries ``model_artifacts`` and ``job_name`` as outputs; a
    failed one its ``FailureReason``; a stopped one ends the step as interrupted. ``on_end`` runs once when
    the job ended (it fetches the hosts' logs)."""

    def __init__(self, client: Any, handle: TrainingJobHandle, poll_seconds: float,
                 on_end: Callable[[], list[str]] | None = None) -> None:
        self.client = client
        self.handle = handle
        self.clock = PollClock(poll_seconds)
        self.on_end = on_end
        self.job: dict[str, Any] | None = None
        self._outcome: StepOutcome | None = None
        self._end_fd: int | None = None
        self._end_fd_asked = False

    def _job_end_fd(self) -> int | None:
        """The local-mode client's pidfd of the job's supervisor (asked once), or None (SageMaker in AWS)."""
        if not self._end_fd_asked:
            self._end_fd_asked = True
            opener = getattr(self.client, "job_end_fd", None)
            if callable(opener):
                with contextlib.suppress(Exception):  # without it the runner still describes every poll_seconds
                    self._end_fd = opener(TrainingJobName=self.handle.job_name)
        return self._end_fd

    def _ended(self) -> bool:
        """Whether the job's supervisor has exited (its pidfd is readable)."""
        fd = self._job_end_fd()
        if fd is None:
            return False
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))

    def _unwatch(self) -> None:
        if self._end_fd is not None:
            os.close(self._end_fd)
            self._end_fd = None

    def wakeup_fds(self) -> list[int]:
        """Local mode: the pidfd of the job's supervisor while it runs (the runner looks as it exits)."""
        fd = self._job_end_fd()
        return [fd] if fd is not None and self._outcome is None and not self._ended() else []

    def describe(self) -> dict[str, Any]:
        """DescribeTrainingJob of the step's job (transient errors raise ``TransientBackendError``)."""
        self.job = call(f"DescribeTrainingJob {self.handle.job_name}", self.client.describe_training_job,
                        TrainingJobName=self.handle.job_name)
        return self.job

    def poll(self) -> StepOutcome | None:
        if self._outcome is not None:
            return self._outcome
        if not self._ended() and not self.clock.due():
            return None
        outcome = status.job_outcome(self.describe())
        if outcome is None:
            return None
        self._unwatch()
        assert self.job is not None
        if outcome.state is StepState.SUCCEEDED:
            artifacts = status.model_artifacts(self.job)
            self.handle.model_artifacts = artifacts
            outcome.outputs = {OUTPUT_JOB_NAME: self.handle.job_name,
                               **({OUTPUT_MODEL_ARTIFACTS: artifacts} if artifacts else {})}
        if self.handle.adopted:
            outcome.message += "; adopted: an earlier run of this plan created the job"
        if self.on_end is not None:
            with contextlib.suppress(Exception):  # the logs are evidence, never the reason a step fails
                outcome.log_tail = self.on_end()[-20:]
        self._outcome = outcome
        return outcome

    def progress_note(self) -> str:
        """SageMaker's secondary status (and billable seconds) of the last look."""
        return status.progress_note(self.job) if self.job is not None else ""

    def cancel(self) -> None:
        """StopTrainingJob; a job that has already ended is fine."""
        stop_job(self.client, self.handle.job_name)


def stop_job(client: Any, job_name: str) -> None:
    """StopTrainingJob, idempotent: a job that already ended (ValidationException) is left as it is."""
    try:
        call(f"StopTrainingJob {job_name}", client.stop_training_job, TrainingJobName=job_name)
    except BackendError as exc:
        if error_code(exc.__cause__ or exc) not in ("ValidationException", "ResourceNotFound"):
            raise
