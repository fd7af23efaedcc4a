"""What SageMaker still holds of a step goes into a debug bundle: DescribeTrainingJob (its environment masked) and
every host's CloudWatch log stream, or an endpoint's DescribeEndpoint; botocore's Stubber answers as the service
would (no network)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from mlrecipe.backends.base import CollectsDebugRecords
from mlrecipe.backends.sagemaker.handle import EndpointHandle, TrainingJobHandle
from tests.sagemaker.stubs import Aws, described

TOKEN = "hf_DoNotLeakThisTokenAbcdefghijklmnopqrs"


def test_sagemaker_declares_the_capability(tmp_path: Path) -> None:
    assert issubclass(type(Aws(tmp_path).backend), CollectsDebugRecords)


def test_the_job_described_with_its_environment_masked_and_every_hosts_log(tmp_path: Path, mlhome: Path) -> None:
    aws = Aws(tmp_path / "release")
    aws.expect_describe("Failed", "Failed", FailureReason="AlgorithmError: rank 1 exited with status 3",
                        Environment={"HF_TOKEN": TOKEN, "NCCL_DEBUG": "INFO"})
    aws.expect_logs(["NCCL version 2.21.5+cuda12.4", "RuntimeError: boom"])
    records = {r.name: r for r in aws.backend.debug_records(TrainingJobHandle(job_name=aws.job(), region="us-west-2"))}
    aws.done()
    assert list(records) == ["describe-training-job.json", "logs/algo-1.log", "logs/algo-2.log"]
    job = json.loads(records["describe-training-job.json"].text or "")
    assert job["FailureReason"].startswith("AlgorithmError") and job["ResourceConfig"]["InstanceCount"] == 2
    assert job["Environment"] == {"HF_TOKEN": "******", "NCCL_DEBUG": "INFO"}
    assert TOKEN not in (records["describe-training-job.json"].text or "")
    assert "ResponseMetadata" not in job
    assert records["logs/algo-2.log"].text == "NCCL version 2.21.5+cuda12.4\nRuntimeError: boom\n"


def test_what_the_service_refuses_or_no_longer_has_is_named(tmp_path: Path, mlhome: Path) -> None:
    aws = Aws(tmp_path / "release")
    aws.sm_stub.add_client_error("describe_training_job", "AccessDeniedException", "not authorized", 400)
    (refused,) = aws.backend.debug_records(TrainingJobHandle(job_name=aws.job(), region="us-west-2"))
    assert refused.text is None and "not authorized" in refused.missing
    aws.sm_stub.add_client_error("describe_endpoint", "ValidationException", "Could not find endpoint \"e\".", 400)
    (gone,) = aws.backend.debug_records(EndpointHandle(endpoint_name="e", region="us-west-2"))
    assert gone.name == "describe-endpoint.json" and gone.missing == "endpoint e no longer exists"
    aws.expect_describe("Failed", "Failed")
    aws.logs_stub.add_client_error("describe_log_streams", "ResourceNotFoundException", "no such group", 400)
    aws.logs_stub.add_client_error("describe_log_streams", "ResourceNotFoundException", "no such group", 400)
    records = aws.backend.debug_records(TrainingJobHandle(job_name=aws.job(), region="us-west-2"))
    assert [r.name for r in records] == ["describe-training-job.json", "logs/algo-1.log", "logs/algo-2.log"]
    assert records[1].text is None and "no such group" in records[1].missing
    aws.done()


class LocalModeClient:
    """The local mode's answers for one ended job of one host."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        return described(TrainingJobName, "arn:local", "Failed", "Failed", ResourceConfig={
            "InstanceType": "local", "InstanceCount": 1, "VolumeSizeInGB": 1})

    def log_path(self, job_name: str, host_index: int) -> str:
        return str(self.log)


def test_local_mode_reads_the_hosts_log_files(tmp_path: Path, mlhome: Path) -> None:
    aws = Aws(tmp_path / "release")
    log = tmp_path / "algo-1.log"
    log.write_text("local host said this\n")
    aws.backend.clients["sagemaker"] = LocalModeClient(log)
    records = aws.backend.debug_records(TrainingJobHandle(job_name="j-1", mode="local"))
    assert [(r.name, r.text) for r in records[1:]] == [("logs/algo-1.log", "local host said this\n")]
