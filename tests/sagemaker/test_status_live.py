"""``status`` from another process asks SageMaker about a running step now (DescribeTrainingJob's secondary status
and billable seconds), and falls back to the recorded state, saying so, when the API cannot be reached: botocore's
Stubber for the answer's words, a real moto server and a closed port through the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from mlrecipe.backends.base import StepState
from mlrecipe.backends.sagemaker.handle import SageMakerHandle, TrainingJobHandle
from mlrecipe.runner.state import ReleaseRecord, StepRecord
from tests.integration.helpers import cli
from tests.sagemaker.moto_server import ROLE, Moto, moto_server  # noqa: F401
from tests.sagemaker.stubs import NOW, Aws


def test_live_note_is_the_secondary_status_and_billable_seconds(tmp_path: Path, mlhome: Path) -> None:
    aws = Aws(tmp_path / "release")
    handle = TrainingJobHandle(job_name=aws.job(), region="us-west-2")
    aws.expect_describe("InProgress", "Training", BillableTimeInSeconds=42, SecondaryStatusTransitions=[
        {"Status": "Training", "StartTime": NOW, "StatusMessage": "Training image download completed."}])
    assert aws.backend.live_note(handle) == ("SageMaker: Training (Training image download completed.); "
                                             "billable 42 s")
    aws.expect_describe("Completed", "Completed", BillableTimeInSeconds=300)
    note = aws.backend.live_note(handle)
    assert note is not None and note.startswith("SageMaker: Completed; billable 300 s; the job has ended (Completed)")
    aws.done()


def _running_record(handle: SageMakerHandle) -> ReleaseRecord:
    me = psutil.Process(os.getpid())  # a live driver: the step is running as far as the record knows
    record = ReleaseRecord("live", "default", "sagemaker", {}, state=StepState.RUNNING, order=["train"],
                           steps={"train": StepRecord("train", "training/pytorchjob-distributed",
                                                      state=StepState.RUNNING, handle=handle.to_json(),
                                                      backend="sagemaker")},
                           driver_pid=me.pid, driver_created=me.create_time())
    record.save()
    return record


@pytest.mark.integration
def test_status_from_another_process_asks_the_api(mlhome: Path, moto_server: Moto) -> None:  # noqa: F811
    sm = moto_server.client("sagemaker")
    sm.create_training_job(
        TrainingJobName="live-train-1", RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
                                "TrainingInputMode": "File"},
        OutputDataConfig={"S3OutputPath": "s3://b/o"}, StoppingCondition={"MaxRuntimeInSeconds": 60},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1})
    _running_record(TrainingJobHandle(job_name="live-train-1", region="us-east-1", endpoint_url=moto_server.url))
    text = cli(mlhome, "status", "live")
    assert text.returncode == 0, text.stderr
    assert "[SageMaker: Completed" in text.stdout and "the job has ended (Completed)" in text.stdout, text.stdout
    (doc,) = json.loads(cli(mlhome, "status", "live", "-o", "json").stdout)
    assert doc["steps"][0]["live"].startswith("SageMaker: Completed") and "live_error" not in doc["steps"][0]


@pytest.mark.integration
def test_unreachable_api_shows_the_recorded_state_with_a_note(mlhome: Path) -> None:
    _running_record(TrainingJobHandle(job_name="live-train-1", region="us-east-1", endpoint_url="http://127.0.0.1:9"))
    env_free = cli(mlhome, "status", "live", timeout=60)
    assert env_free.returncode == 0, env_free.stderr
    line = next(x for x in env_free.stdout.splitlines() if x.strip().startswith("train"))
    assert "running" in line and "live status unavailable (DescribeTrainingJob live-train-1" in line
    assert "showing the recorded state" in line
    (doc,) = json.loads(cli(mlhome, "status", "live", "-o", "json", timeout=60).stdout)
    assert doc["steps"][0]["state"] == "running" and "DescribeTrainingJob" in doc["steps"][0]["live_error"]
