"""SageMaker plans without AWS: the create_training_job request (golden), its mapping from the recipe, and the
checks that refuse a bad request at the recipe's line before anything is uploaded.

Refresh the golden files with ``pytest tests/sagemaker/test_sagemaker_plans.py --update-golden`` and review the diff.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from mlrecipe.backends.base import StepState
from mlrecipe.backends.registry import get_backend
from mlrecipe.backends.sagemaker import names, status
from mlrecipe.backends.sagemaker.request import instance_type, volume_gb
from mlrecipe.backends.sagemaker.validate import request_problems
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.golden import check_golden, normalize
from tests.repo import REPO, cli_env

ASSETS = Path(__file__).with_name("assets")
GOLDEN = REPO / "tests" / "golden" / "sagemaker"
AWS_OPTIONS = {
    "role_arn": "arn:aws:iam::123456789012:role/SageMakerExec", "s3_prefix": "s3://my-bucket/mlrecipe",
    "region": "us-west-2", "subnets": ["subnet-0abc1234"], "security_groups": ["sg-0abc1234"],
    "file_systems": {"pv-fsx": {"id": "fs-0123456789abcdef0", "directory_path": "/abcdefgh"}},
    "max_wait": 172800, "checkpoint_s3_uri": "s3://my-bucket/checkpoints", "tags": {"team": "ml"},
}


def install_inputs(recipe: Path, release: str = "cnn") -> dict:
    return {"kind": "install", "release": release, "chart": "training/pytorchjob-distributed",
            "files": [str(recipe)], "sets": [], "namespace": "default"}


def materialize(inputs: dict, options: dict) -> str:
    spec = spec_from_inputs(inputs)
    return ReleaseRunner(spec, get_backend("sagemaker", options), inputs, QuietDisplay()).materialize()


LOCAL_OPTIONS = {"mode": "local", "local_root": "/srv/sagemaker-local"}


@pytest.mark.parametrize(("name", "options"), [("train-aws", AWS_OPTIONS), ("train-local", LOCAL_OPTIONS)])
def test_request_golden(name: str, options: dict, mlhome: Path, update_golden: bool) -> None:
    text = materialize(install_inputs(ASSETS / "train.yaml"), options)
    text = normalize(text, [(str(mlhome), "$MLRECIPE_HOME"), (str(REPO), "$REPO")])
    check_golden(GOLDEN / f"{name}.yaml", text, update_golden)


def test_request_maps_the_recipe(mlhome: Path) -> None:
    request = next(yaml.safe_load_all(materialize(install_inputs(ASSETS / "train.yaml"), AWS_OPTIONS)))
    assert request["ResourceConfig"] == {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 215}
    channels = {c["ChannelName"]: c["DataSource"] for c in request["InputDataConfig"]}
    assert list(channels) == ["mlrecipe", "pv-fsx", "train"]
    assert channels["train"]["S3DataSource"]["S3Uri"] == "s3://my-bucket/digits/train"
    assert channels["pv-fsx"]["FileSystemDataSource"]["FileSystemType"] == "FSxLustre"
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == [
        "python3", "/opt/ml/input/data/mlrecipe/step_runtime.py", "/opt/ml/input/data/mlrecipe/step.json"]
    assert request["Environment"]["RUN_NAME"] == "cnn-cnn"  # Helm expression evaluated
    assert request["EnableManagedSpotTraining"] is True
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800}
    assert request["VpcConfig"]["Subnets"] == ["subnet-0abc1234"]
    tags = {t["Key"]: t["Value"] for t in request["Tags"]}
    assert tags["mlrecipe:release"] == "cnn" and tags["mlrecipe:attempt"] == "1" and tags["team"] == "ml"
    assert request_problems(request) == []


@pytest.mark.integration
def test_bad_request_is_refused_at_the_recipe_line(mlhome: Path) -> None:
    bad = ASSETS / "bad-train.yaml"
    opts = [f"-B{k}={v}" for k, v in (("role_arn", AWS_OPTIONS["role_arn"]), ("s3_prefix", AWS_OPTIONS["s3_prefix"]))]
    proc = subprocess.run([sys.executable, "-m", "mlrecipe", "install", "cnn", "training/pytorchjob-distributed",
                           "-f", str(bad), "--backend", "sagemaker", *opts],
                          capture_output=True, text=True, env=cli_env(mlhome), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"{bad}:4: resources.node_type: 'ml.p9z.24xlarge' is not one of SageMaker's TrainingInstanceType" \
        in proc.stderr
    assert f"{bad}:8: train.env[1].value: WANDB_API_KEY looks like a credential" in proc.stderr
    assert "Secrets Manager" in proc.stderr
    assert "abc123secret" not in proc.stderr + proc.stdout
    assert not (mlhome / "releases").exists()  # nothing was started or written


def test_missing_role_and_bucket_are_named(mlhome: Path) -> None:
    spec = spec_from_inputs(install_inputs(ASSETS / "train.yaml"))
    runner = ReleaseRunner(spec, get_backend("sagemaker", {}), {}, QuietDisplay())
    problems = "\n".join(map(str, runner.problems()))
    assert "role_arn: required in mode aws" in problems and "s3_prefix: required in mode aws" in problems
    assert problems.count("role_arn: ") == 1 and "RoleArn" not in problems  # said once, not per field


def test_options_from_config_file_and_command_line(mlhome: Path) -> None:
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text("sagemaker:\n  region: eu-west-1\n  max_run: 3600\n")
    backend = get_backend("sagemaker", {"max_run": 7200, "network_isolation": True})
    assert backend.options.region == "eu-west-1"
    assert backend.options.max_run == 7200 and backend.options.network_isolation is True


def test_inter_container_encryption_reaches_the_request(mlhome: Path) -> None:
    """The workshop's EnableInterContainerTrafficEncryption, from -B inter_container_encryption=true (issue 41 R16)."""
    plain = next(yaml.safe_load_all(materialize(install_inputs(ASSETS / "train.yaml"), AWS_OPTIONS)))
    assert "EnableInterContainerTrafficEncryption" not in plain
    options = {**AWS_OPTIONS, "inter_container_encryption": True}
    encrypted = next(yaml.safe_load_all(materialize(install_inputs(ASSETS / "train.yaml"), options)))
    assert encrypted["EnableInterContainerTrafficEncryption"] is True
    assert request_problems(encrypted) == []


