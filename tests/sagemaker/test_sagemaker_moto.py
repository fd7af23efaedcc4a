"""The CLI against a real moto server over HTTP (``endpoint_url``): the step program uploaded to S3, the training
job created, described and listed, its model_artifacts recorded and handed to a later local step, and a forced
re-run adopting the job instead of creating a second one. moto marks every job Completed at once and accepts
duplicate names (real SageMaker refuses them), so what moto shows is requests and round trips, not training."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.integration.helpers import cli
from tests.sagemaker.moto_server import BUCKET, Moto, moto_server  # noqa: F401

pytestmark = pytest.mark.integration

PIPELINE = """
    release: hybrid
    steps:
      - name: train
        chart: training/pytorchjob-distributed
        backend: sagemaker
        values:
          image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu
          resources: {nnodes: 2, node_type: ml.m5.xlarge}
          pvc: []
          sagemaker:
            inputs: [{name: train, uri: "s3://mlrecipe-test/data/train"}]
          train:
            env: [{name: EPOCHS, value: "2"}]
            command: [python3, train.py]
      - name: use
        chart: data-prep/data-process
        values:
          pvc: []
          process:
            command: [python3, $MLRECIPE_PIPELINE_DIR/use.py]
    """
USE = """
import os
with open(os.environ["MLRECIPE_PIPELINE_DIR"] + "/got.txt", "w") as fh:
    fh.write(os.environ["MLRECIPE_TRAIN_MODEL_ARTIFACTS"] + " " + os.environ["MLRECIPE_TRAIN_JOB_NAME"])
"""


def test_pipeline_against_moto(tmp_path: Path, mlhome: Path, moto_server: Moto) -> None:  # noqa: F811
    moto_server.configure(mlhome)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    (tmp_path / "use.py").write_text(USE)
    result = cli(mlhome, "run", str(pipeline), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr

    sm = moto_server.client("sagemaker")
    jobs = sm.list_training_jobs()["TrainingJobSummaries"]
    assert len(jobs) == 1
    job = sm.describe_training_job(TrainingJobName=jobs[0]["TrainingJobName"])
    assert job["TrainingJobStatus"] == "Completed"
    assert job["ResourceConfig"]["InstanceCount"] == 2 and job["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge"
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]}
    assert channels["train"] == "s3://mlrecipe-test/data/train"
    program = channels["mlrecipe"]
    assert program.startswith(f"s3://{BUCKET}/runs/default/hybrid/train/")
    keys = {o["Key"] for o in moto_server.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]}
    prefix = program.removeprefix(f"s3://{BUCKET}/")
    assert {f"{prefix}step.json", f"{prefix}step_runtime.py"} <= keys
    body = moto_server.client("s3").get_object(Bucket=BUCKET, Key=f"{prefix}step.json")["Body"].read()
    assert json.loads(body)["command"] == ["python3", "train.py"]

    artifacts = job["ModelArtifacts"]["S3ModelArtifacts"]
    assert (tmp_path / "got.txt").read_text() == f"{artifacts} {job['TrainingJobName']}"
    status = json.loads(cli(mlhome, "status", "hybrid", "-o", "json").stdout)[0]
    train = {s["name"]: s for s in status["steps"]}["train"]
    assert train["backend"] == "sagemaker" and train["state"] == "succeeded"
    assert train["outputs"] == {"job_name": job["TrainingJobName"], "model_artifacts": artifacts}

    again = cli(mlhome, "run", str(pipeline), "--force", timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "adopted: an earlier run of this plan created the job" in again.stdout, again.stdout
    assert len(sm.list_training_jobs()["TrainingJobSummaries"]) == 1, "a re-run never creates a second job"
