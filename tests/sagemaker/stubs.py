"""botocore-stubbed AWS clients and canned SageMaker answers for the lifecycle tests (no network)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import botocore.session
from botocore.stub import ANY, Stubber

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.sagemaker.backend import SageMakerBackend
from mlrecipe.backends.sagemaker.options import SageMakerOptions
from mlrecipe.spec.load import load_step_release

ASSETS = Path(__file__).with_name("assets")
REGION = "us-west-2"
ACCOUNT = "123456789012"
OPTIONS = {"role_arn": f"arn:aws:iam::{ACCOUNT}:role/SageMakerExec", "s3_prefix": "s3://my-bucket/mlrecipe",
           "region": REGION, "poll_seconds": 1e-6}
NOW = dt.datetime(2026, 11, 26, 9, 0, tzinfo=dt.UTC)


def stubbed(service: str) -> tuple[Any, Stubber]:
    """A real botocore client of ``service`` whose answers come from a Stubber (dummy credentials)."""
    client = botocore.session.get_session().create_client(
        service, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    return client, Stubber(client)


class Aws:
    """Stubbed sagemaker, s3 and logs clients, and a backend that talks through them."""

    def __init__(self, state_dir: Path, **options: Any) -> None:
        self.sm, self.sm_stub = stubbed("sagemaker")
        self.s3, self.s3_stub = stubbed("s3")
        self.logs, self.logs_stub = stubbed("logs")
        for stub in self.stubs:
            stub.activate()
        self.backend = SageMakerBackend(SageMakerOptions.model_validate({**OPTIONS, **options}),
                                        clients={"sagemaker": self.sm, "s3": self.s3, "logs": self.logs})
        spec = load_step_release("cnn", "training/pytorchjob-distributed", [str(ASSETS / "train.yaml")], [],
                                 "default")
        self.step = spec.steps[0]
        self.ctx = ReleaseContext("cnn", "default", "sagemaker", state_dir)
        self.plan = self.backend.plan(self.step, self.ctx)

    @property
    def stubs(self) -> list[Stubber]:
        return [self.sm_stub, self.s3_stub, self.logs_stub]

    def job(self, attempt: int = 1) -> str:
        return f"{self.plan.job_prefix}-{attempt}"

    def arn(self, name: str) -> str:
        return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name.lower()}"

    def expect_list(self, *jobs: tuple[str, str]) -> None:
        """ListTrainingJobs answers ``jobs`` (name, status)."""
        summaries = [{"TrainingJobName": n, "TrainingJobArn": self.arn(n), "CreationTime": NOW,
                      "TrainingJobStatus": s} for n, s in jobs]
        self.sm_stub.add_response("list_training_jobs", {"TrainingJobSummaries": summaries},
                                  {"NameContains": self.plan.job_prefix, "MaxResults": 100})

    def expect_tags(self, name: str, attempt: int = 1, **overrides: str) -> None:
        tags = {"mlrecipe:release": "cnn", "mlrecipe:namespace": "default", "mlrecipe:step": self.step.name,
                "mlrecipe:attempt": str(attempt), "mlrecipe:digest": self.plan.digest, **overrides}
        self.sm_stub.add_response("list_tags", {"Tags": [{"Key": k, "Value": v} for k, v in tags.items()]},
                                  {"ResourceArn": self.arn(name)})

    def expect_upload(self) -> None:
        for _ in range(2):
            self.s3_stub.add_response("put_object", {}, {"Bucket": "my-bucket", "Key": ANY, "Body": ANY})

    def expect_create(self, attempt: int = 1) -> None:
        name = self.job(attempt)
        self.sm_stub.add_response("create_training_job", {"TrainingJobArn": self.arn(name)},
                                  {**self.plan.request.kwargs(), "TrainingJobName": name, "Tags": ANY})

    def expect_describe(self, status: str, secondary: str, attempt: int = 1, **extra: Any) -> None:
        name = self.job(attempt)
        self.sm_stub.add_response("describe_training_job", described(name, self.arn(name), status, secondary, **extra),
                                  {"TrainingJobName": name})

    def expect_logs(self, lines: list[str], hosts: int = 2) -> None:
        for rank in range(hosts):
            stream = f"{self.job()}/algo-{rank + 1}-1764147600"
            self.logs_stub.add_response(
                "describe_log_streams", {"logStreams": [{"logStreamName": stream}]},
                {"logGroupName": "/aws/sagemaker/TrainingJobs",
                 "logStreamNamePrefix": f"{self.job()}/algo-{rank + 1}-"})
            self.logs_stub.add_response(
                "get_log_events", {"events": [{"timestamp": 1, "message": m} for m in lines],
                                   "nextForwardToken": "f/1"},
                {"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamName": stream, "startFromHead": True})
            if not lines:
                continue  # an empty page ends the stream
            self.logs_stub.add_response(
                "get_log_events", {"events": [], "nextForwardToken": "f/1"},
                {"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamName": stream, "startFromHead": True,
                 "nextToken": "f/1"})

    def done(self) -> None:
        """Every scripted answer was asked for (and nothing else: an unscripted call fails at once)."""
        for stub in self.stubs:
            stub.assert_no_pending_responses()


def described(name: str, arn: str, status: str, secondary: str, **extra: Any) -> dict[str, Any]:
    """A DescribeTrainingJob answer."""
    return {
        "TrainingJobName": name, "TrainingJobArn": arn, "TrainingJobStatus": status, "SecondaryStatus": secondary,
        "ModelArtifacts": {"S3ModelArtifacts": extra.pop("artifacts", "")},
        "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 215},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400}, "CreationTime": NOW, **extra,
    }