@pytest.mark.parametrize(("storage", "gb"), [("200Gi", 215), ("100G", 100), ("1Ti", 1100), ("500Mi", 1)])
def test_ebs_storage_in_gb(storage: str, gb: int) -> None:
    assert volume_gb(storage) == gb


def test_instance_type_names() -> None:
    assert instance_type("p4d.24xlarge") == "ml.p4d.24xlarge"
    assert instance_type("ml.g5.xlarge") == "ml.g5.xlarge"


@pytest.mark.parametrize("release", ["a", "x" * 80, "my_release.v2", "r--2"])
def test_job_names_fit_sagemaker_pattern(release: str) -> None:
    prefix = names.job_prefix("default", release, "train_step", "0123456789ab")
    for attempt in (1, 12, 999):
        name = names.job_name(prefix, attempt)
        assert names.JOB_NAME_PATTERN.fullmatch(name), name
        assert names.attempt_of(name, prefix) == attempt


def test_job_names_differ_per_namespace_and_plan() -> None:
    a = names.job_prefix("default", "r", "s", "d1")
    assert a != names.job_prefix("other", "r", "s", "d1")
    assert a != names.job_prefix("default", "r", "s", "d2")


@pytest.mark.parametrize(("job_status", "state"), [
    ("InProgress", StepState.RUNNING), ("Stopping", StepState.RUNNING), ("Completed", StepState.SUCCEEDED),
    ("Failed", StepState.FAILED), ("Stopped", StepState.INTERRUPTED)])
def test_status_table(job_status: str, state: StepState) -> None:
    assert status.job_state({"TrainingJobStatus": job_status}) is state


def test_failed_job_shows_its_reason() -> None:
    outcome = status.job_outcome({"TrainingJobName": "j", "TrainingJobStatus": "Failed",
                                  "FailureReason": "AlgorithmError: exit 3", "BillableTimeInSeconds": 42})
    assert outcome is not None and outcome.state is StepState.FAILED
    assert "AlgorithmError: exit 3" in outcome.message and "billable 42 s" in outcome.message


@pytest.mark.integration
def test_cli_start_does_not_import_boto3() -> None:
    code = "import sys, mlrecipe.cli.app; sys.exit('boto3' in sys.modules or 'botocore' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_aws_mode_needs_an_image_and_s3_channels(mlhome: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("sagemaker:\n  inputs: [{name: code, uri: 'file:///srv/code'}]\n"
                      "train:\n  command: [python3, t.py]\n")
    spec = spec_from_inputs(install_inputs(recipe))
    runner = ReleaseRunner(spec, get_backend("sagemaker", AWS_OPTIONS), {}, QuietDisplay())
    problems = "\n".join(map(str, runner.problems()))
    assert f"{recipe}:1: image: required on the sagemaker backend" in problems
    assert f"{recipe}:2: sagemaker.inputs[0].uri: 'file:///srv/code': file:// URIs work in mode local only" in problems
    local = ReleaseRunner(spec, get_backend("sagemaker", LOCAL_OPTIONS), {}, QuietDisplay())
    assert local.problems() == []  # local mode: this machine's Python, file:// channels as they are
