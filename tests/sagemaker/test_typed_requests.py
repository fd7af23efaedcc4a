"""The typed SageMaker requests render the boto3 calls' keyword arguments (and botocore accepts them); a step's
handle is typed by its path (old state files included); one client provider answers for mode local, aws and an
endpoint URL."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from pydantic import ValidationError

from mlrecipe.backends.sagemaker.api import (
    CreateEndpoint,
    CreateEndpointConfig,
    CreateModel,
    CreateTrainingJob,
    FileSystemChannel,
    S3Channel,
    Tag,
    VpcConfig,
)
from mlrecipe.backends.sagemaker.client import ClientProvider
from mlrecipe.backends.sagemaker.handle import EndpointHandle, TrainingJobHandle, load_handle
from mlrecipe.backends.sagemaker.service_model import validate_request

ROLE = "arn:aws:iam::123456789012:role/SageMakerExec"
VPC = VpcConfig(("sg-0abc1234",), ("subnet-0abc1234",))
TAGS = (Tag("team", "ml"), Tag("mlrecipe:step", "train"))


def test_a_training_job_renders_create_training_job_in_the_plans_key_order() -> None:
    job = CreateTrainingJob(
        training_job_name="rel-train-0123456789ab-1", image="123.dkr.ecr.us-west-2.amazonaws.com/t:1",
        entrypoint=("python3", "run.py"), role_arn=ROLE,
        channels=(S3Channel("mlrecipe", "s3://b/p/"), FileSystemChannel("pv-fsx", "fs-0123456789abcdef0", "rw",
                                                                        "FSxLustre", "/abcdefgh")),
        output_path="s3://b/out", instance_type="ml.p4d.24xlarge", instance_count=2, volume_size_gb=100,
        max_runtime=3600, environment={"A": "1"}, max_wait=7200, checkpoint_s3_uri="s3://b/ckpt", vpc=VPC,
        network_isolation=True, inter_container_encryption=True, tags=TAGS)
    kwargs = job.kwargs()
    assert list(kwargs) == ["TrainingJobName", "AlgorithmSpecification", "RoleArn", "InputDataConfig",
                            "OutputDataConfig", "ResourceConfig", "StoppingCondition", "Environment",
                            "EnableManagedSpotTraining", "CheckpointConfig", "VpcConfig", "EnableNetworkIsolation",
                            "EnableInterContainerTrafficEncryption", "Tags"]
    assert kwargs["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}
    assert kwargs["InputDataConfig"][1]["DataSource"]["FileSystemDataSource"]["FileSystemId"] == "fs-0123456789abcdef0"
    assert kwargs["Tags"] == [{"Key": "team", "Value": "ml"}, {"Key": "mlrecipe:step", "Value": "train"}]
    assert job.program_uri == "s3://b/p/"
    validate_request("CreateTrainingJob", kwargs)
    plain = CreateTrainingJob("j-1", "img", ("python3",), ROLE, (S3Channel("mlrecipe", "s3://b/p/"),), "s3://b/o",
                              "ml.m5.large", 1, 30, 60, {}).kwargs()
    assert "VpcConfig" not in plain and "EnableManagedSpotTraining" not in plain and plain["Tags"] == []


def test_an_endpoints_three_requests_share_the_vpc_and_tags_parts() -> None:
    model = CreateModel("m", "img:1", "s3://b/model.tar.gz", {"K": "v"}, ROLE, vpc=VPC, network_isolation=True,
                        tags=TAGS)
    config = CreateEndpointConfig("m", "AllTraffic", "m", 2, "ml.g5.xlarge", tags=TAGS)
    endpoint = CreateEndpoint("m", "m", tags=TAGS)
    for operation, kwargs in (("CreateModel", model.kwargs()), ("CreateEndpointConfig", config.kwargs()),
                              ("CreateEndpoint", endpoint.kwargs())):
        validate_request(operation, kwargs)
        assert kwargs["Tags"] == [t.kwargs() for t in TAGS]
    assert model.kwargs()["VpcConfig"] == {"SecurityGroupIds": ["sg-0abc1234"], "Subnets": ["subnet-0abc1234"]}
    assert config.kwargs()["ProductionVariants"] == [
        {"VariantName": "AllTraffic", "ModelName": "m", "InitialInstanceCount": 2, "InstanceType": "ml.g5.xlarge"}]


def test_handles_are_typed_by_their_path_and_old_state_files_still_load() -> None:
    old_endpoint = {"job_name": "", "endpoint_name": "rel-ep-0123456789ab", "mode": "local", "region": None,
                    "endpoint_url": None, "local_root": "/srv/sm", "adopted": True, "model_artifacts": None}
    endpoint = load_handle(old_endpoint)
    assert isinstance(endpoint, EndpointHandle) and endpoint.path == "endpoint" and endpoint.adopted
    assert "job_name" not in endpoint.to_json()
    old_training = {**old_endpoint, "job_name": "rel-train-0123456789ab-2", "endpoint_name": None,
                    "model_artifacts": "s3://b/model.tar.gz"}
    training = load_handle(old_training)
    assert isinstance(training, TrainingJobHandle) and training.path == "training"
    assert training.model_artifacts == "s3://b/model.tar.gz" and "endpoint_name" not in training.to_json()
    with pytest.raises(ValidationError):
        TrainingJobHandle(job_name="")  # a handle names what the step made
    with pytest.raises(ValidationError):
        load_handle({"mode": "aws"})


def test_one_client_provider_for_mode_aws_an_endpoint_url_and_mode_local(tmp_path: Path) -> None:
    aws = ClientProvider("aws", "us-west-2", None, tmp_path)
    assert aws.client("sagemaker").meta.endpoint_url == "https://api.sagemaker.us-west-2.amazonaws.com"
    moto = ClientProvider("aws", "us-east-1", "http://127.0.0.1:5000", tmp_path)
    assert moto.client("s3").meta.endpoint_url == "http://127.0.0.1:5000"
    assert moto.client("sagemaker").meta.config.retries["total_max_attempts"] == 4  # botocore: 3 retries
    assert moto.client("sagemaker", quick=True).meta.config.retries["total_max_attempts"] == 1
    local = ClientProvider("local", None, "http://127.0.0.1:5000", tmp_path)
    client = local.client("sagemaker")
    assert type(client).__name__ == "LocalSageMakerClient" and not hasattr(client, "meta")
    assert local.client("s3").meta.endpoint_url == "http://127.0.0.1:5000"  # s3:// channels through the URL
