"""The typed requests of the SageMaker calls that create a step's resources; each renders (``kwargs()``) to the
keyword arguments of its boto3 call, keys in the order the plans show them.

``CreateTrainingJob`` is a training step's job; ``CreateModel``, ``CreateEndpointConfig`` and ``CreateEndpoint``
are an endpoint step's three resources. The parts they share (:class:`VpcConfig`, :class:`Tag`) are built once,
by :mod:`.parts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Kwargs = dict[str, Any]


@dataclass(frozen=True)
class Tag:
    """One resource tag."""

    key: str
    value: str

    def kwargs(self) -> Kwargs:
        return {"Key": self.key, "Value": self.value}


@dataclass(frozen=True)
class VpcConfig:
    """The subnets and security groups a job's hosts or a model's containers run in."""

    security_group_ids: tuple[str, ...]
    subnets: tuple[str, ...]

    def kwargs(self) -> Kwargs:
        return {"SecurityGroupIds": list(self.security_group_ids), "Subnets": list(self.subnets)}


@dataclass(frozen=True)
class S3Channel:
    """A data channel read from an S3 prefix (or, in mode local, a ``file://`` directory)."""

    name: str
    uri: str

    def kwargs(self) -> Kwargs:
        return {"ChannelName": self.name, "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": self.uri, "S3DataDistributionType": "FullyReplicated"}},
            "InputMode": "File"}


@dataclass(frozen=True)
class FileSystemChannel:
    """A data channel that is a file system (FSx for Lustre or EFS)."""

    name: str
    file_system_id: str
    access_mode: str
    file_system_type: str
    directory_path: str

    def kwargs(self) -> Kwargs:
        return {"ChannelName": self.name, "DataSource": {"FileSystemDataSource": {
            "FileSystemId": self.file_system_id, "FileSystemAccessMode": self.access_mode,
            "FileSystemType": self.file_system_type, "DirectoryPath": self.directory_path}}, "InputMode": "File"}


Channel = S3Channel | FileSystemChannel


@dataclass(frozen=True)
class CreateTrainingJob:
    """``create_training_job``: the first channel is the ``mlrecipe`` channel (the step program and runtime)."""

    training_job_name: str
    image: str
    entrypoint: tuple[str, ...]
    role_arn: str
    channels: tuple[Channel, ...]
    output_path: str
    instance_type: str
    instance_count: int
    volume_size_gb: int
    max_runtime: int
    environment: dict[str, str]
    max_wait: int | None = None  #: spot training: the wait for capacity within it
    checkpoint_s3_uri: str | None = None
    vpc: VpcConfig | None = None
    network_isolation: bool = False
    inter_container_encryption: bool = False
    tags: tuple[Tag, ...] = ()

    @property
    def program_uri(self) -> str:
        """The ``mlrecipe`` channel's URI."""
        first = self.channels[0]
        return first.uri if isinstance(first, S3Channel) else ""

    def kwargs(self) -> Kwargs:
        stopping: Kwargs = {"MaxRuntimeInSeconds": self.max_runtime}
        out: Kwargs = {
            "TrainingJobName": self.training_job_name,
            "AlgorithmSpecification": {"TrainingImage": self.image, "TrainingInputMode": "File",
                                       "ContainerEntrypoint": list(self.entrypoint)},
            "RoleArn": self.role_arn,
            "InputDataConfig": [c.kwargs() for c in self.channels],
            "OutputDataConfig": {"S3OutputPath": self.output_path},
            "ResourceConfig": {"InstanceType": self.instance_type, "InstanceCount": self.instance_count,
                               "VolumeSizeInGB": self.volume_size_gb},
            "StoppingCondition": stopping,
            "Environment": dict(self.environment),
        }
        if self.max_wait is not None:
            stopping["MaxWaitTimeInSeconds"] = self.max_wait
            out["EnableManagedSpotTraining"] = True
        if self.checkpoint_s3_uri:
            out["CheckpointConfig"] = {"S3Uri": self.checkpoint_s3_uri, "LocalPath": "/opt/ml/checkpoints"}
        if self.vpc is not None:
            out["VpcConfig"] = self.vpc.kwargs()
        if self.network_isolation:
            out["EnableNetworkIsolation"] = True
        if self.inter_container_encryption:
            out["EnableInterContainerTrafficEncryption"] = True
        out["Tags"] = [t.kwargs() for t in self.tags]
        return out


@dataclass(frozen=True)
class CreateModel:
    """``create_model``: one container serving a model archive."""

    model_name: str
    image: str
    model_data_url: str
    environment: dict[str, str]
    execution_role_arn: str
    vpc: VpcConfig | None = None
    network_isolation: bool = False
    tags: tuple[Tag, ...] = ()

    def kwargs(self) -> Kwargs:
        out: Kwargs = {"ModelName": self.model_name,
                       "PrimaryContainer": {"Image": self.image, "ModelDataUrl": self.model_data_url,
                                            "Environment": dict(self.environment)},
                       "ExecutionRoleArn": self.execution_role_arn}
        if self.vpc is not None:
            out["VpcConfig"] = self.vpc.kwargs()
        if self.network_isolation:
            out["EnableNetworkIsolation"] = True
        out["Tags"] = [t.kwargs() for t in self.tags]
        return out


@dataclass(frozen=True)
class CreateEndpointConfig:
    """``create_endpoint_config``: one production variant of ``model_name``."""

    endpoint_config_name: str
    variant_name: str
    model_name: str
    instance_count: int
    instance_type: str
    tags: tuple[Tag, ...] = ()

    def kwargs(self) -> Kwargs:
        return {"EndpointConfigName": self.endpoint_config_name,
                "ProductionVariants": [{"VariantName": self.variant_name, "ModelName": self.model_name,
                                        "InitialInstanceCount": self.instance_count,
                                        "InstanceType": self.instance_type}],
                "Tags": [t.kwargs() for t in self.tags]}


@dataclass(frozen=True)
class CreateEndpoint:
    """``create_endpoint`` of an endpoint config."""

    endpoint_name: str
    endpoint_config_name: str
    tags: tuple[Tag, ...] = field(default=())

    def kwargs(self) -> Kwargs:
        return {"EndpointName": self.endpoint_name, "EndpointConfigName": self.endpoint_config_name,
                "Tags": [t.kwargs() for t in self.tags]}
