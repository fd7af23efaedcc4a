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

from pathlib import Path
from typing import Literal

from pydantic import Field

from mlrecipe.backends.base import BackendOptions
from mlrecipe.config import mlrecipe_home
from mlrecipe.spec.model import Model


class FileSystem(Model):
    """An FSx for Lustre or EFS file system mounted as a file-system channel at a pvc's mount path."""

    id: str = Field(description="File system id (fs-...)")
    type: Literal["FSxLustre", "EFS"] = Field("FSxLustre", description="FSxLustre or EFS")
    directory_path: str = Field(
        "/", description="Directory of the file system to mount (FSx for Lustre: /<mount name>[/path])")
    access_mode: Literal["rw", "ro"] = Field("rw", description="rw or ro")


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

    def local_dir(self) -> Path:
        """The local mode's root directory."""
        return Path(self.local_root).expanduser() if self.local_root else mlrecipe_home() / "sagemaker-local"

    def volume_dir(self, pvc: str) -> Path:
        """local mode: the directory mounted for ``pvc`` when ``file_systems`` names none (the local backend's)."""
        from mlrecipe.backends.host.volumes import local_volume_root

        return local_volume_root(self.volume_root) / pvc
