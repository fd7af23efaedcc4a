"""``mlrecipe debug-bundle`` of a SageMaker step, from another process, against a real moto server over HTTP: the
job's description and its host's CloudWatch log stream are in the bundle."""

from __future__ import annotations

import tarfile
import time
from pathlib import Path

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from mlrecipe.backends.base import StepState
from mlrecipe.backends.sagemaker.handle import TrainingJobHandle
from mlrecipe.runner.state import ReleaseRecord, StepRecord
from tests.integration.helpers import cli
from tests.sagemaker.moto_server import ROLE, Moto, moto_server  # noqa: F401

pytestmark = pytest.mark.integration
TOKEN = "hf_MotoSecretAbcdefghijklmnopqrstuvwxyz01"
GROUP = "/aws/sagemaker/TrainingJobs"


def test_the_bundle_holds_the_job_and_its_log_stream(tmp_path: Path, mlhome: Path,
                                                     moto_server: Moto) -> None:  # noqa: F811
    moto_server.configure(mlhome)
    moto_server.client("sagemaker").create_training_job(
        TrainingJobName="gone-train-1", RoleArn=ROLE, Environment={"HF_TOKEN": TOKEN, "NCCL_DEBUG": "INFO"},
        AlgorithmSpecification={"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
                                "TrainingInputMode": "File"},
        OutputDataConfig={"S3OutputPath": "s3://b/o"}, StoppingCondition={"MaxRuntimeInSeconds": 60},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1})
    logs = moto_server.client("logs")
    logs.create_log_group(logGroupName=GROUP)
    logs.create_log_stream(logGroupName=GROUP, logStreamName="gone-train-1/algo-1-1764147600")
    logs.put_log_events(logGroupName=GROUP, logStreamName="gone-train-1/algo-1-1764147600", logEvents=[
        {"timestamp": int(time.time() * 1000), "message": "NCCL version 2.21.5+cuda12.4"},
        {"timestamp": int(time.time() * 1000) + 1, "message": "RuntimeError: rank 0 lost its peer"}])
    handle = TrainingJobHandle(job_name="gone-train-1", region="us-east-1", endpoint_url=moto_server.url)
    ReleaseRecord("gone", "default", "sagemaker", {}, state=StepState.FAILED, order=["train"],
                  steps={"train": StepRecord("train", "training/pytorchjob-distributed", state=StepState.FAILED,
                                             handle=handle.to_json(), backend="sagemaker")}).save()

    out = tmp_path / "b.tar.gz"
    made = cli(mlhome, "debug-bundle", "sagemaker://default/gone", "-o", str(out))
    assert made.returncode == 0, made.stderr
    assert "debug-bundle: step train: asking sagemaker what it still holds" in made.stderr
    with tarfile.open(out) as tar:
        members = {m.name.split("/", 1)[1]: (tar.extractfile(m) or b"").read().decode() for m in tar.getmembers()}
    described = members["backend/train/describe-training-job.json"]
    assert '"TrainingJobName": "gone-train-1"' in described and '"TrainingJobStatus"' in described
    assert members["backend/train/logs/algo-1.log"] == ("NCCL version 2.21.5+cuda12.4\n"
                                                        "RuntimeError: rank 0 lost its peer\n")
    assert "nccl\t2.21.5+cuda12.4 (reported in backend/train/logs/algo-1.log)" in members["versions.txt"]
    assert not [name for name, text in members.items() if TOKEN in text], "masked (test_debug_records: Stubber)"
