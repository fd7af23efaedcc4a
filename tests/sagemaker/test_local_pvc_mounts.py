"""Mode local mounts the recipe's pvcs from the local backend's volumes: a hybrid pipeline's local step and its
SageMaker-local step share ``/fsx`` as they would on a cluster (and ``-B sagemaker.mode=local`` reaches the step)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.integration.helpers import cli

pytestmark = pytest.mark.integration

PIPELINE = """
release: shared
steps:
  - name: write
    chart: data-prep/data-process
    values:
      pvc: [{name: pv-fsx, mount_path: /fsx}]
      process:
        command: ['mkdir -p /fsx/shared && echo from-local > /fsx/shared/in.txt']
  - name: train
    chart: training/pytorchjob-distributed
    backend: sagemaker
    values:
      image: pytorch-training:2.5-cpu
      resources: {nnodes: 2}
      pvc: [{name: pv-fsx, mount_path: /fsx}]
      train:
        command: ['cat /fsx/shared/in.txt > /fsx/shared/seen-by-$SM_CURRENT_HOST.txt']
"""


def test_local_and_sagemaker_local_steps_share_the_pvc(tmp_path: Path, mlhome: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    result = cli(mlhome, "run", str(pipeline), "-B", "sagemaker.mode=local", "-B", "sagemaker.poll_seconds=0.3",
                 timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    volume = mlhome / "volumes" / "pv-fsx" / "shared"  # the local backend's volume of pv-fsx
    assert (volume / "in.txt").read_text() == "from-local\n"
    for host in ("algo-1", "algo-2"):  # both hosts saw the local step's file and wrote back through the mount
        assert (volume / f"seen-by-{host}.txt").read_text() == "from-local\n"
    assert not Path("/fsx/shared").exists()  # the machine's own /fsx was never written: every write was mounted


def test_aws_mode_mounts_no_local_volume(tmp_path: Path, mlhome: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    result = cli(mlhome, "run", str(pipeline), "--dry-run", "-B", "sagemaker.role_arn=arn:aws:iam::123456789012:role/r",
                 "-B", "sagemaker.s3_prefix=s3://bucket/p", "-B", "sagemaker.region=us-west-2", timeout=60)
    assert result.returncode == 0, result.stderr
    aws = result.stdout.split("backend sagemaker ====")[1]
    assert "FileSystemDataSource" not in aws and "mount_points.sh" not in aws
    local = cli(mlhome, "run", str(pipeline), "--dry-run", "-B", "sagemaker.mode=local", timeout=60)
    sagemaker_local = local.stdout.split("backend sagemaker ====")[1]
    assert "FileSystemDataSource" in sagemaker_local
    assert "sh /opt/ml/input/data/mlrecipe/mount_points.sh inside /opt/ml/input/data/pv-fsx /fsx --" in sagemaker_local
    assert "mount_points.sh" not in aws  # the container's own root: a link, and no mount script shipped
