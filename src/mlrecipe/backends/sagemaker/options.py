"""Options of the SageMaker backend: the ``sagemaker:`` section of the config file, or ``-B sagemaker.key=value``
(plain ``-B key=value`` where SageMaker is the release's backend).

Example::

    sagemaker:
      mode: aws                       # or local: the same plan on this machine (no AWS account needed)
      region: us-west-2
      role_arn: arn:aws:iam::123456789012:role/SageMakerExecution
      s3_prefix: s3://my-bucket/mlrecipe
      max_run: 86400
      max_wait: 172800                # managed spot training (with checkpoint_s3_uri)
      checkpoint_s3_uri: s3://my-bucket/checkpoints
      subnets: [subnet-0abc1234]
      security_groups: [sg-0abc1234]
      file_systems:
        pv-fsx: {id: fs-0123456789abcdef0, type: FSxLustre, directory_path: /abcdefgh}
      tags: {team: ml}
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from mlrecipe.backends.base import BackendOptions
from mlrecipe.config import mlrecipe_home
from mlrecipe.credentials import ambiguity, is_secret_name, is_secret_value
from mlrecipe.spec.model import Model


def no_traversal(path: str, what: str = "a path") -> str:
    """``path`` when none of its parts is ``..`` (nor a NUL byte); else a ``ValueError`` naming it."""
    if "\0" in path or ".." in PurePosixPath(path).parts or ".." in path.replace("\\", "/").split("/"):
        raise ValueError(f"{what} must not go up with '..', got {path!r}")
    return path


class FileSystem(Model):
    """An FSx for Lustre or EFS file system mounted as a file-system channel at a pvc's mount path."""

    id: str = Field(description="File system id (fs-...)")
    type: Literal["FSxLustre", "EFS"] = Field("FSxLustre", description="FSxLustre or EFS")
    directory_path: str = Field(
        "/", description="Directory of the file system to mount (FSx for Lustre: /<mount name>[/path])")
    access_mode: Literal["rw", "ro"] = Field("rw", description="rw or ro")

    @field_validator("directory_path")
    @classmethod
    def _inside(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path in the file system (/<mount name>[/path]), got {value!r}")
        return no_traversal(value, "directory_path")


class SageMakerOptions(BackendOptions):
    """Settings of the SageMaker backend (each step is one training job)."""

    mode: Literal["aws", "local"] = Field(
        "aws", description="aws: training jobs on Amazon SageMaker; local: the same plan on this machine with "
        "SageMaker's container contract")
    region: str | None = Field(None, description="AWS region (default: the SDK's, from AWS_REGION or ~/.aws/config)")
    role_arn: str | None = Field(None, description="Execution role of the training jobs (RoleArn); aws mode needs it")
    s3_prefix: str | None = Field(
        None, description="s3://bucket/prefix where the step program, code and outputs go; aws mode needs it")
    endpoint_url: str | None = Field(
        None, description="SageMaker and S3 endpoint URL (VPC endpoints, emulators in tests)")
    instance_type: str = Field(
        "ml.m5.xlarge", description="Instance type of steps whose recipe names no resources.node_type")
    volume_size_gb: int = Field(30, ge=1, description="VolumeSizeInGB of steps whose recipe has no ebs.storage")
    images: dict[str, str] = Field(
        default_factory=dict, description="recipe image -> training image (an ECR URI SageMaker can pull)")
    max_run: int = Field(86400, ge=1, description="StoppingCondition.MaxRuntimeInSeconds")
    max_wait: int | None = Field(
        None, ge=1, description="StoppingCondition.MaxWaitTimeInSeconds: set to use managed spot training "
        "(must be >= max_run)")
    checkpoint_s3_uri: str | None = Field(
        None, description="CheckpointConfig.S3Uri (synced with /opt/ml/checkpoints; spot jobs resume from it)")
    subnets: list[str] = Field(default_factory=list, description="VpcConfig.Subnets (file-system channels need them)")
    security_groups: list[str] = Field(default_factory=list, description="VpcConfig.SecurityGroupIds")
    network_isolation: bool = Field(False, description="EnableNetworkIsolation (no outbound network in the container)")
    inter_container_encryption: bool = Field(
        False, description="EnableInterContainerTrafficEncryption: encrypt the traffic between the job's hosts "
        "(distributed training; slower, and billed longer)")
    file_systems: dict[str, FileSystem] = Field(
        default_factory=dict, description="pvc name -> file system mounted as a channel at the pvc's mount path "
        "(mode aws: pvcs without one are not mounted; mode local: they are the local backend's volumes)")
    tags: dict[str, str] = Field(default_factory=dict, description="Tags of every training job (besides mlrecipe's)")
    poll_seconds: float = Field(15.0, gt=0, description="How often the runner describes a running job")
    log_group: str = Field("/aws/sagemaker/TrainingJobs", description="CloudWatch log group of training jobs")
    local_root: str | None = Field(
        None, description="local mode: where jobs live (default $MLRECIPE_HOME/sagemaker-local)")
    volume_root: str | None = Field(
        None, description="local mode: directory of the pvc volumes mounted for pvcs without a file_systems entry, "
        "one sub-directory per pvc (default: the local backend's, local.root or $MLRECIPE_HOME/volumes)")

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"not a URL ({exc}): give http(s)://host[:port]") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in value):
            raise ValueError(f"must be http(s)://host[:port][/path], got {value!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not carry a user or password: AWS credentials come from the SDK's chain "
                             "(environment, ~/.aws, the instance's role)")
        del port
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str | None) -> str | None:
        import re

        if value is not None and not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-[0-9]+", value):
            raise ValueError(f"must be an AWS region such as us-west-2, got {value!r}")
        return value

    @field_validator("s3_prefix", "checkpoint_s3_uri", "local_root", "volume_root")
    @classmethod
    def _paths(cls, value: str | None) -> str | None:
        return value if value is None else no_traversal(value)

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: dict[str, str]) -> dict[str, str]:
        for key, value in tags.items():
            why = ambiguity(key)
            if why:
                raise ValueError(f"tag {why}")
            if is_secret_name(key) or is_secret_value(value):
                raise ValueError(f"tag {key} looks like a credential: tags are shown to anyone who may list or "
                                 "describe the job, and printed in plans; never put a credential in a tag")
            if key.startswith(("aws:", "mlrecipe:")):
                raise ValueError(f"tag {key}: the prefixes aws: and mlrecipe: are reserved")
        return tags

    @model_validator(mode="after")
    def _no_credentials(self) -> SageMakerOptions:
        for name, value in _strings(self.model_dump(exclude={"tags"})):
            if is_secret_value(value):
                raise ValueError(f"{name} holds a credential (a password in a URL or a token); options are written "
                                 "into plans and the release's state: give credentials through the AWS SDK's chain")
        return self

    def local_dir(self) -> Path:
        """The local mode's root directory."""
        return Path(self.local_root).expanduser() if self.local_root else mlrecipe_home() / "sagemaker-local"

    def volume_dir(self, pvc: str) -> Path:
        """local mode: the directory mounted for ``pvc`` when ``file_systems`` names none (the local backend's)."""
        from mlrecipe.backends.host.volumes import local_volume_root

        return local_volume_root(self.volume_root) / pvc


def _strings(node: Any, path: str = "") -> list[tuple[str, str]]:
    """(dotted path, text) of every string in a dumped options model."""
    if isinstance(node, str):
        return [(path, node)]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _strings(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        return [s for i, v in enumerate(node) for s in _strings(v, f"{path}[{i}]")]
    return []
