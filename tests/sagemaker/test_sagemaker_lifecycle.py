"""The training-job lifecycle against botocore's Stubber: real botocore clients (request and response shapes
checked against the service model), scripted answers, no network. Every scripted call must be made, and an
unscripted one (a second CreateTrainingJob) fails the test."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from mlrecipe.backends.base import StepState
from mlrecipe.backends.sagemaker.backend import HANDLE_FILE
from mlrecipe.errors import SpecError, TransientBackendError
from mlrecipe.runner.active import ActiveStep
from mlrecipe.runner.state import StepRecord
from tests.sagemaker.stubs import NOW, Aws

ARTIFACTS = "s3://my-bucket/mlrecipe/default/cnn/train/output/model.tar.gz"


@pytest.fixture
def aws(tmp_path: Path, mlhome: Path) -> Aws:
    return Aws(tmp_path / "release")


def submit_new(aws: Aws):
    aws.expect_list()
    aws.expect_upload()
    aws.expect_create()
    return aws.backend.submit(aws.plan, aws.ctx)


def test_in_progress_then_completed_records_model_artifacts(aws: Aws) -> None:
    running = submit_new(aws)
    aws.expect_describe("InProgress", "Training", BillableTimeInSeconds=12, SecondaryStatusTransitions=[
        {"Status": "Training", "StartTime": NOW, "StatusMessage": "Training image download completed."}])
    assert running.poll() is None
    note = running.progress_note()
    assert "SageMaker: Training" in note and "billable 12 s" in note
    aws.expect_describe("Completed", "Completed", artifacts=ARTIFACTS, BillableTimeInSeconds=300)
    aws.expect_logs(["epoch 1 loss 0.5", "accuracy 0.93"])
    outcome = running.poll()
    assert outcome is not None and outcome.state is StepState.SUCCEEDED
    assert outcome.outputs == {"job_name": aws.job(), "model_artifacts": ARTIFACTS}
    assert running.handle.model_artifacts == ARTIFACTS
    assert outcome.log_tail[-1] == "accuracy 0.93"
    assert (aws.plan.step_dir / "node-1.log").read_text().splitlines() == ["epoch 1 loss 0.5", "accuracy 0.93"]
    assert running.poll() is outcome  # settled: no more calls
    aws.done()


def test_failed_job_shows_failure_reason(aws: Aws) -> None:
    running = submit_new(aws)
    aws.expect_describe("Failed", "Failed", FailureReason="AlgorithmError: ExecuteUserScriptError: exit code 3")
    aws.expect_logs(["Traceback", "ValueError: bad"])
    outcome = running.poll()
    assert outcome is not None and outcome.state is StepState.FAILED
    assert "AlgorithmError: ExecuteUserScriptError: exit code 3" in outcome.message
    assert outcome.log_tail[-1] == "ValueError: bad"
    aws.done()


def test_stopped_job_ends_the_step(aws: Aws) -> None:
    running = submit_new(aws)
    aws.expect_describe("Stopping", "Stopping")
    assert running.poll() is None
    aws.expect_describe("Stopped", "Stopped")
    aws.expect_logs([])
    outcome = running.poll()
    assert outcome is not None and outcome.state is StepState.INTERRUPTED
    assert "stopped" in outcome.message
    aws.done()


def test_transient_error_is_retried_as_a_progress_note(aws: Aws) -> None:
    running = submit_new(aws)
    aws.sm_stub.add_client_error("describe_training_job", "ThrottlingException", "Rate exceeded", 400)
    with pytest.raises(TransientBackendError):
        running.poll()
    aws.sm_stub.add_client_error("describe_training_job", "InternalFailure", "oops", 500)
    aws.expect_describe("InProgress", "Downloading")
    aws.sm_stub.add_client_error("describe_training_job", "ServiceUnavailable", "busy", 503)
    rec = StepRecord(aws.step.name, aws.step.chart.name)
    active = ActiveStep(aws.step, rec, running, 0.0, aws.plan.step_dir / "node-0.log", None, retry_seconds=60)
    outcome, note, _ = active.look()
    assert outcome is None and note.startswith("retrying: DescribeTrainingJob") and "InternalFailure" in note
    outcome, note, _ = active.look()
    assert outcome is None and note == "SageMaker: Downloading"
    outcome, note, _ = active.look()
    assert outcome is None and "ServiceUnavailable" in note
    aws.done()


def test_non_transient_error_is_not_retried(aws: Aws) -> None:
    running = submit_new(aws)
    aws.sm_stub.add_client_error("describe_training_job", "AccessDeniedException", "no", 400)
    with pytest.raises(Exception) as info:
        running.poll()
    assert not isinstance(info.value, TransientBackendError) and "AccessDenied" in str(info.value)


def test_cancel_and_uninstall_stop_the_job(aws: Aws) -> None:
    running = submit_new(aws)
    aws.sm_stub.add_response("stop_training_job", {}, {"TrainingJobName": aws.job()})
    running.cancel()
    aws.sm_stub.add_client_error("stop_training_job", "ValidationException", "already Stopped", 400)
    aws.backend.cancel_handle(aws.backend.load_handle(running.handle.to_json()))  # idempotent
    aws.done()


def test_lost_cli_then_resume_adopts_the_running_job(aws: Aws, tmp_path: Path) -> None:
    first = submit_new(aws)
    saved = first.handle.to_json()
    assert (aws.plan.step_dir / HANDLE_FILE).exists()
    again = Aws(tmp_path / "release")  # a new CLI process: fresh clients, the same plan
    assert again.plan.request == aws.plan.request
    again.expect_list((again.job(), "InProgress"))
    again.expect_tags(again.job())
    again.expect_describe("InProgress", "Training")
    running = again.backend.submit(again.plan, again.ctx)  # no CreateTrainingJob scripted: creating one would fail
    assert running.handle.job_name == saved["job_name"] and running.handle.adopted
    again.expect_describe("Completed", "Completed", artifacts=ARTIFACTS)
    again.expect_logs([])
    outcome = running.poll()
    assert outcome is not None and outcome.state is StepState.SUCCEEDED and "adopted" in outcome.message
    again.done()


def test_rerun_after_a_failed_attempt_creates_a_new_attempt(aws: Aws) -> None:
    aws.expect_list((aws.job(1), "Failed"), (aws.job(7), "Completed"))
    aws.expect_tags(aws.job(1))
    aws.expect_describe("Failed", "Failed", attempt=1, FailureReason="OOM")
    aws.expect_tags(aws.job(7), attempt=7, **{"mlrecipe:release": "other"})  # not ours: ignored
    aws.expect_upload()
    aws.expect_create(attempt=8)  # after every taken name: SageMaker never reuses one
    running = aws.backend.submit(aws.plan, aws.ctx)
    assert running.handle.job_name == aws.job(8) and not running.handle.adopted
    aws.done()


def test_handle_alive_follows_the_status_table(aws: Aws) -> None:
    handle = aws.backend.load_handle({"job_name": aws.job(), "region": "us-west-2"})
    aws.expect_describe("Stopping", "Stopping")
    assert aws.backend.handle_alive(handle)
    aws.expect_describe("Completed", "Completed")
    assert not aws.backend.handle_alive(handle)
    aws.done()


def test_transient_error_at_create_is_retried_and_adopts_what_it_made(aws: Aws) -> None:
    aws.expect_list()
    aws.expect_upload()
    aws.sm_stub.add_client_error("create_training_job", "ThrottlingException", "Rate exceeded", 400)
    aws.expect_list((aws.job(), "InProgress"))  # the throttled create had gone through after all
    aws.expect_tags(aws.job())
    aws.expect_describe("InProgress", "Starting")
    with pytest.raises(TransientBackendError):  # the runner submits the step again after its backoff
        aws.backend.submit(aws.plan, aws.ctx)
    running = aws.backend.submit(aws.plan, aws.ctx)
    assert running.handle.job_name == aws.job() and running.handle.adopted
    aws.done()


def test_logs_of_one_host_from_cloudwatch(aws: Aws) -> None:
    submit_new(aws)
    stream = f"{aws.job()}/algo-2-1764147600"
    group = "/aws/sagemaker/TrainingJobs"
    aws.logs_stub.add_response("describe_log_streams", {"logStreams": [{"logStreamName": stream}]},
                               {"logGroupName": group, "logStreamNamePrefix": f"{aws.job()}/algo-2-"})
    aws.logs_stub.add_response("get_log_events", {"events": [{"timestamp": 1, "message": "rank 1 ready\n"}],
                                                  "nextForwardToken": "f/2"},
                               {"logGroupName": group, "logStreamName": stream, "startFromHead": True})
    aws.logs_stub.add_response("get_log_events", {"events": [], "nextForwardToken": "f/2"},
                               {"logGroupName": group, "logStreamName": stream, "startFromHead": True,
                                "nextToken": "f/2"})
    path = aws.backend.log_path(aws.ctx, aws.step.name, rank=1)
    assert path.read_text() == "rank 1 ready\n"
    aws.done()


def test_spot_wait_shorter_than_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        Aws(tmp_path, max_wait=60, max_run=3600)
    assert "max_wait: must be >= max_run (3600 s)" in str(info.value)
