"""A pvc mount path this machine lacks is made in the node's own mount namespace, never on the machine's file
systems (issue 41, R12): by the local backend, by SageMaker's local mode (a top-level path, and one below an existing
directory, which its host's program binds with the mount script from the ``mlrecipe`` channel), and by the mount
script itself for an ordinary user (a user namespace) and for a path below an existing directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlrecipe.backends.host.mount_points import MOUNT_SCRIPT_PATH, mount_argv
from tests.integration.helpers import cli

pytestmark = pytest.mark.integration

PIPELINE = """
release: r12
steps:
  - name: write
    chart: data-prep/data-process
    values:
      pvc: [{{name: pv-r12, mount_path: {path}}}]
      process:
        command: ['echo from-local > {path}/in.txt']
  - name: train
    chart: training/pytorchjob-distributed
    backend: sagemaker
    values:
      image: pytorch-training:2.5-cpu
      resources: {{nnodes: 1}}
      pvc: [{{name: pv-r12, mount_path: {path}}}]
      train:
        command: ['cat {path}/in.txt > {path}/seen.txt']
"""


@pytest.fixture
def absent_top_level() -> Iterator[str]:
    """A top-level path that does not exist on this machine (removed afterwards should a defect create it)."""
    path = f"/mlrecipe-r12-{uuid.uuid4().hex[:12]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_local_and_local_mode_steps_leave_the_machine_root_alone(tmp_path: Path, mlhome: Path,
                                                                   absent_top_level: str) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(PIPELINE.format(path=absent_top_level)))
    result = cli(mlhome, "run", str(pipeline), "-B", "sagemaker.mode=local", "-B", "sagemaker.poll_seconds=0.3",
                 timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    volume = mlhome / "volumes" / "pv-r12"
    assert (volume / "in.txt").read_text() == "from-local\n"  # the local step wrote at the mount path
    assert (volume / "seen.txt").read_text() == "from-local\n"  # the local-mode host read and wrote there
    assert not os.path.lexists(absent_top_level)


BELOW_EXISTING = """
release: r12-below
steps:
  - name: train
    chart: training/pytorchjob-distributed
    backend: sagemaker
    values:
      image: pytorch-training:2.5-cpu
      resources: {{nnodes: 1}}
      pvc: [{{name: pv-below, mount_path: {path}}}]
      train:
        command: ['cat {existing}/kept/note > {path}/seen.txt && ls {existing} > {path}/listed.txt']
"""


def test_a_local_mode_mount_point_below_an_existing_directory_is_made_in_the_host_only(
        tmp_path: Path, mlhome: Path) -> None:
    existing = tmp_path / "existing"  # stands for /mnt: a directory this machine has
    (existing / "kept").mkdir(parents=True)
    (existing / "kept" / "note").write_text("still here\n")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(BELOW_EXISTING.format(path=existing / "made" / "data", existing=existing)))
    result = cli(mlhome, "run", str(pipeline), "-B", "sagemaker.mode=local", "-B", "sagemaker.poll_seconds=0.3",
                 timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    volume = mlhome / "volumes" / "pv-below"
    assert (volume / "seen.txt").read_text() == "still here\n"  # the host's copy of the directory keeps its entries
    assert (volume / "listed.txt").read_text() == "kept\nmade\n"  # and has the mount point, in the host only
    assert sorted(p.name for p in existing.iterdir()) == ["kept"]  # this machine's directory gained nothing


def _in_namespace(argv: list[str], cwd: Path, as_user: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` run in a private mount namespace (in a user namespace of its own when not run as root)."""
    prefix = ["unshare", "--mount", "--propagation", "private"]
    if as_user or os.geteuid() != 0:
        prefix = [*(as_user or []), "unshare", "--map-root-user", "--mount", "--propagation", "private"]
    return subprocess.run([*prefix, *argv], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def _run_in_namespace(mounts: list[tuple[str, str]], script: str, cwd: Path,
                      as_user: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return _in_namespace(mount_argv(mounts, ["sh", "-c", script]), cwd, as_user)


def test_a_missing_path_below_an_existing_directory_is_made_in_a_copy(tmp_path: Path) -> None:
    volume, existing = tmp_path / "volume", tmp_path / "existing"
    volume.mkdir()
    (existing / "kept").mkdir(parents=True)
    (existing / "kept" / "note").write_text("still here\n")
    target = existing / "made" / "deeper"
    done = _run_in_namespace([(str(volume), str(target))],
                             f"echo seen > {target}/out && cat {existing}/kept/note && pwd", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"still here\n{tmp_path}\n"  # the copy keeps the directory's entries and the cwd
    assert (volume / "out").read_text() == "seen\n"
    assert sorted(p.name for p in existing.iterdir()) == ["kept"]


def test_an_ordinary_user_gets_a_top_level_mount_point_in_a_user_namespace(absent_top_level: str) -> None:
    if os.geteuid() != 0:
        as_user = None  # already an ordinary user
    elif shutil.which("setpriv"):
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    else:
        pytest.skip("needs setpriv to run as an ordinary user")
    shared = Path(tempfile.mkdtemp(prefix="mlrecipe-r12-"))
    try:
        shared.chmod(0o777)
        volume = shared / "volume"
        volume.mkdir()
        volume.chmod(0o777)
        done = _run_in_namespace([(str(volume), absent_top_level)],
                                 f"echo seen > {absent_top_level}/out && mkdir /another-{absent_top_level[1:]}",
                                 cwd=shared, as_user=as_user)
        assert done.returncode == 0, done.stderr
        assert (volume / "out").read_text() == "seen\n"
        assert not os.path.lexists(absent_top_level)
        assert not os.path.lexists(f"/another-{absent_top_level[1:]}")
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(f"/another-{absent_top_level[1:]}", ignore_errors=True)


def test_a_missing_mount_point_below_a_link_fails_with_one_error_line(tmp_path: Path) -> None:
    volume, real = tmp_path / "volume", tmp_path / "real"
    volume.mkdir()
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    done = _run_in_namespace([(str(volume), str(tmp_path / "link" / "fsx"))], "echo started", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"error: mount point {tmp_path}/link/fsx: {tmp_path}/link is a symbolic link; name the "
                           "path without links\n")
    assert list(real.iterdir()) == []


def test_inside_mode_refuses_a_root_it_did_not_make(tmp_path: Path) -> None:
    volume, existing = tmp_path / "volume", tmp_path / "existing"
    volume.mkdir()
    existing.mkdir()
    done = _in_namespace(["sh", str(MOUNT_SCRIPT_PATH), "inside", str(volume), str(existing / "data"), "--", "echo",
                          "started"], cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "error: mount points made 'inside' need a root of this script's own, and / is not one\n"
    assert list(existing.iterdir()) == []
