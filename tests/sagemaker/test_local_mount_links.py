"""Mode local refuses, before anything starts, a pvc mount path that goes through a symbolic link of this machine:
a host's root holds this machine's entries (links copied), where the mount script would refuse the path only when
the job runs. Mode aws does not look at this machine: the path is the container's."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.integration.helpers import cli

pytestmark = pytest.mark.integration

RECIPE = """\
image: pytorch-training:2.5-cpu
resources: {{nnodes: 1}}
pvc:
  - name: pv-ok
    mount_path: /fsx
  - name: pv-data
    mount_path: {mount_path}
train:
  command: ['touch {mount_path}/written']
"""


def _linked_tree(tmp_path: Path, target_exists: bool) -> str:
    """``<tmp>/x/lnk`` a link to ``<tmp>/x/real``; the returned mount path ``<tmp>/x/lnk/data`` goes through it."""
    real = tmp_path / "x" / "real"
    real.mkdir(parents=True)
    if target_exists:
        (real / "data").mkdir()
    (tmp_path / "x" / "lnk").symlink_to(real)
    return str(tmp_path / "x" / "lnk" / "data")


@pytest.mark.parametrize("target_exists", [False, True], ids=["missing", "existing"])
def test_local_mode_refuses_a_mount_path_through_a_link_at_plan_time(tmp_path: Path, mlhome: Path,
                                                                     target_exists: bool) -> None:
    mount_path = _linked_tree(tmp_path, target_exists)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(mount_path=mount_path))
    result = cli(mlhome, "install", "linked", "training/pytorchjob-distributed", "-f", str(recipe),
                 "-b", "sagemaker", "-B", "mode=local", "-B", "poll_seconds=0.3", timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {recipe}:7: pvc[1].mount_path: mount point {mount_path}: {tmp_path / 'x' / 'lnk'} "
                      "is a symbolic link; name the path without links"], result.stderr
    assert not mlhome.exists()  # no release state, no job record, no volume: nothing started or written
    assert sorted(p.name for p in (tmp_path / "x" / "real").iterdir()) == (["data"] if target_exists else [])


def test_aws_mode_leaves_the_mount_path_to_the_container(tmp_path: Path, mlhome: Path) -> None:
    mount_path = _linked_tree(tmp_path, target_exists=False)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(mount_path=mount_path))
    mlhome.mkdir()
    (mlhome / "config.yaml").write_text(textwrap.dedent("""\
        sagemaker:
          role_arn: arn:aws:iam::123456789012:role/r
          s3_prefix: s3://bucket/p
          region: us-west-2
          subnets: [subnet-0abc1234]
          security_groups: [sg-0abc1234]
          file_systems: {pv-data: {id: fs-0123456789abcdef0}}
        """))
    result = cli(mlhome, "install", "linked", "training/pytorchjob-distributed", "-f", str(recipe), "--dry-run",
                 "-b", "sagemaker", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"ln -sfn /opt/ml/input/data/pv-data {mount_path}" in result.stdout  # linked in the container's root
