"""A running step asks its backend at most once per poll period, however often the runner polls (``PollClock``,
shared by the Slurm and SageMaker running steps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.backends.base import PollClock
from mlrecipe.backends.sagemaker.handle import TrainingJobHandle
from mlrecipe.backends.sagemaker.running import SageMakerRunningStep
from tests.sagemaker.stubs import Aws


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The clock every ``PollClock`` reads: a one-item list of seconds the test moves forward (no sleeping)."""
    ticks = [100.0]
    monkeypatch.setattr(PollClock, "now", staticmethod(lambda: ticks[0]))
    return ticks


def test_the_clock_is_due_at_once_then_once_per_period(now: list[float]) -> None:
    clock = PollClock(0.2)
    assert clock.due()
    now[0] += 0.19
    assert not clock.due()
    now[0] += 0.01
    assert clock.due()
    assert not clock.due()
    assert all(PollClock(0.0).due() for _ in range(3))


def test_a_training_job_is_described_once_per_period(tmp_path: Path, now: list[float]) -> None:
    aws = Aws(tmp_path)
    aws.expect_describe("InProgress", "Training")
    aws.expect_describe("Completed", "Completed", ModelArtifacts={"S3ModelArtifacts": "s3://my-bucket/m.tar.gz"})
    step = SageMakerRunningStep(aws.sm, TrainingJobHandle(job_name=aws.job(), mode="aws"), poll_seconds=0.3)
    assert [step.poll() for _ in range(5)] == [None] * 5  # one DescribeTrainingJob: the Stubber holds one more answer
    now[0] += 0.3
    outcome = step.poll()
    assert outcome is not None and outcome.state.value == "succeeded"
    assert step.poll() is outcome  # the outcome is kept: no third call
    aws.sm_stub.assert_no_pending_responses()
